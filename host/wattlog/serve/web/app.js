/* app.js - the dashboard's start: wires each view's loader into the route, sets up the
   controls, reads whether this collector takes actions at all and each plug's colour (GET
   /api: common.js, loadIndex) before the first view draws, starts the live stream and
   keeps today's kWh current. Plain modern JavaScript modules, no build step:
   common.js, overview.js, history.js, energy.js, runs.js, health.js beside it. */

import { $, loadIndex, route, showError, state, views } from "./common.js";
import { loadHealth } from "./health.js";
import { loadEnergy, setupEnergy } from "./energy.js";
import { loadHistory, setupHistory } from "./history.js";
import { loadRuns } from "./runs.js";
import { drawCards, loadOverview, loadPeriod, setupToken, stream } from "./overview.js";

const TODAY_REFRESH_S = 60;

/* -- start -------------------------------------------------------------------------------- */

Object.assign(views, { overview: loadOverview, history: loadHistory, energy: loadEnergy,
                      runs: loadRuns, health: loadHealth });

async function start() {
  setupToken();
  setupHistory();
  setupEnergy();
  $("#token-button").textContent = state.token ? "Token ✓" : "Token";
  const moved = () => { if (location.hash !== state.routed) route(); };  // once per step
  window.addEventListener("popstate", moved);
  window.addEventListener("hashchange", moved);
  try {
    await loadIndex();
  } catch (e) {
    if (e.status === 401 || e.status === 403) {
      showError("Reading this collector needs the token", e);
      $("#token-form").hidden = false;
    }
  }
  route();
  stream();
  setInterval(() => {
    if (state.view === "overview") {
      Promise.all([loadPeriod("day"), loadPeriod("month")]).then(([d, m]) => {
        state.today = d; state.month = m;
        if (state.view === "overview") drawCards();
      }).catch(() => {});
    }
  }, TODAY_REFRESH_S * 1000);
}

window.wattlog = state;   // for a look from the browser's console, and the tests
start();

/* app.js - the dashboard's start: wires each view's loader into the route, sets up the
   controls, reads whether this collector takes actions at all (GET /api) and each plug's
   colour (common.js, loadColours) before the first view draws, starts the live stream and
   keeps today's kWh current. Plain modern JavaScript modules, no build step:
   common.js, overview.js, history.js, energy.js, health.js beside it. */

import { $, api, loadColours, route, showError, state, views } from "./common.js";
import { loadHealth } from "./health.js";
import { loadEnergy, setupEnergy } from "./energy.js";
import { loadHistory, setupHistory } from "./history.js";
import { drawCards, loadOverview, loadPeriod, setupToken, stream } from "./overview.js";

const TODAY_REFRESH_S = 60;

/* -- start -------------------------------------------------------------------------------- */

Object.assign(views, { overview: loadOverview, history: loadHistory, energy: loadEnergy,
                      health: loadHealth });

async function start() {
  setupToken();
  setupHistory();
  setupEnergy();
  $("#token-button").textContent = state.token ? "Token ✓" : "Token";
  const moved = () => { if (location.hash !== state.routed) route(); };  // once per step
  window.addEventListener("popstate", moved);
  window.addEventListener("hashchange", moved);
  const [index] = await Promise.allSettled([api("/api"), loadColours()]);
  if (index.status === "fulfilled") {
    state.actions = index.value.actions;
  } else if (index.reason.status === 401 || index.reason.status === 403) {
    showError("Reading this collector needs the token", index.reason);
    $("#token-form").hidden = false;
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

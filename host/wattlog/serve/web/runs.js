/* runs.js - what each appliance did (GET /api/runs, runs/report.py): a plug at a time, what
   was learned of it (a sentence), its state, its runs as a list (the answer's cells: start,
   end, duration, kWh, cost, peak W; this file formats no number of them), each run's power
   curve on a tap (GET /api/series of that span, drawn with uPlot), runs per week, and for an
   appliance that cycles (a fridge, a freezer) its duty cycle per day, the days above its
   normal marked. The view is in the URL: #runs?plug=washer&run=<start>. */

import { $, api, colorOf, el, go, showError, watts } from "./common.js";

const AROUND_S = 300;   // the curve shows this much before and after the run

export async function loadRuns(params) {
  let answer;
  try {
    answer = await api("/api/runs");
  } catch (e) {
    showError("Cannot show the runs", e);
    return;
  }
  const nodes = answer.plugs.map((p) => p.node);
  const node = nodes.includes(params.get("plug")) ? params.get("plug") : nodes[0];
  $("#runs-plugs").replaceChildren(...nodes.map((n) => el("button", {
    type: "button", "data-node": n, "aria-pressed": String(n === node),
    style: { borderColor: colorOf(n) }, onclick: () => go("runs", new URLSearchParams({ plug: n })),
  }, n)));
  const plug = answer.plugs.find((p) => p.node === node);
  if (!plug) {
    $("#runs-said").textContent = "No runs yet: the collector finds them as readings arrive.";
    for (const id of ["#runs-table", "#runs-weeks", "#runs-duty"]) $(id).replaceChildren();
    return;
  }
  $("#runs-said").textContent = plug.said + (plug.state === "running" || plug.state === "paused"
    ? " Now " + plug.state + "." : "");
  drawList(plug, Number(params.get("run")));
  drawWeeks(plug);
  drawDuty(plug);
}

function drawList(plug, chosen) {
  const head = ["start", "end", "duration", "kWh", "cost", "peak W"];
  const rows = plug.runs.map((run, i) => {
    const row = el("tr", { "data-start": String(run.start), tabindex: "0",
                           class: run.start === chosen ? "chosen" : "",
                           onclick: () => pick(plug.node, run.start) },
      ...plug.cells[i].map((c, k) => el("td", { text: c, "data-label": head[k] })));
    row.addEventListener("keydown", (e) => { if (e.key === "Enter") pick(plug.node, run.start); });
    return row;
  }).reverse();  // the latest first
  $("#runs-table").replaceChildren(
    el("thead", {}, el("tr", {}, ...head.map((h) => el("th", { scope: "col", text: h })))),
    el("tbody", {}, ...rows));
  const run = plug.runs.find((r) => r.start === chosen);
  if (run) drawCurve(plug.node, run);
  else $("#runs-chart").replaceChildren(el("p", { class: "hint", text: plug.runs.length
    ? "Tap a run for its power curve." : "No runs yet." }));
}

function pick(node, start) {
  go("runs", new URLSearchParams({ plug: node, run: String(start) }));
}

async function drawCurve(node, run) {
  const box = $("#runs-chart");
  if (typeof uPlot === "undefined") {
    box.replaceChildren(el("p", { class: "hint", text: "The chart library (uPlot) did not load." }));
    return;
  }
  const q = new URLSearchParams({ feed: node + "/power", start: String(run.start - AROUND_S),
                                  end: String(run.end + AROUND_S), points: "2000" });
  let s;
  try {
    s = await api("/api/series?" + q);
  } catch (e) {
    showError("Cannot draw the run", e);
    return;
  }
  const y = s.raw ? s.value : s.mean;
  const opts = {
    width: Math.max(280, box.clientWidth || 600), height: 240,
    series: [{}, { label: node, stroke: colorOf(node), width: 1, value: (u, v) => watts(v) }],
    axes: [{}, { values: (u, vals) => vals.map(watts), size: 70 }],
    hooks: { draw: [() => { window.wattlogRunDrawn = run.start; }] },
  };
  box.replaceChildren();
  window.wattlog.runChart = new uPlot(opts, [s.time, y], box);
}

function drawWeeks(plug) {
  $("#runs-weeks").replaceChildren(
    el("thead", {}, el("tr", {}, ...["week", "runs", "kWh", "cost"].map((h) =>
      el("th", { scope: "col", text: h })))),
    el("tbody", {}, ...plug.weeks.slice().reverse().map((w) => el("tr", {},
      el("td", { text: w.week }), el("td", { text: String(w.runs) }),
      el("td", { text: w.kwh.toFixed(3) }), el("td", { text: w.cost == null ? "–"
        : w.cost.toFixed(2) })))));
}

function drawDuty(plug) {
  const box = $("#runs-duty");
  if (!plug.duty) { box.replaceChildren(); $("#runs-duty-note").textContent = ""; return; }
  const pct = (x) => x == null ? "–" : (100 * x).toFixed(1) + " %";
  box.replaceChildren(
    el("thead", {}, el("tr", {}, ...["day", "duty cycle", "its normal", ""].map((h) =>
      el("th", { scope: "col", text: h })))),
    el("tbody", {}, ...plug.duty.days.slice().reverse().map((d) => el("tr", {
      "data-day": d.day, class: d.flagged ? "warn" : "" },
      el("td", { text: d.day }), el("td", { text: pct(d.duty) }), el("td", { text: pct(d.normal) }),
      el("td", { text: d.flagged ? "above its normal" : "" })))));
  const t = plug.duty.trend_pp_week;
  $("#runs-duty-note").textContent = "Duty cycle: the share of each day its runs took. " +
    (t == null ? "A trend needs a week of days." : "Over the last four weeks it moves " +
     (t >= 0 ? "+" : "") + t.toFixed(2) + " points a week.") +
    (plug.duty.flagged.length ? " Above its normal on " + plug.duty.flagged.join(", ") +
     ": a door left open, a failing seal or a tired compressor shows there first." : "");
}

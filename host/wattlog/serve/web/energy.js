/* energy.js - kWh (and cost) per day, week or month per plug: /api/energy (the table
   `wattlog energy` prints, in the collector's time zone) as stacked bars, a table and a CSV
   download made from the same rows.

   The bars are plain elements (a column per period, a segment per plug, heights in % of the
   axis's top): a kWh axis (gridlines at round steps, the top one at or above the largest
   total), the periods' dates under them (as many as fit: every k-th, counted back from the
   latest; the first and last kept inside the chart), and the values of one period (the
   latest, or the one hovered or tapped) said under the chart. The numbers for a screen
   reader or a keyboard are the table's: the chart is hidden from them. */

import { $, api, colorOf, el, go, kwh, showError, state, watchScroll } from "./common.js";

export const AXIS_STEPS = 4;     // about this many gridlines above zero

/* -- energy ------------------------------------------------------------------------------- */

export function energyRange(by, params) {
  const now = Math.floor(Date.now() / 1000);
  const back = { day: 14 * 86400, week: 12 * 7 * 86400, month: 365 * 86400 }[by];
  return { start: params.get("start") || String(now - back + 1), end: params.get("end") || "" };
}

export async function loadEnergy(params) {
  const by = ["day", "week", "month"].includes(params.get("by")) ? params.get("by") : "day";
  for (const b of document.querySelectorAll("[data-by]")) {
    b.setAttribute("aria-pressed", b.dataset.by === by ? "true" : "false");
  }
  const r = energyRange(by, params);
  let t;
  try {
    t = await api("/api/energy?by=" + by + "&start=" + encodeURIComponent(r.start) +
                  (r.end ? "&end=" + encodeURIComponent(r.end) : ""));
  } catch (e) {
    showError("Cannot show the energy", e);
    return;
  }
  if (!params.get("start")) t = dropEmptyStart(t);
  state.energy = t;
  const tariff = t.tariff ? " Cost with the tariff " + tariffWords(t.tariff) + "." : "";
  $("#energy-note").textContent = "kWh per " + by + " in the collector's time zone (" +
    t.timezone + "), from each plug's energy counter." + tariff + " " + t.notes.join(" ");
  drawBars(t);
  drawEnergyTable(t);
}

export function dropEmptyStart(t) {
  /* the default range reaches back further than young data: its empty first periods go */
  const first = t.totals.kwh.findIndex((x) => x != null);
  if (first <= 0) return t;
  const cut = (row) => {
    const out = Object.assign({}, row);
    for (const [k, v] of Object.entries(row)) if (Array.isArray(v)) out[k] = v.slice(first);
    return out;
  };
  return Object.assign({}, t, { periods: t.periods.slice(first), plugs: t.plugs.map(cut),
                                totals: cut(t.totals),
                                cells: Object.assign({}, t.cells, { rows: t.cells.rows.slice(first) }) });
}

export function tariffWords(tf) {
  const cur = tf.currency || "";
  if (tf.price != null) return tf.price + " " + cur + "/kWh";
  if (tf.day_price != null) {
    return tf.day_price + " " + cur + "/kWh by day, " + tf.night_price + " " + cur +
      "/kWh at night (" + tf.night_start + " to " + tf.night_end + ")";
  }
  return JSON.stringify(tf);
}

export function axisScale(top) {
  /* [step, top of the axis]: a round step (1, 2, 2.5 or 5 times a power of ten) that cuts
     the largest total into about AXIS_STEPS, and the first multiple of it at or above it */
  const raw = Math.max(top, 0.04) / AXIS_STEPS, ten = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].find((f) => f * ten >= raw * (1 - 1e-9)) * ten;
  return [step, Math.max(Math.ceil(top / step - 1e-9), 1) * step];
}

export function shortLabel(period, by) {
  /* what fits under a bar: 24 Nov, W47, Nov 2026 (the API's labels are the collector's
     local dates: read as dates, never moved to the browser's zone) */
  if (by === "week") return period.label.slice(5);
  const [y, m, d] = period.label.split("-").map(Number);
  if (by === "year" || !m) return String(y);
  const date = new Date(Date.UTC(y, m - 1, d || 1));
  return date.toLocaleDateString([], by === "day" ? { day: "numeric", month: "short", timeZone: "UTC" }
    : { month: "short", year: "numeric", timeZone: "UTC" });
}

export function periodWords(t, k) {
  const p = t.periods[k];
  return p.label + (t.by === "day" && p.hours !== 24 ? " (" + p.hours + " h)" : "");
}

export function drawBars(t) {
  const totals = t.totals.kwh.map((x) => x || 0);
  const [step, top] = axisScale(Math.max(...totals, 0));
  let digits = 0;   // enough decimals for every multiple of the step (2.5 needs one)
  while (digits < 6 && Math.abs(step * 10 ** digits - Math.round(step * 10 ** digits)) > 1e-6) digits++;
  const n = Math.round(top / step), ticks = [];
  for (let i = 0; i <= n; i++) {
    ticks.push(el("div", { class: "tick", style: { bottom: (100 * i / n) + "%" } },
      el("span", { text: (i * step).toFixed(digits) + (i === n ? " kWh" : "") })));
  }
  $("#bars-area").replaceChildren(...ticks, $("#bars"));
  const bars = $("#bars");
  bars.replaceChildren(...t.periods.map((period, k) => el("div", {
    class: "col", "data-k": String(k), title: periodWords(t, k) + ": " + kwh(t.totals.kwh[k]),
    onpointerenter: (e) => { if (e.pointerType === "mouse") pickBar(t, k); },
    onclick: () => pickBar(t, k) },
    ...t.plugs.map((p) => p.kwh[k] ? el("div", { class: "seg", "data-node": p.node,
      "data-kwh": String(p.kwh[k]), title: p.node + " " + period.label + ": " + kwh(p.kwh[k]),
      style: { height: (100 * p.kwh[k] / top) + "%", background: colorOf(p.node) } }) : null))));
  drawDates(t);
  pickBar(t, t.periods.length - 1);
  $("#bars-legend").replaceChildren(...t.plugs.map((p) => el("span", {},
    el("i", { style: { background: colorOf(p.node) } }), p.node)));
}

export function drawDates(t) {
  /* every k-th period's date under its column, counted back from the latest, k as small as
     lets them fit the columns' width (again when it changes); each column holds its own
     date, so the dates follow the columns wherever the layout puts them */
  const cols = [...$("#bars").children];
  if (!cols.length) return;
  const labels = cols.map((c, k) => c.querySelector(".date") ||
    c.appendChild(el("span", { class: "date", text: shortLabel(t.periods[k], t.by) })));
  for (const l of labels) l.hidden = false;
  const widest = Math.max(...labels.map((l) => l.offsetWidth));
  const pitch = cols.length > 1 ? cols[1].offsetLeft - cols[0].offsetLeft : cols[0].offsetWidth;
  const every = Math.max(1, Math.ceil((widest + 8) / Math.max(pitch, 1)));
  labels.forEach((l, k) => { l.hidden = (cols.length - 1 - k) % every !== 0; });
}

export function pickBar(t, k) {
  /* one period's values under the chart: the total (and its cost), then each plug's, in
     its colour */
  for (const c of $("#bars").children) c.classList.toggle("picked", c.dataset.k === String(k));
  const parts = t.plugs.filter((p) => p.kwh[k] != null).map((p) => el("span", { class: "part" },
    el("i", { style: { background: colorOf(p.node) } }), p.node + " " + kwh(p.kwh[k])));
  const cost = t.totals.cost && t.totals.cost[k] != null
    ? " · " + t.totals.cost[k].toFixed(2) + " " + (t.tariff.currency || "") : "";
  $("#bars-value").replaceChildren(
    el("b", { text: periodWords(t, k) + ": " + kwh(t.totals.kwh[k]) + cost }),
    ...(parts.length ? parts : [el("span", { text: " no readings" })]));
}

export function energyRows(t) {
  /* the API's own cells (energy.py's cells(): what `wattlog energy` prints too); null where
     there is no data */
  return t.cells;
}

export function drawEnergyTable(t) {
  const { head, rows, total } = energyRows(t);
  const table = $("#energy-table");
  table.replaceChildren(
    el("thead", {}, el("tr", {}, ...head.map((h) => el("th", { scope: "col", text: h })))),
    el("tbody", {}, ...rows.map((r) => el("tr", {}, ...r.map((c, i) =>
      i ? el("td", { text: c == null ? "–" : c }) : el("th", { scope: "row", text: c }))))),
    el("tfoot", {}, el("tr", {}, ...total.map((c, i) =>
      i ? el("td", { text: c == null ? "–" : c }) : el("th", { scope: "row", text: c })))));
}

export function csvField(s) { return /[",\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s; }

export function downloadEnergyCsv() {
  const t = state.energy;
  if (!t) return;
  const { head, rows, total } = energyRows(t);
  const text = [head, ...rows, total].map((r) => r.map((c) => csvField(c == null ? "" : c))
    .join(",")).join("\n") + "\n";
  const a = el("a", { href: URL.createObjectURL(new Blob([text], { type: "text/csv" })),
                      download: "wattlog-energy-by-" + t.by + ".csv" });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}

export function setupEnergy() {
  for (const b of document.querySelectorAll("[data-by]")) {
    b.addEventListener("click", () => go("energy", new URLSearchParams({ by: b.dataset.by })));
  }
  $("#energy-csv").addEventListener("click", downloadEnergyCsv);
  watchScroll($("#energy-wrap"));
  new ResizeObserver(() => {   // how many dates fit changes with the width
    if (state.view === "energy" && state.energy && $("#bars").clientWidth) drawDates(state.energy);
  }).observe($("#bars"));
}

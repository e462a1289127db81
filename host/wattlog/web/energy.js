/* energy.js - kWh (and cost) per day, week or month per plug: /api/energy (the table
   `wattlog energy` prints, in the collector's time zone) as stacked bars, a table and a CSV
   download made from the same rows. */

import { $, api, colorOf, el, go, kwh, showError, state } from "./common.js";

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
                                totals: cut(t.totals) });
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

export function drawBars(t) {
  const totals = t.totals.kwh.map((x) => x || 0);
  const top = Math.max(...totals, 1e-9);
  const bars = $("#bars");
  bars.replaceChildren(...t.periods.map((period, k) => el("div", {
    class: "col", title: period.label + ": " + kwh(t.totals.kwh[k]) },
    ...t.plugs.map((p) => p.kwh[k] ? el("div", { class: "seg", "data-node": p.node,
      "data-kwh": String(p.kwh[k]), title: p.node + " " + period.label + ": " + kwh(p.kwh[k]),
      style: { height: (100 * p.kwh[k] / top) + "%", background: colorOf(p.node) } }) : null))));
  $("#bars-legend").replaceChildren(...t.plugs.map((p) => el("span", {},
    el("i", { style: { background: colorOf(p.node) } }), p.node)));
}

export function energyRows(t) {
  const cost = !!t.tariff;
  const cur = cost ? t.tariff.currency || "" : "";
  const head = [t.by];
  for (const p of t.plugs) head.push(p.node + " kWh", ...(cost ? [p.node + " " + cur] : []));
  head.push("total kWh", ...(cost ? ["total " + cur] : []));
  const lines = t.plugs.concat([Object.assign({ node: "total" }, t.totals)]);
  const rows = t.periods.map((period, k) => {
    const label = period.label + ((period.hours === 24 || period.hours === 168 ||
      t.by === "month" || t.by === "year") ? "" : " (" + period.hours + "h)");
    const row = [label];
    for (const l of lines) {
      row.push(l.kwh[k] == null ? "" : l.kwh[k].toFixed(3));
      if (cost) row.push(l.cost[k] == null ? "" : l.cost[k].toFixed(2));
    }
    return row;
  });
  const total = ["total"];
  for (const l of lines) {
    total.push(l.total_kwh == null ? "" : l.total_kwh.toFixed(3));
    if (cost) total.push(l.total_cost == null ? "" : l.total_cost.toFixed(2));
  }
  return { head, rows, total };
}

export function drawEnergyTable(t) {
  const { head, rows, total } = energyRows(t);
  const table = $("#energy-table");
  table.replaceChildren(
    el("thead", {}, el("tr", {}, ...head.map((h) => el("th", { scope: "col", text: h })))),
    el("tbody", {}, ...rows.map((r) => el("tr", {}, ...r.map((c, i) =>
      i ? el("td", { text: c || "–" }) : el("th", { scope: "row", text: c }))))),
    el("tfoot", {}, el("tr", {}, ...total.map((c, i) =>
      i ? el("td", { text: c || "–" }) : el("th", { scope: "row", text: c })))));
}

export function csvField(s) { return /[",\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s; }

export function downloadEnergyCsv() {
  const t = state.energy;
  if (!t) return;
  const { head, rows, total } = energyRows(t);
  const text = [head, ...rows, total].map((r) => r.map(csvField).join(",")).join("\n") + "\n";
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
}

/* health.js - the plugs' and the collector's figures (/api/plugs, /api/health) as tables,
   each plug's last log lines (as text), and the plug command `info` (needs the token). A plug
   whose Wi-Fi signal is under WEAK_DBM has it marked, and a sentence under the table says
   what that costs and what helps. The collector's links to the broker and InfluxDB are said
   in words, marked when down (the stream's "links" event reloads this view). Bytes written
   are per day as measured (diskwrites.py): a partial day is said to be one, and the average
   is over whole days only, once there is one. */

import { $, ago, api, bytes, duration, el, linkWords, showError, state, when } from "./common.js";

/* -- health ------------------------------------------------------------------------------- */

export const WEAK_DBM = -80;   // below this a plug's Wi-Fi is weak (what Tasmota's and ESPHome's users go by)

export function rowsTable(table, rows) {
  /* rows: [heading, value, class of the value's cell (optional), data-field (optional)] */
  table.replaceChildren(el("tbody", {}, ...rows.map(([k, v, look, field]) =>
    el("tr", field ? { "data-field": field } : {}, el("th", { scope: "row", text: k }),
       el("td", { text: v == null ? "–" : String(v), class: look || "" })))));
}

export function linkRow(name, heading, link) {
  const fine = link.state === "up" || link.state === "elsewhere";
  return [heading, linkWords(name, link), fine ? "" : "warn", name];
}

export function writtenRows(h) {
  /* a row per day measured, newest first; a partial day says so; the average once a whole
     day was measured */
  if (!h.written_per_day) return [["written to disk", h.note || "–"]];
  const days = h.written_per_day.slice().reverse();
  const rows = days.map((d, i) => ["written " + d.day, bytes(d.bytes) + (d.whole ? ""
    : i === 0 ? " so far (partial day: " + duration(d.measured_s) + " measured)"
      : " (partial day: " + duration(d.measured_s) + " measured)"), "", "written"]);
  if (h.written_per_day_average != null) {
    const n = days.filter((d) => d.whole).length;
    rows.push(["written per day, average", bytes(h.written_per_day_average) + " (of " + n +
               " whole day" + (n === 1 ? "" : "s") + ")", "", "written-average"]);
  }
  return rows;
}

export async function loadHealth() {
  let h, plugs;
  try {
    [h, plugs] = await Promise.all([api("/api/health"), api("/api/plugs")]);
  } catch (e) {
    showError("Cannot show the health", e);
    return;
  }
  rowsTable($("#collector-table"), [
    ...(h.broker ? [linkRow("broker", "broker", h.broker)] : []),
    ...(h.influx ? [linkRow("influx", "InfluxDB", h.influx),
                    ["InfluxDB points", h.influx.behind_points + " to send, " +
                     h.influx.sent_points + " sent since the start"]] : []),
    ["ready", h.ready ? "yes" : "no (recovering)"],
    ["up since", when(h.started)],
    ["last commit", h.last_commit ? when(h.last_commit) + " (" + ago(h.last_commit) + ")" : "none yet"],
    ["commits", h.commits],
    ["pending readings", h.pending_points + (h.pending_age_s != null ? ", the oldest waiting " + h.pending_age_s + " s" : "")],
    ["readings", h.readings], ["lost readings", h.lost_readings],
    ["refused", Object.entries(h.refused || {}).map(([k, n]) => k + ": " + n).join(", ") || "none"],
    ["disk free", h.disk_free_bytes == null ? h.disk_error : bytes(h.disk_free_bytes) + " of " + bytes(h.disk_size_bytes)],
    ...writtenRows(h),
  ]);
  $("#written-note").textContent = h.written_per_day ? "Bytes this collector wrote towards " +
    "its disk (the SD card's wear) per day in its time zone, as measured. A partial day is " +
    "one it did not run through from midnight to midnight: today so far, and the day it " +
    "started, which holds the start-up's work (checking the files, rebuilding summaries)." : "";
  const cols = ["plug", "online", "last seen", "firmware", "boots", "acked seq", "gaps", "lost",
                "ring drops", "meter faults", "Wi-Fi", "SP3S protocol", "relay", ""];
  const table = $("#plugs-table");
  table.replaceChildren(
    el("thead", {}, el("tr", {}, ...cols.map((c) => el("th", { scope: "col", text: c })))),
    el("tbody", {}, ...plugs.plugs.map((p) => {
      const faults = p.meter_faults ? (p.meter_faults.reported || 0) +
        (p.meter_faults.last ? " (last: " + p.meter_faults.last + ")" : "") : "–";
      const rssi = p.state && p.state.rssi != null ? p.state.rssi + " dBm" +
        (p.state.rssi < WEAK_DBM ? " (weak)" : "") : "not reported";
      const info = el("button", { type: "button", onclick: () => command(p.node, info) }, "info");
      info.disabled = !state.token || !p.online;
      info.title = state.token ? "ask the plug for its counters" : "needs the token";
      // each cell names its column (data-label): on a phone a row is a stack of them
      const row = el("tr", { "data-node": p.node },
        ...[p.node, p.online ? "yes" : "no", p.last_seen ? ago(p.last_seen) : "never",
            p.firmware, p.boots, p.acked_seq, p.gaps, p.lost, p.ring_drops, faults, rssi,
            p.broadlink || "ask (info)", p.state ? p.state.relay : null].map((v, i) => i
          ? el("td", { text: v == null ? "–" : String(v), "data-label": cols[i] })
          : el("th", { scope: "row", text: v })),
        el("td", { "data-label": "" }, info));
      row.children[cols.indexOf("Wi-Fi")].dataset.field = "rssi";
      if (/weak/.test(rssi)) row.children[cols.indexOf("Wi-Fi")].classList.add("warn");
      return row;
    })));
  const weak = plugs.plugs.filter((p) => p.state && p.state.rssi != null && p.state.rssi < WEAK_DBM);
  $("#signal-note").textContent = weak.length ? weak.map((p) => p.node + " (" + p.state.rssi +
    " dBm)").join(", ") + (weak.length === 1 ? " has" : " have") + " a weak Wi-Fi signal: below " +
    WEAK_DBM + " dBm readings may come late or be resent, and a switch may take a while; the " +
    "plug nearer the access point, or a repeater, helps." : "";
  $("#runs-note").textContent = plugs.plugs.map((p) => p.runs && p.runs.note).filter(Boolean)
    .join(" ");
  $("#plug-logs").replaceChildren(...plugs.plugs.filter((p) => p.log && p.log.length).map((p) =>
    el("details", {}, el("summary", { text: p.node + ": last " + p.log.length + " log lines" }),
       el("pre", { class: "log", text: p.log.map((l) => when(l.time) + "  " + l.text).join("\n") }))));
}

export async function command(node, button) {
  button.disabled = true;
  try {
    const out = await api("/api/plugs/" + encodeURIComponent(node) + "/cmd",
                          { method: "POST", body: { cmd: "info" } });
    button.title = out.answer;
    showError(null);
    loadHealth();
  } catch (e) {
    showError("The plug " + node + " did not answer", e);
  } finally {
    button.disabled = false;
  }
}

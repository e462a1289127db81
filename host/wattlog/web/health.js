/* health.js - the plugs' and the collector's figures (/api/plugs, /api/health) as tables,
   each plug's last log lines (as text), and the plug command `info` (needs the token). A plug
   whose Wi-Fi signal is under WEAK_DBM has it marked, and a sentence under the table says
   what that costs and what helps. */

import { $, ago, api, bytes, el, showError, state, when } from "./common.js";

/* -- health ------------------------------------------------------------------------------- */

export const WEAK_DBM = -80;   // below this a plug's Wi-Fi is weak (what Tasmota's and ESPHome's users go by)

export function rowsTable(table, rows) {
  table.replaceChildren(el("tbody", {}, ...rows.map(([k, v]) =>
    el("tr", {}, el("th", { scope: "row", text: k }), el("td", { text: v == null ? "–" : String(v) })))));
}

export async function loadHealth() {
  let h, plugs;
  try {
    [h, plugs] = await Promise.all([api("/api/health"), api("/api/plugs")]);
  } catch (e) {
    showError("Cannot show the health", e);
    return;
  }
  const perDay = Object.entries(h.written_per_day || {}).map(([d, n]) => d + ": " + bytes(n));
  rowsTable($("#collector-table"), [
    ["ready", h.ready ? "yes" : "no (recovering)"],
    ["up since", when(h.started)],
    ["last commit", h.last_commit ? when(h.last_commit) + " (" + ago(h.last_commit) + ")" : "none yet"],
    ["commits", h.commits],
    ["pending readings", h.pending_points + (h.pending_age_s != null ? ", the oldest waiting " + h.pending_age_s + " s" : "")],
    ["readings", h.readings], ["lost readings", h.lost_readings],
    ["refused", Object.entries(h.refused || {}).map(([k, n]) => k + ": " + n).join(", ") || "none"],
    ["disk free", h.disk_free_bytes == null ? h.disk_error : bytes(h.disk_free_bytes) + " of " + bytes(h.disk_size_bytes)],
    ["written per day (SD card)", perDay.join(", ") || h.note || "–"],
    ["written per day, average since start", bytes(h.written_per_day_average)],
  ]);
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
      const row = el("tr", { "data-node": p.node },
        ...[p.node, p.online ? "yes" : "no", p.last_seen ? ago(p.last_seen) : "never",
            p.firmware, p.boots, p.acked_seq, p.gaps, p.lost, p.ring_drops, faults, rssi,
            p.broadlink || "ask (info)", p.state ? p.state.relay : null].map((v, i) => i ? el("td", { text: v == null ? "–" : String(v) })
          : el("th", { scope: "row", text: v })),
        el("td", {}, info));
      row.children[cols.indexOf("Wi-Fi")].dataset.field = "rssi";
      if (/weak/.test(rssi)) row.children[cols.indexOf("Wi-Fi")].classList.add("warn");
      return row;
    })));
  const weak = plugs.plugs.filter((p) => p.state && p.state.rssi != null && p.state.rssi < WEAK_DBM);
  $("#signal-note").textContent = weak.length ? weak.map((p) => p.node + " (" + p.state.rssi +
    " dBm)").join(", ") + (weak.length === 1 ? " has" : " have") + " a weak Wi-Fi signal: below " +
    WEAK_DBM + " dBm readings may come late or be resent, and a switch may take a while; the " +
    "plug nearer the access point, or a repeater, helps." : "";
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

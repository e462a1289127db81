/* overview.js - a card per plug (live power, today's and this month's kWh and cost, online
   and last seen, gaps in words, the relay switch) and one with the sum; the live stream that
   keeps them current; the token, entered once and kept in this browser's localStorage.

   The stream is /api/stream read with fetch() (EventSource cannot send the token header): it
   reconnects by itself after a second, then up to every 10 s. The header says in words and
   colour whether the page is live: the stream to the collector, and the collector's links
   (the stream's "links" event, first and on each change): a broker it cannot reach stops
   every plug's news, so the dot is red; InfluxDB failing is amber (the page's data is fine).
   The relay switch says the state and the action apart ("On — switch off"); without the
   token it says only the state, nothing is sent, and a sentence says why. */

import { $, ApiError, ago, api, colorOf, el, kwh, linkWords, loadIndex, money, route, sentence,
  showError, since, state, views, watts } from "./common.js";

/* -- overview ----------------------------------------------------------------------------- */

export async function loadOverview() {
  try {
    const [plugs, today, month] = await Promise.all([
      api("/api/plugs"), loadPeriod("day"), loadPeriod("month")]);
    for (const p of plugs.plugs) state.plugs.set(p.node, p);
    state.today = today; state.month = month;
    drawCards();
  } catch (e) {
    showError("Cannot show the plugs", e);
  }
}

export async function loadPeriod(by) {
  const now = Math.floor(Date.now() / 1000);
  const t = await api("/api/energy?by=" + by + "&start=" + (now - 60) + "&end=" + now);
  const k = t.periods.length - 1;
  if (t.tariff) state.currency = t.tariff.currency || "";
  const out = new Map();
  for (const p of t.plugs) out.set(p.node, { kwh: p.kwh[k], cost: p.cost ? p.cost[k] : null });
  out.set("", { kwh: t.totals.kwh[k], cost: t.totals.cost ? t.totals.cost[k] : null });
  return out;
}

export function drawCards() {
  const cards = $("#cards");
  const nodes = [...state.plugs.keys()].sort();
  cards.replaceChildren(totalCard(), ...nodes.map(plugCard));
  if (!nodes.length) cards.append(el("p", { text: "No plug has reported to this collector yet." }));
  controlNote();
  document.body.dataset.cards = "filled";
}

export function totalCard() {
  const card = el("article", { class: "card total", "data-node": "" },
    el("h3", { text: "All plugs" }),
    el("div", { class: "power", "data-field": "power" }),
    el("div", { class: "status", "data-field": "status" }),
    periodList(""));
  updateTotal(card);
  return card;
}

export function updateTotal(card) {
  card = card || document.querySelector('.card.total');
  if (!card) return;
  let sum = 0, online = 0;
  for (const p of state.plugs.values()) {
    if (p.online && p.state && p.state.power != null) { sum += p.state.power; online++; }
  }
  card.querySelector('[data-field="power"]').textContent = watts(sum);
  card.querySelector('[data-field="status"]').textContent =
    online + " of " + state.plugs.size + " plugs online";
}

export function periodList(node) {
  const t = state.today && state.today.get(node), m = state.month && state.month.get(node);
  return el("dl", {},
    el("dt", { text: "today" }), el("dd", { "data-field": "today",
      text: t ? kwh(t.kwh) + money(t.cost) : "–" }),
    el("dt", { text: "this month" }), el("dd", { "data-field": "month",
      text: m ? kwh(m.kwh) + money(m.cost) : "–" }));
}

export function plugCard(node) {
  const card = el("article", { class: "card", "data-node": node },
    el("h3", { text: node, style: { borderLeft: "4px solid " + colorOf(node), paddingLeft: ".4rem" } }),
    el("div", { class: "power", "data-field": "power" }),
    el("div", { class: "status", "data-field": "status" }),
    periodList(node),
    el("button", { type: "button", class: "relay", "data-field": "relay",
                   onclick: () => switchRelay(node) }),
    el("div", { class: "status", "data-field": "said", role: "status" }));
  updateCard(node, card);
  return card;
}

export function cardOf(node) {
  return [...document.querySelectorAll(".card[data-node]")].find((c) => c.dataset.node === node);
}

export function updateCard(node, card) {
  card = card || cardOf(node);
  const p = state.plugs.get(node);
  if (!card || !p) return;
  const st = p.state || {};
  card.classList.toggle("offline", !p.online);
  card.querySelector('[data-field="power"]').textContent = p.online ? watts(st.power) : "offline";
  const seen = Math.max(p.last_seen || 0, st.time || 0, p.state_heard || 0);
  const words = [p.online ? "online" : p.online === false ? "offline" : "status unknown",
                 "last seen " + ago(seen)];
  if (p.gaps) words.push(p.gaps + (p.gaps === 1 ? " gap" : " gaps") + " in its data");
  if (p.lost) words.push(p.lost + " readings lost");
  const status = card.querySelector('[data-field="status"]');
  status.textContent = words.join(", ");
  status.classList.toggle("warn", !p.online || !!p.gaps || !!p.lost);
  const relay = card.querySelector('[data-field="relay"]');
  const want = relay.dataset.want;   // set while a switch is under way
  relay.disabled = !state.token || !state.actions || !p.online || !!want || !st.relay;
  relay.dataset.relay = st.relay || "";
  relay.textContent = relayWords(st.relay, !relay.disabled, want);
  relay.title = !st.relay ? "" : "the relay is " + st.relay.toLowerCase() + (relay.disabled
    ? (state.token ? "" : "; switching needs the token") : "; press to switch it " +
      (st.relay === "ON" ? "off" : "on"));
}

export function relayWords(relay, can, want) {
  /* the state, then what pressing does: "On — switch off"; the state alone when it cannot */
  const now = { ON: "On", OFF: "Off" }[relay];
  if (!now) return "Relay state unknown";
  if (want) return now + " — switching " + want.toLowerCase() + "…";
  return now + (can ? " — switch " + (relay === "ON" ? "off" : "on") : "");
}

export function controlNote() {
  $("#control-note").textContent = !state.actions
    ? "Switching is off: this collector has no token file (wattlog provision makes one)."
    : state.token ? "" : "The relay switches are read-only: switching needs the collector's " +
      "token. Enter it under Token (it stays in this browser).";
}

export async function switchRelay(node) {
  const p = state.plugs.get(node);
  const card = cardOf(node);
  if (!state.token || !p || !card) return;          // read-only without the token
  const relay = card.querySelector('[data-field="relay"]');
  const said = card.querySelector('[data-field="said"]');
  const want = p.state && p.state.relay === "ON" ? "OFF" : "ON";
  relay.dataset.want = want;
  said.textContent = "";
  updateCard(node);
  try {
    const out = await api("/api/plugs/" + encodeURIComponent(node) + "/relay",
                          { method: "POST", body: { relay: want } });
    if (out.state) p.state = Object.assign({}, p.state, out.state);
    said.textContent = "";
  } catch (e) {
    said.textContent = e instanceof ApiError ? e.message : sentence(e.message);
  } finally {
    delete relay.dataset.want;
    updateCard(node);
  }
}

/* -- the live stream ---------------------------------------------------------------------- */

export function showLive() {
  /* the header: live (green), InfluxDB failing (amber, still live), or why not (red) */
  const { stream, links } = state.live;
  const broker = links && links.broker, influx = links && links.influx;
  let text = "live", look = "ok", title = "";
  if (!stream) {
    text = "collector unreachable, reconnecting…"; look = "down";
  } else if (broker && broker.state !== "up") {
    text = broker.state === "down" ? "broker unreachable since " + since(broker.since)
      : "connecting to the broker…";
    look = "down"; title = linkWords("broker", broker);
  } else if (influx && influx.state === "down") {
    text = "live · InfluxDB unreachable since " + since(influx.since);
    look = "warn"; title = linkWords("influx", influx);
  }
  const live = $("#live");
  live.textContent = text;
  live.title = title;
  live.className = "live " + look;
  document.body.dataset.live = look === "down" ? "0" : "1";
}

export function setStream(up) {
  state.live = { stream: up, links: up ? state.live.links : null };
  showLive();
}

export async function stream() {
  let wait = 1000;
  for (;;) {
    try {
      const headers = state.token ? { Authorization: "Bearer " + state.token } : {};
      const resp = await fetch("/api/stream", { headers });
      if (!resp.ok) throw new Error("the stream answered " + resp.status);
      setStream(true);
      wait = 1000;
      if (state.view === "overview" && document.body.dataset.cards) loadOverview();
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          onEvent(buf.slice(0, cut));
          buf = buf.slice(cut + 2);
        }
      }
    } catch (e) {
      /* the collector stopped or restarted: said in the header, tried again below */
    }
    setStream(false);
    await new Promise((r) => setTimeout(r, wait));
    wait = Math.min(wait * 2, 10000);
  }
}

export function onEvent(block) {
  let kind = "message", data = "";
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) kind = line.slice(6).trim();
    else if (line.startsWith("data:")) data += line.slice(5).trim();
  }
  if (!data) return;
  let ev;
  try { ev = JSON.parse(data); } catch (e) { return; }
  if (kind === "links") {
    state.live.links = ev;
    showLive();
    if (state.view === "health") views.health();
    return;
  }
  const node = ev.node;
  if (typeof node !== "string") return;
  let p = state.plugs.get(node);
  if (!p) {
    p = { node, online: ev.online, state: null };
    state.plugs.set(node, p);
    if (state.view === "overview" && document.body.dataset.cards) drawCards();
  }
  p.online = !!ev.online;
  if (kind === "state") {
    p.state = {};
    for (const k of ["time", "power", "voltage", "current", "energy", "relay", "rssi"]) {
      p.state[k] = ev[k];
    }
    p.state_heard = Date.now() / 1000;
  }
  updateCard(node);
  updateTotal();
}

/* -- token -------------------------------------------------------------------------------- */

export function setupToken() {
  const form = $("#token-form");
  $("#token-button").addEventListener("click", () => {
    form.hidden = !form.hidden;
    if (!form.hidden) $("#token-input").focus();
  });
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    state.token = $("#token-input").value.trim();
    if (state.token) localStorage.setItem("wattlog-token", state.token);
    else localStorage.removeItem("wattlog-token");
    $("#token-input").value = "";
    form.hidden = true;
    afterToken();
  });
  $("#token-forget").addEventListener("click", () => {
    state.token = "";
    localStorage.removeItem("wattlog-token");
    form.hidden = true;
    afterToken();
  });
}

export async function afterToken() {
  $("#token-button").textContent = state.token ? "Token ✓" : "Token";
  controlNote();
  for (const node of state.plugs.keys()) updateCard(node);
  await loadIndex().catch(() => {});   // refused before, if reading needs the token
  route();
}

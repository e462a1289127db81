/* app.js - wattlog's dashboard: overview, history, energy and health views over the
   collector's HTTP API (api.py), plain modern JavaScript with no build step.

   Design notes:
   - Text from the API (plug ids, log lines, firmware strings, error messages) only ever goes
     into the page as textContent: never innerHTML. The server's Content-Security-Policy adds
     a second wall (no inline script runs).
   - The view is in the URL's fragment (#history?feeds=a,b&start=...&end=now): shareable; each
     zoom or pan is a history entry, so the back button goes back a step.
   - The live stream is /api/stream read with fetch() (not EventSource, which cannot send the
     token header): reconnects by itself, after a second, then up to every 10 s.
   - Every API failure is shown as the API's own sentence (or one of ours), never a blank.
   - The history chart is uPlot: a mean line per plug with a min-max band under it (a short
     spike in a month view stays visible), null = no readings = a gap. It asks for about one
     point per pixel of the chart's width, so a zoom fetches a finer series. */
"use strict";

const PALETTE = ["#0b6bcb", "#d9480f", "#2b8a3e", "#ae3ec9", "#e8590c", "#1098ad", "#c2255c",
  "#5c940d", "#7048e8", "#f08c00", "#0c8599", "#a61e4d", "#364fc7", "#66a80f", "#9c36b5",
  "#e67700", "#087f5b", "#c92a2a", "#495057", "#1864ab"];
const MIN_SPAN_S = 60;             // the deepest zoom: six 10 s slots
const MAX_SPAN_S = 2 * 366 * 86400;
const LIVE_REFRESH_S = 30;         // a history view that ends "now" follows the present
const TODAY_REFRESH_S = 60;

const state = {
  token: localStorage.getItem("wattlog-token") || "",
  plugs: new Map(),      // node -> health answer, its state kept current by the stream
  colors: new Map(),     // node -> colour, fixed for the session
  today: null, month: null, currency: "",
  actions: true,         // the collector has a token set (GET /api says so)
  chart: null, historyKey: "", historyTimer: null, historyFetch: null,
  energy: null,
  view: "",
};

const $ = (sel) => document.querySelector(sel);

function el(tag, props, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "text") e.textContent = v;
    else if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "style") Object.assign(e.style, v);
    else e.setAttribute(k, v);
  }
  for (const kid of kids) if (kid != null) e.append(kid);   // strings become text nodes
  return e;
}

function colorOf(node) {
  if (!state.colors.has(node)) state.colors.set(node, PALETTE[state.colors.size % PALETTE.length]);
  return state.colors.get(node);
}

/* -- the API ------------------------------------------------------------------------------ */

class ApiError extends Error {
  constructor(message, status) { super(message); this.status = status; }
}

async function api(path, options = {}) {
  const headers = {};
  if (state.token) headers.Authorization = "Bearer " + state.token;
  if (options.body) headers["Content-Type"] = "application/json";
  let resp;
  try {
    resp = await fetch(path, { method: options.method || "GET", headers, signal: options.signal,
      body: options.body ? JSON.stringify(options.body) : undefined });
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new ApiError("The collector cannot be reached just now; is it running? The page " +
                       "tries again by itself.", 0);
  }
  let body = null;
  try { body = await resp.json(); } catch (e) { body = null; }
  if (!resp.ok) {
    const said = body && typeof body.error === "string" ? body.error
      : "the collector answered " + resp.status + " " + resp.statusText;
    throw new ApiError(sentence(said), resp.status);
  }
  return body;
}

function sentence(text) {
  text = String(text);
  text = text.charAt(0).toUpperCase() + text.slice(1);
  return /[.!?]$/.test(text) ? text : text + ".";
}

function showError(what, err) {
  const box = $("#error");
  if (!err) { box.hidden = true; box.textContent = ""; return; }
  box.textContent = what + ": " + (err instanceof ApiError ? err.message : sentence(err.message));
  box.hidden = false;
}

/* -- numbers and times -------------------------------------------------------------------- */

function watts(w) {
  if (w == null) return "–";
  return Math.abs(w) >= 1000 ? (w / 1000).toFixed(2) + " kW" : w.toFixed(1) + " W";
}
function kwh(x) { return x == null ? "–" : x.toFixed(3) + " kWh"; }
function money(x) { return x == null ? "" : " · " + x.toFixed(2) + " " + state.currency; }
function ago(t) {
  if (!t) return "never";
  const s = Math.max(0, Date.now() / 1000 - t);
  if (s < 90) return Math.round(s) + " s ago";
  if (s < 5400) return Math.round(s / 60) + " min ago";
  if (s < 172800) return Math.round(s / 3600) + " h ago";
  return new Date(t * 1000).toLocaleString();
}
function when(t) { return t ? new Date(t * 1000).toLocaleString() : "–"; }
function bytes(n) {
  if (n == null) return "–";
  const units = ["B", "kB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

/* -- routing: the view lives in the URL's fragment ---------------------------------------- */

function parseHash() {
  const [view, query] = location.hash.replace(/^#/, "").split("?");
  return { view: ["overview", "history", "energy", "health"].includes(view) ? view : "overview",
           params: new URLSearchParams(query || "") };
}

function go(view, params, replace) {
  const q = params ? params.toString() : "";
  const url = "#" + view + (q ? "?" + q : "");
  if (url === location.hash) return;
  if (replace) history.replaceState(null, "", url); else history.pushState(null, "", url);
  route();
}

function route() {
  const { view, params } = parseHash();
  state.view = view;
  for (const s of document.querySelectorAll("main > section")) s.hidden = s.dataset.view !== view;
  for (const a of document.querySelectorAll("nav a")) {
    if (a.dataset.view === view) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  showError(null);
  document.title = "wattlog · " + view;
  if (view === "overview") loadOverview();
  else if (view === "history") loadHistory(params);
  else if (view === "energy") loadEnergy(params);
  else if (view === "health") loadHealth();
}

/* -- overview ----------------------------------------------------------------------------- */

async function loadOverview() {
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

async function loadPeriod(by) {
  const now = Math.floor(Date.now() / 1000);
  const t = await api("/api/energy?by=" + by + "&start=" + (now - 60) + "&end=" + now);
  const k = t.periods.length - 1;
  if (t.tariff) state.currency = t.tariff.currency || "";
  const out = new Map();
  for (const p of t.plugs) out.set(p.node, { kwh: p.kwh[k], cost: p.cost ? p.cost[k] : null });
  out.set("", { kwh: t.totals.kwh[k], cost: t.totals.cost ? t.totals.cost[k] : null });
  return out;
}

function drawCards() {
  const cards = $("#cards");
  const nodes = [...state.plugs.keys()].sort();
  cards.replaceChildren(totalCard(), ...nodes.map(plugCard));
  if (!nodes.length) cards.append(el("p", { text: "No plug has reported to this collector yet." }));
  controlNote();
  document.body.dataset.cards = "filled";
}

function totalCard() {
  const card = el("article", { class: "card total", "data-node": "" },
    el("h3", { text: "All plugs" }),
    el("div", { class: "power", "data-field": "power" }),
    el("div", { class: "status", "data-field": "status" }),
    periodList(""));
  updateTotal(card);
  return card;
}

function updateTotal(card) {
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

function periodList(node) {
  const t = state.today && state.today.get(node), m = state.month && state.month.get(node);
  return el("dl", {},
    el("dt", { text: "today" }), el("dd", { "data-field": "today",
      text: t ? kwh(t.kwh) + money(t.cost) : "–" }),
    el("dt", { text: "this month" }), el("dd", { "data-field": "month",
      text: m ? kwh(m.kwh) + money(m.cost) : "–" }));
}

function plugCard(node) {
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

function cardOf(node) {
  return [...document.querySelectorAll(".card[data-node]")].find((c) => c.dataset.node === node);
}

function updateCard(node, card) {
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
  const on = st.relay === "ON";
  relay.textContent = "relay " + (st.relay ? st.relay.toLowerCase() : "unknown");
  relay.setAttribute("aria-pressed", on ? "true" : "false");
  relay.dataset.relay = st.relay || "";
  relay.disabled = !state.token || !state.actions || !p.online || relay.dataset.busy === "1";
}

function controlNote() {
  $("#control-note").textContent = !state.actions
    ? "Switching is off: this collector has no token file (wattlog provision makes one)."
    : state.token ? "" : "The relay switches are read-only: switching needs the collector's " +
      "token. Enter it under Token (it stays in this browser).";
}

async function switchRelay(node) {
  const p = state.plugs.get(node);
  const card = cardOf(node);
  if (!state.token || !p || !card) return;          // read-only without the token
  const relay = card.querySelector('[data-field="relay"]');
  const said = card.querySelector('[data-field="said"]');
  const want = p.state && p.state.relay === "ON" ? "OFF" : "ON";
  relay.dataset.busy = "1"; relay.disabled = true;
  said.textContent = "switching " + want.toLowerCase() + "…";
  try {
    const out = await api("/api/plugs/" + encodeURIComponent(node) + "/relay",
                          { method: "POST", body: { relay: want } });
    if (out.state) p.state = Object.assign({}, p.state, out.state);
    said.textContent = "";
  } catch (e) {
    said.textContent = e instanceof ApiError ? e.message : sentence(e.message);
  } finally {
    relay.dataset.busy = "";
    updateCard(node);
  }
}

/* -- the live stream ---------------------------------------------------------------------- */

function setLive(ok, text) {
  const live = $("#live");
  live.textContent = text;
  live.className = "live " + (ok ? "ok" : "down");
  document.body.dataset.live = ok ? "1" : "0";
}

async function stream() {
  let wait = 1000;
  for (;;) {
    try {
      const headers = state.token ? { Authorization: "Bearer " + state.token } : {};
      const resp = await fetch("/api/stream", { headers });
      if (!resp.ok) throw new Error("the stream answered " + resp.status);
      setLive(true, "live");
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
    setLive(false, "reconnecting…");
    await new Promise((r) => setTimeout(r, wait));
    wait = Math.min(wait * 2, 10000);
  }
}

function onEvent(block) {
  let kind = "message", data = "";
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) kind = line.slice(6).trim();
    else if (line.startsWith("data:")) data += line.slice(5).trim();
  }
  if (!data) return;
  let ev;
  try { ev = JSON.parse(data); } catch (e) { return; }
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
    for (const k of ["time", "power", "voltage", "current", "energy", "relay"]) p.state[k] = ev[k];
    p.state_heard = Date.now() / 1000;
  }
  updateCard(node);
  updateTotal();
}

/* -- token -------------------------------------------------------------------------------- */

function setupToken() {
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

function afterToken() {
  $("#token-button").textContent = state.token ? "Token ✓" : "Token";
  controlNote();
  for (const node of state.plugs.keys()) updateCard(node);
  route();
}

/* -- history ------------------------------------------------------------------------------ */

function historyParams(params) {
  const now = Math.floor(Date.now() / 1000);
  const live = !params.get("end") || params.get("end") === "now";
  let end = live ? now : parseInt(params.get("end"), 10);
  let start = parseInt(params.get("start") || "", 10);
  if (!Number.isFinite(end)) end = now;
  if (!Number.isFinite(start)) start = end - 86400;
  if (end - start < MIN_SPAN_S) start = end - MIN_SPAN_S;
  const feeds = (params.get("feeds") || "").split(",").filter((f) => f);
  return { start, end, live, feeds };
}

function navigate(start, end, feeds, replace) {
  const now = Math.floor(Date.now() / 1000);
  let span = Math.min(Math.max(end - start, MIN_SPAN_S), MAX_SPAN_S);
  end = Math.round(Math.min(end, now));
  start = Math.round(end - span);
  const p = new URLSearchParams();
  if (feeds && feeds.length) p.set("feeds", feeds.join(","));
  p.set("start", String(start));
  p.set("end", end >= now - 5 ? "now" : String(end));
  go("history", p, replace);
}

function current() { return historyParams(parseHash().params); }

async function loadHistory(params) {
  const view = historyParams(params);
  if (!state.plugs.size) {
    try {
      for (const p of (await api("/api/plugs")).plugs) state.plugs.set(p.node, p);
    } catch (e) { showError("Cannot list the plugs", e); return; }
  }
  const all = [...state.plugs.keys()].sort();
  const feeds = view.feeds.length ? view.feeds : all;
  drawPlugChoice(all, feeds);
  $("#history-range").textContent = new Date(view.start * 1000).toLocaleString() + " to " +
    (view.live ? "now" : new Date(view.end * 1000).toLocaleString());
  if (feeds.length) {
    $("#history-csv").href = "/api/series.csv?feed=" + encodeURIComponent(feeds[0] + "/power") +
      "&start=" + view.start + "&end=" + view.end;
  }
  clearTimeout(state.historyTimer);
  if (view.live) state.historyTimer = setTimeout(() => {
    if (state.view === "history") loadHistory(parseHash().params);
  }, LIVE_REFRESH_S * 1000);
  if (state.historyFetch) state.historyFetch.abort();
  const abort = state.historyFetch = new AbortController();
  const chartBox = $("#chart");
  const points = Math.max(100, Math.min(4000, Math.round(chartBox.clientWidth || 800)));
  const began = performance.now();
  let answers;
  try {
    answers = await Promise.all(feeds.map((node) => api(
      "/api/series?feed=" + encodeURIComponent(node + "/power") + "&start=" + view.start +
      "&end=" + view.end + "&points=" + points, { signal: abort.signal })));
  } catch (e) {
    if (e.name === "AbortError") return;
    showError("Cannot draw the history", e);
    if (state.chart) { state.chart.destroy(); state.chart = null; }
    return;
  }
  drawChart(view, feeds, answers);
  window.wattlogDrawn = { ms: performance.now() - began, start: view.start, end: view.end,
    bucket_s: answers.map((a) => a.bucket_s), raw: answers.map((a) => a.raw),
    points: answers.map((a) => a.time.length) };
}

function drawPlugChoice(all, chosen) {
  const box = $("#history-plugs");
  box.replaceChildren(...all.map((node) => {
    const input = el("input", { type: "checkbox", value: node });
    input.checked = chosen.includes(node);
    input.addEventListener("change", () => {
      const v = current();
      const picked = [...box.querySelectorAll("input:checked")].map((i) => i.value);
      navigate(v.start, v.end, picked.length === all.length ? [] : picked, true);
    });
    return el("label", {}, input, " ", el("span", { text: node, style: { color: colorOf(node) } }));
  }));
}

function seriesData(view, answers) {
  /* x: the union of every answer's times; per plug: mean, min, max (raw: the value thrice);
     null where a plug has no reading: drawn as a gap. */
  const times = new Set();
  for (const a of answers) for (const t of a.time) times.add(t);
  const xs = Float64Array.from([...times].sort((a, b) => a - b));
  const index = new Map();
  xs.forEach((t, i) => index.set(t, i));
  const data = [xs];
  for (const a of answers) {
    const mean = new Array(xs.length).fill(null);
    const lo = new Array(xs.length).fill(null);
    const hi = new Array(xs.length).fill(null);
    const m = a.raw ? a.value : a.mean, mn = a.raw ? a.value : a.min, mx = a.raw ? a.value : a.max;
    a.time.forEach((t, k) => { const i = index.get(t); mean[i] = m[k]; lo[i] = mn[k]; hi[i] = mx[k]; });
    data.push(mean, lo, hi);
  }
  return data;
}

function drawChart(view, feeds, answers) {
  const box = $("#chart");
  if (typeof uPlot === "undefined") {
    showError("Cannot draw the history", new Error("the chart library (uPlot) did not load; " +
      "the README's Dashboard section says how to install it"));
    return;
  }
  const data = seriesData(view, answers);
  const key = feeds.join(",");
  const scale = { min: view.start, max: view.end };
  if (state.chart && state.historyKey === key && state.chart.root.isConnected) {
    state.chart.batch(() => {
      state.chart.setData(data, false);
      state.chart.setScale("x", scale);
    });
    return;
  }
  if (state.chart) state.chart.destroy();
  state.historyKey = key;
  const series = [{}];
  const bands = [];
  feeds.forEach((node, i) => {
    const c = colorOf(node);
    series.push({ label: node, stroke: c, width: 1.5, spanGaps: false,
                  value: (u, v) => watts(v) });
    series.push({ label: node + " min", stroke: "transparent", spanGaps: false, show: true,
                  points: { show: false }, value: (u, v) => watts(v) });
    series.push({ label: node + " max", stroke: "transparent", spanGaps: false,
                  points: { show: false }, value: (u, v) => watts(v) });
    bands.push({ series: [3 * i + 3, 3 * i + 2], fill: c + "33" });
  });
  const dark = matchMedia("(prefers-color-scheme: dark)").matches;
  const axis = { stroke: dark ? "#9aa4b1" : "#5b6470",
                 grid: { stroke: dark ? "#2c333c" : "#e3e6ea", width: 1 },
                 ticks: { stroke: dark ? "#2c333c" : "#e3e6ea", width: 1 } };
  const opts = {
    width: Math.max(280, box.clientWidth - 8),
    height: window.innerWidth < 640 ? 260 : 380,
    series, bands,
    scales: { x: { time: true, auto: false, range: () => [current().start, current().end] } },
    axes: [Object.assign({}, axis), Object.assign({ values: (u, vals) => vals.map(watts), size: 70 }, axis)],
    legend: { live: true },
    cursor: { drag: { x: true, y: false, setScale: false } },
    hooks: { setSelect: [(u) => {
      if (u.select.width < 5) return;
      const a = u.posToVal(u.select.left, "x"), b = u.posToVal(u.select.left + u.select.width, "x");
      u.setSelect({ left: 0, width: 0, top: 0, height: 0 }, false);
      navigate(a, b, current().feeds);
    }] },
  };
  box.replaceChildren();
  state.chart = new uPlot(opts, data, box);
  state.chart.over.addEventListener("wheel", (e) => {
    e.preventDefault();
    const v = current();
    const at = state.chart.posToVal(e.offsetX, "x");
    const f = e.deltaY > 0 ? 1.5 : 1 / 1.5;
    zoomAround(at, f, v);
  }, { passive: false });
}

function zoomAround(at, factor, v) {
  v = v || current();
  const span = Math.min(Math.max((v.end - v.start) * factor, MIN_SPAN_S), MAX_SPAN_S);
  const left = (at - v.start) / (v.end - v.start);
  const start = at - left * span;
  navigate(start, start + span, v.feeds);
}

function setupHistory() {
  for (const b of document.querySelectorAll("[data-range]")) {
    b.addEventListener("click", () => {
      const now = Math.floor(Date.now() / 1000);
      navigate(now - parseInt(b.dataset.range, 10), now, current().feeds);
    });
  }
  for (const b of document.querySelectorAll("[data-zoom]")) {
    b.addEventListener("click", () => {
      const v = current();
      zoomAround((v.start + v.end) / 2, parseFloat(b.dataset.zoom), v);
    });
  }
  for (const b of document.querySelectorAll("[data-pan]")) {
    b.addEventListener("click", () => pan(parseFloat(b.dataset.pan)));
  }
  $("[data-now]").addEventListener("click", () => {
    const v = current();
    const now = Math.floor(Date.now() / 1000);
    navigate(now - (v.end - v.start), now, v.feeds);
  });
  $("#chart").addEventListener("keydown", (e) => {
    const v = current();
    if (e.key === "ArrowLeft") pan(-0.25);
    else if (e.key === "ArrowRight") pan(0.25);
    else if (e.key === "+" || e.key === "=") zoomAround((v.start + v.end) / 2, 0.5, v);
    else if (e.key === "-") zoomAround((v.start + v.end) / 2, 2, v);
    else return;
    e.preventDefault();
  });
  let touch = null;   // one finger pans, two pinch
  $("#chart").addEventListener("touchstart", (e) => {
    touch = { v: current(), xs: [...e.touches].map((t) => t.clientX) };
  }, { passive: true });
  $("#chart").addEventListener("touchend", (e) => {
    if (!touch || !state.chart) return;
    const xs = [...e.changedTouches].map((t) => t.clientX);
    const w = state.chart.over.clientWidth || 1, v = touch.v, span = v.end - v.start;
    if (touch.xs.length === 1 && xs.length === 1) {
      const dt = -(xs[0] - touch.xs[0]) / w * span;
      if (Math.abs(xs[0] - touch.xs[0]) > 10) navigate(v.start + dt, v.end + dt, v.feeds);
    }
    touch = null;
  }, { passive: true });
  let resize = null;
  window.addEventListener("resize", () => {
    clearTimeout(resize);
    resize = setTimeout(() => {
      if (state.chart) state.chart.setSize({ width: Math.max(280, $("#chart").clientWidth - 8),
        height: window.innerWidth < 640 ? 260 : 380 });
    }, 200);
  });
}

function pan(fraction) {
  const v = current();
  const d = (v.end - v.start) * fraction;
  navigate(v.start + d, v.end + d, v.feeds);
}

/* -- energy ------------------------------------------------------------------------------- */

function energyRange(by, params) {
  const now = Math.floor(Date.now() / 1000);
  const back = { day: 14 * 86400, week: 12 * 7 * 86400, month: 365 * 86400 }[by];
  return { start: params.get("start") || String(now - back + 1), end: params.get("end") || "" };
}

async function loadEnergy(params) {
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
  state.energy = t;
  const tariff = t.tariff ? " Cost with the tariff " + tariffWords(t.tariff) + "." : "";
  $("#energy-note").textContent = "kWh per " + by + " in the collector's time zone (" +
    t.timezone + "), from each plug's energy counter." + tariff + " " + t.notes.join(" ");
  drawBars(t);
  drawEnergyTable(t);
}

function tariffWords(tf) {
  const cur = tf.currency || "";
  if (tf.price != null) return tf.price + " " + cur + "/kWh";
  if (tf.day_price != null) {
    return tf.day_price + " " + cur + "/kWh by day, " + tf.night_price + " " + cur + "/kWh from " +
      tf.night_start + " to " + tf.night_end;
  }
  return JSON.stringify(tf);
}

function drawBars(t) {
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

function energyRows(t) {
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

function drawEnergyTable(t) {
  const { head, rows, total } = energyRows(t);
  const table = $("#energy-table");
  table.replaceChildren(
    el("thead", {}, el("tr", {}, ...head.map((h) => el("th", { scope: "col", text: h })))),
    el("tbody", {}, ...rows.map((r) => el("tr", {}, ...r.map((c, i) =>
      i ? el("td", { text: c || "–" }) : el("th", { scope: "row", text: c }))))),
    el("tfoot", {}, el("tr", {}, ...total.map((c, i) =>
      i ? el("td", { text: c || "–" }) : el("th", { scope: "row", text: c })))));
}

function csvField(s) { return /[",\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s; }

function downloadEnergyCsv() {
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

function setupEnergy() {
  for (const b of document.querySelectorAll("[data-by]")) {
    b.addEventListener("click", () => go("energy", new URLSearchParams({ by: b.dataset.by })));
  }
  $("#energy-csv").addEventListener("click", downloadEnergyCsv);
}

/* -- health ------------------------------------------------------------------------------- */

function rowsTable(table, rows) {
  table.replaceChildren(el("tbody", {}, ...rows.map(([k, v]) =>
    el("tr", {}, el("th", { scope: "row", text: k }), el("td", { text: v == null ? "–" : String(v) })))));
}

async function loadHealth() {
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
                "ring drops", "meter faults", "Wi-Fi", "relay", ""];
  const table = $("#plugs-table");
  table.replaceChildren(
    el("thead", {}, el("tr", {}, ...cols.map((c) => el("th", { scope: "col", text: c })))),
    el("tbody", {}, ...plugs.plugs.map((p) => {
      const faults = p.meter_faults ? (p.meter_faults.reported || 0) +
        (p.meter_faults.last ? " (last: " + p.meter_faults.last + ")" : "") : "–";
      const rssi = p.state && p.state.rssi != null ? p.state.rssi + " dBm" : "not reported";
      const info = el("button", { type: "button", onclick: () => command(p.node, info) }, "info");
      info.disabled = !state.token || !p.online;
      info.title = state.token ? "ask the plug for its counters" : "needs the token";
      return el("tr", { "data-node": p.node },
        ...[p.node, p.online ? "yes" : "no", p.last_seen ? ago(p.last_seen) : "never",
            p.firmware, p.boots, p.acked_seq, p.gaps, p.lost, p.ring_drops, faults, rssi,
            p.state ? p.state.relay : null].map((v, i) => i ? el("td", { text: v == null ? "–" : String(v) })
          : el("th", { scope: "row", text: v })),
        el("td", {}, info));
    })));
  $("#plug-logs").replaceChildren(...plugs.plugs.filter((p) => p.log && p.log.length).map((p) =>
    el("details", {}, el("summary", { text: p.node + ": last " + p.log.length + " log lines" }),
       el("pre", { class: "log", text: p.log.map((l) => when(l.time) + "  " + l.text).join("\n") }))));
}

async function command(node, button) {
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

/* -- start -------------------------------------------------------------------------------- */

async function start() {
  setupToken();
  setupHistory();
  setupEnergy();
  $("#token-button").textContent = state.token ? "Token ✓" : "Token";
  window.addEventListener("popstate", route);
  window.addEventListener("hashchange", route);
  try {
    state.actions = (await api("/api")).actions;
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

start();

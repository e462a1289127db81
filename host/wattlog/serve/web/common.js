/* common.js - what every view of the dashboard shares: the state, the API call (with the
   token as a header, every failure as a sentence), building elements (text only ever as
   textContent, never innerHTML: the server's Content-Security-Policy is a second wall),
   numbers and times in words, and the route: the view lives in the URL's fragment
   (#history?feeds=a,b&start=...&end=now), so it is shareable and each zoom or pan is a
   history entry the back button steps back through. */

/* 20 plug colours, each at least 30 apart (CIE76 delta E) from every other and of a middle
   lightness (L* 40-62: a line shows on the light and the dark background alike), in an order
   where each is the farthest from those before it: a few plugs get the most different ones.
   A plug's colour is the same in every view and after a reload: the plugs take them in the
   order this collector first stored their data (GET /api's plugs: its feeds' ids, which never
   change), so a plug keeps its colour when others come; a plug heard of that has no feed
   yet (it has announced itself, sent nothing) takes the next free one. */
export const PALETTE = ["#1e69c3", "#ff0000", "#00a500", "#ff00ff", "#875a3c", "#e10f78", "#00a5a5",
  "#2d4bff", "#a59600", "#c369e1", "#d2690f", "#3c692d", "#874b78", "#c31e2d", "#8796b4",
  "#e100b4", "#d26978", "#00a55a", "#9600ff", "#879678"];
export const views = {};  // name -> its loader(params), filled by app.js

export const state = {
  token: localStorage.getItem("wattlog-token") || "",
  plugs: new Map(),      // node -> health answer, its state kept current by the stream
  colors: new Map(),     // node -> colour (loadIndex, colorOf)
  live: { stream: false, links: null },  // the header: the stream, the collector's links
  today: null, month: null, currency: "",
  actions: true,         // the collector has a token set (GET /api says so)
  chart: null, historyKey: "", historyTimer: null, historyFetch: null,
  historyBuckets: null,  // each drawn plug's bucket length, s (the bands' widths)
  plugList: null,        // {at, nodes}: the plugs with a power feed, as last asked
  energy: null,
  view: "", routed: null,
};

export const $ = (sel) => document.querySelector(sel);

export function el(tag, props, ...kids) {
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

export function colorOf(node) {
  if (!state.colors.has(node)) state.colors.set(node, PALETTE[state.colors.size % PALETTE.length]);
  return state.colors.get(node);
}

export async function loadIndex() {
  /* GET /api: whether this collector takes actions, and the plugs in the order their data
     was first stored, which give the colours (plugs given one before the answer came take
     the next ones after them), so every view and every reload agree */
  const index = await api("/api");
  state.actions = index.actions;
  const before = [...state.colors.keys()];
  state.colors.clear();
  for (const node of index.plugs || []) colorOf(node);
  for (const node of before) colorOf(node);
  return index;
}

/* -- the API ------------------------------------------------------------------------------ */

export class ApiError extends Error {
  constructor(message, status) { super(message); this.status = status; }
}

export async function api(path, options = {}) {
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
  if (options.signal && options.signal.aborted) {   // a newer view asked meanwhile
    throw new DOMException("superseded", "AbortError");
  }
  if (!resp.ok) {
    const said = body && typeof body.error === "string" ? body.error
      : "the collector answered " + resp.status + " " + resp.statusText;
    throw new ApiError(sentence(said), resp.status);
  }
  return body;
}

export function sentence(text) {
  text = String(text);
  text = text.charAt(0).toUpperCase() + text.slice(1);
  return /[.!?]$/.test(text) ? text : text + ".";
}

export function showError(what, err) {
  const box = $("#error");
  if (!err) { box.hidden = true; box.textContent = ""; return; }
  box.textContent = what + ": " + (err instanceof ApiError ? err.message : sentence(err.message));
  box.hidden = false;
}

/* -- numbers and times -------------------------------------------------------------------- */

export function watts(w) {
  if (w == null) return "–";
  return Math.abs(w) >= 1000 ? (w / 1000).toFixed(2) + " kW" : w.toFixed(1) + " W";
}
export function kwh(x) { return x == null ? "–" : x.toFixed(3) + " kWh"; }
export function money(x) { return x == null ? "" : " · " + x.toFixed(2) + " " + state.currency; }
export function ago(t) {
  if (!t) return "never";
  const s = Math.max(0, Date.now() / 1000 - t);
  if (s < 90) return Math.round(s) + " s ago";
  if (s < 5400) return Math.round(s / 60) + " min ago";
  if (s < 172800) return Math.round(s / 3600) + " h ago";
  return new Date(t * 1000).toLocaleString();
}
export function when(t) { return t ? new Date(t * 1000).toLocaleString() : "–"; }
export function since(t) {
  /* a time of today as 14:02, of another day with its date */
  const d = new Date(t * 1000);
  return d.toDateString() === new Date().toDateString()
    ? d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
    : d.toLocaleString([], { dateStyle: "short", timeStyle: "short" });
}
export function duration(s) {
  const h = Math.floor(s / 3600), m = Math.round((s % 3600) / 60);
  return h ? h + " h" + (m ? " " + m + " min" : "") : m + " min";
}

/* -- the collector's links (/api/health's and the stream's broker and influx) -------------- */

export function linkWords(name, link) {
  /* the broker's link or the InfluxDB sink's in words */
  if (link.state === "up") {
    return (name === "broker" ? "connected to " : "writing to ") + link.address + " since " +
      since(link.since);
  }
  if (link.state === "down") return "unreachable since " + since(link.since) + ": " + link.reason;
  if (link.state === "elsewhere") return "written by another collector of the cluster (to " +
    link.address + ")";
  return name === "broker" ? "connecting to " + link.address
    : "no write yet (to " + link.address + ")";
}
export function bytes(n) {
  if (n == null) return "–";
  const units = ["B", "kB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

/* -- a table wider than its box ----------------------------------------------------------- */

export function watchScroll(wrap) {
  /* data-scrolls="1" while the box's table is wider than it: the page then shows the cue
     beside it (style.css) */
  const seen = new ResizeObserver(() => {
    wrap.dataset.scrolls = wrap.scrollWidth > wrap.clientWidth + 1 ? "1" : "0";
  });
  seen.observe(wrap);
  seen.observe(wrap.firstElementChild);   // the table: redrawn in place, never replaced
}

/* -- routing: the view lives in the URL's fragment ---------------------------------------- */

export function parseHash() {
  const [view, query] = location.hash.replace(/^#/, "").split("?");
  return { view: ["overview", "history", "energy", "runs", "health"].includes(view) ? view
    : "overview",
           params: new URLSearchParams(query || "") };
}

export function go(view, params, replace) {
  const q = params ? params.toString() : "";
  const url = "#" + view + (q ? "?" + q : "");
  if (url === location.hash) return;
  if (replace) history.replaceState(null, "", url); else history.pushState(null, "", url);
  route();
}

export function route() {
  const { view, params } = parseHash();
  state.routed = location.hash;
  state.view = view;
  for (const s of document.querySelectorAll("main > section")) s.hidden = s.dataset.view !== view;
  for (const a of document.querySelectorAll("nav a")) {
    if (a.dataset.view === view) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  showError(null);
  document.title = "wattlog · " + view;
  views[view](params);
}

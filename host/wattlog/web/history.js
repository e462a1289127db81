/* history.js - the power chart (uPlot): a mean line per plug with its min-max band (a short
   spike in a month view stays visible), null = no readings = a gap, never zero. It asks for
   about one point per pixel of the chart's width, so every zoom fetches a finer series, down
   to single 10 s slots. Zoom and pan: drag or wheel, keys (arrows, + and -), the buttons,
   and on a touch screen a pinch or a swipe. A view ending "now" follows the present. */

import { $, api, colorOf, el, go, parseHash, showError, state, watts } from "./common.js";

export const MIN_SPAN_S = 60;             // the deepest zoom: six 10 s slots
export const MAX_SPAN_S = 2 * 366 * 86400;
export const LIVE_REFRESH_S = 30;         // a history view that ends "now" follows the present

/* -- history ------------------------------------------------------------------------------ */

export function historyParams(params) {
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

export function navigate(start, end, feeds, replace) {
  const now = Math.floor(Date.now() / 1000);
  const span = Math.min(Math.max(end - start, MIN_SPAN_S), MAX_SPAN_S);
  // whole 10 s slots: a range of N slots is answered with N raw slots, not buckets of two
  end = Math.ceil(Math.min(end, now) / 10) * 10;
  start = Math.floor((end - span) / 10) * 10;
  const p = new URLSearchParams();
  if (feeds && feeds.length) p.set("feeds", feeds.join(","));
  p.set("start", String(start));
  p.set("end", end >= now - 10 ? "now" : String(end));
  go("history", p, replace);
}

export function current() { return historyParams(parseHash().params); }

export async function loadHistory(params) {
  const view = historyParams(params);
  let all;
  try {
    all = (await api("/api/feeds")).feeds.filter((f) => f.channel === "power" && !f.error)
      .map((f) => f.node).sort();
  } catch (e) { showError("Cannot list the plugs", e); return; }
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

export function drawPlugChoice(all, chosen) {
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

export function seriesData(view, answers) {
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

export function drawChart(view, feeds, answers) {
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

export function zoomAround(at, factor, v) {
  v = v || current();
  const span = Math.min(Math.max((v.end - v.start) * factor, MIN_SPAN_S), MAX_SPAN_S);
  const left = (at - v.start) / (v.end - v.start);
  const start = at - left * span;
  navigate(start, start + span, v.feeds);
}

export function setupHistory() {
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
  let touch = null;   // one finger pans, two pinch: the view changes when the fingers lift
  const xsOf = (list) => [...list].map((t) => t.clientX);
  $("#chart").addEventListener("touchstart", (e) => {
    touch = { v: current(), from: xsOf(e.touches), to: xsOf(e.touches) };
  }, { passive: true });
  $("#chart").addEventListener("touchmove", (e) => {
    if (touch && e.touches.length === touch.from.length) touch.to = xsOf(e.touches);
  }, { passive: true });
  $("#chart").addEventListener("touchend", () => {
    if (!touch || !state.chart) return;
    const { v, from, to } = touch;
    touch = null;
    const box = state.chart.over.getBoundingClientRect(), span = v.end - v.start;
    if (from.length === 1 && Math.abs(to[0] - from[0]) > 10) {
      const dt = -(to[0] - from[0]) / (box.width || 1) * span;
      navigate(v.start + dt, v.end + dt, v.feeds);
    } else if (from.length === 2) {
      const was = Math.abs(from[1] - from[0]), now = Math.abs(to[1] - to[0]);
      if (was > 10 && now > 10 && Math.abs(now - was) > 10) {
        const mid = ((from[0] + from[1]) / 2 - box.left) / (box.width || 1);
        zoomAround(v.start + mid * span, was / now, v);
      }
    }
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

export function pan(fraction) {
  const v = current();
  const d = (v.end - v.start) * fraction;
  navigate(v.start + d, v.end + d, v.feeds);
}

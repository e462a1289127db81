/* history.js - the power chart (uPlot): a mean line per plug with its min-max band (a short
   spike in a month view stays visible), null = no readings = a gap, never zero. It asks for
   about one point per pixel of the chart's width, so every zoom fetches a finer series, down
   to single 10 s slots. Zoom and pan: drag or wheel, keys (arrows, + and -), the buttons,
   and on a touch screen a pinch or a swipe. A view ending "now" follows the present.

   Drawing cost: at a coarse zoom each plug's mean jumps up and down from one pixel to the
   next. A headless or GPU-less browser rasterises the canvas on its main thread, and there a
   line wider than one device pixel (stroked as a filled outline) or uPlot's band (a fill
   clipped by another path) over such a zigzag took 0.3-1.5 s a frame for 12 plugs; a one
   pixel line is drawn as a hairline in ~2 ms. So lines are 1 px, and each band is drawn
   (drawBands, under the lines) as one rectangle per pixel column from the lowest to the
   highest reading of the buckets in it: the same picture, ~5 ms. Plugs whose buckets start
   at different times (their feeds started at different times) share the x axis; a plug has
   no value (undefined: the line runs on) at another plug's times, and null (a gap) only
   where it has no readings. */

import { $, api, colorOf, el, go, parseHash, showError, state, watts } from "./common.js";

export const MIN_SPAN_S = 60;             // the deepest zoom: six 10 s slots
export const MAX_SPAN_S = 2 * 366 * 86400;
export const LIVE_REFRESH_S = 30;         // a history view that ends "now" follows the present
export const PLUG_LIST_S = 30;            // a zoom or pan reuses the plug list this long
export const SERIES_BATCH = 50;           // plugs asked for in one request (api.py's MAX_FEEDS)

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
    all = await plugList();
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
    answers = await fetchSeries(feeds, view, points, abort.signal);
  } catch (e) {
    if (e.name === "AbortError") return;
    showError("Cannot draw the history", e);
    if (state.chart) { state.chart.destroy(); state.chart = null; }
    return;
  }
  const fetched = performance.now();
  drawChart(view, feeds, answers);
  // for the tests and tools/bench/dashboard: what was drawn, how long the fetch and the draw took
  window.wattlogDrawn = { ms: performance.now() - began, fetch_ms: fetched - began,
    start: view.start, end: view.end,
    bucket_s: answers.map((a) => a.bucket_s), raw: answers.map((a) => a.raw),
    points: answers.map((a) => a.time.length) };
}

export async function fetchSeries(feeds, view, points, signal) {
  /* every plug's series in one request per SERIES_BATCH plugs (feed= given once per plug:
     {"series": [...]}, or the one answer for one plug): one request, not one a plug */
  const asks = [];
  for (let i = 0; i < feeds.length; i += SERIES_BATCH) {
    const some = feeds.slice(i, i + SERIES_BATCH);
    asks.push(api("/api/series?" + some.map((n) => "feed=" + encodeURIComponent(n + "/power"))
      .join("&") + "&start=" + view.start + "&end=" + view.end + "&points=" + points,
      { signal }).then((got) => (some.length > 1 ? got.series : [got])));
  }
  return (await Promise.all(asks)).flat();
}

export async function plugList() {
  /* the plugs with a power feed: asked again after PLUG_LIST_S, not at every zoom step */
  const now = performance.now();
  if (!state.plugList || now - state.plugList.at > PLUG_LIST_S * 1000) {
    const nodes = (await api("/api/feeds")).feeds.filter((f) => f.channel === "power" && !f.error)
      .map((f) => f.node).sort();
    state.plugList = { at: now, nodes };
  }
  return state.plugList.nodes;
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
     null where a plug's bucket has no reading (drawn as a gap), undefined at the times of
     another plug's buckets (not a gap: uPlot draws the line on), null again at those inside
     the plug's own hole. */
  const times = new Set();
  for (const a of answers) for (const t of a.time) times.add(t);
  const xs = Float64Array.from([...times].sort((a, b) => a - b));
  const index = new Map();
  xs.forEach((t, i) => index.set(t, i));
  const data = [xs];
  for (const a of answers) {
    const mean = new Array(xs.length).fill(undefined);
    const lo = new Array(xs.length).fill(undefined);
    const hi = new Array(xs.length).fill(undefined);
    const m = a.raw ? a.value : a.mean, mn = a.raw ? a.value : a.min, mx = a.raw ? a.value : a.max;
    a.time.forEach((t, k) => { const i = index.get(t); mean[i] = m[k]; lo[i] = mn[k]; hi[i] = mx[k]; });
    // another plug's time inside this plug's hole is in the hole too: uPlot ends a gap at
    // the first value that is not null, and would draw the line across the rest of it
    let prev;
    for (let i = 0; i < xs.length; i++) {
      if (mean[i] === undefined) { if (prev === null) mean[i] = lo[i] = hi[i] = null; }
      else prev = mean[i];
    }
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
  state.historyBuckets = answers.map((a) => a.bucket_s);
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
  for (const node of feeds) {
    series.push({ label: node, stroke: colorOf(node), width: 1, spanGaps: false,
                  value: (u, v) => watts(v) });
    // min and max: in the y range and the data, drawn by drawBands, not as lines
    for (const edge of ["min", "max"]) {
      series.push({ label: node + " " + edge, paths: () => null, points: { show: false },
                    value: (u, v) => watts(v) });
    }
  }
  const dark = matchMedia("(prefers-color-scheme: dark)").matches;
  const axis = { stroke: dark ? "#9aa4b1" : "#5b6470",
                 grid: { stroke: dark ? "#2c333c" : "#e3e6ea", width: 1 },
                 ticks: { stroke: dark ? "#2c333c" : "#e3e6ea", width: 1 } };
  const opts = {
    width: chartWidth(),
    height: chartHeight(),
    series,
    scales: { x: { time: true, auto: false, range: () => [current().start, current().end] },
              y: { range: yRange } },
    axes: [Object.assign({}, axis), Object.assign({ values: (u, vals) => vals.map(watts), size: 70 }, axis)],
    legend: { live: true },
    cursor: { drag: { x: true, y: false, setScale: false } },
    hooks: { drawAxes: [(u) => drawBands(u, feeds)], setSelect: [(u) => {
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

export function yRange(u, min, max) {
  /* uPlot's own y range (10% above, 0 at the bottom when nothing is below it), with 3 px
     under its bottom: a line at 0 W (a plug switched off) would otherwise run along the
     plot's edge, half of it cut off */
  if (min == null) return [null, null];
  const [lo, hi] = uPlot.rangeNum(min, max, 0.1, true);
  const px = Math.max((u.bbox.height || 0) / devicePixelRatio, 100);
  return [lo - (hi - lo) * 3 / px, hi];
}

export function drawBands(u, feeds) {
  /* each plug's min-max band, under the lines: per pixel column one rectangle from the
     highest to the lowest reading of the buckets that start in it (a bucket wider than a
     column reaches to its end); nothing where a bucket has no reading */
  const ctx = u.ctx, xs = u.data[0], { left, top, width, height } = u.bbox;
  ctx.save();
  ctx.beginPath();
  ctx.rect(left, top, width, height);
  ctx.clip();
  feeds.forEach((node, k) => {
    const s = 3 * k + 1;
    if (!u.series[s] || !u.series[s].show) return;
    const lo = u.data[s + 1], hi = u.data[s + 2];
    const bucket = (state.historyBuckets && state.historyBuckets[k]) || 10;
    ctx.fillStyle = colorOf(node) + "33";
    let x0 = null, x1 = 0, yTop = 0, yBottom = 0;
    const flush = () => {
      if (x0 !== null && yBottom - yTop >= 1) ctx.fillRect(x0, yTop, Math.max(x1 - x0, 1), yBottom - yTop);
      x0 = null;
    };
    for (let i = 0; i < xs.length; i++) {
      if (hi[i] === undefined) continue;
      if (hi[i] === null) { flush(); continue; }
      const a = Math.round(u.valToPos(xs[i], "x", true));
      const b = Math.round(u.valToPos(xs[i] + bucket, "x", true));
      const yh = u.valToPos(hi[i], "y", true), yl = u.valToPos(lo[i], "y", true);
      if (x0 !== null && a < x1) {
        yTop = Math.min(yTop, yh); yBottom = Math.max(yBottom, yl); x1 = Math.max(x1, b);
      } else {
        flush();
        x0 = a; x1 = b; yTop = yh; yBottom = yl;
      }
    }
    flush();
  });
  ctx.restore();
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
  // the chart follows its box's width, not only the window's: a page scrollbar that comes
  // after the chart drew (the legend made the page taller) narrows the box by its width,
  // and a chart left wider than its box would make the whole page scroll sideways
  new ResizeObserver(() => {
    const width = chartWidth();
    if (state.chart && $("#chart").clientWidth && state.chart.width !== width) {
      state.chart.setSize({ width, height: chartHeight() });
    }
  }).observe($("#chart"));
}

export function chartWidth() { return Math.max(200, $("#chart").clientWidth - 8); }
export function chartHeight() { return window.innerWidth < 640 ? 260 : 380; }

export function pan(fraction) {
  const v = current();
  const d = (v.end - v.start) * fraction;
  navigate(v.start + d, v.end + d, v.feeds);
}

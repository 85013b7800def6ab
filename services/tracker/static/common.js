// moelab tracker: helpers every page shares. User data only ever enters the DOM as text
// (textContent / createTextNode), never as HTML, so a run named "<script>…" shows as written.
"use strict";

const T = {
  charts: {},        // key -> uPlot instance (tests read drawn points from here)
  colors: ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4d7c0f", "#be185d"],
};
window.__tracker = T;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    node.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return node;
}

function token() {
  return localStorage.getItem("moelab_tracker_token") || new URLSearchParams(location.search).get("token");
}

async function api(path, params) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params || {})) {
    if (Array.isArray(v)) v.forEach((x) => url.searchParams.append(k, x));
    else if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, v);
  }
  const headers = {};
  if (token()) headers.authorization = "Bearer " + token();
  const resp = await fetch(url, { headers });
  if (resp.status === 401) {
    const t = prompt("This tracker protects reads: paste an API token (moelab tracker token)");
    if (t) { localStorage.setItem("moelab_tracker_token", t); return api(path, params); }
  }
  if (!resp.ok) throw new Error(`${resp.status} ${await resp.text()}`);
  return resp.json();
}

function fmtTime(ts) {
  if (!ts) return "";
  const d = new Date(ts * 1000);
  return d.toISOString().replace("T", " ").slice(0, 19);
}

function fmtDuration(s) {
  if (s === null || s === undefined || !isFinite(s)) return "";
  if (s < 120) return `${s.toFixed(0)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

function fmtNum(v) {
  if (v === null || v === undefined) return "—";
  if (typeof v !== "number") return String(v);
  const a = Math.abs(v);
  return a !== 0 && (a < 1e-3 || a >= 1e6) ? v.toExponential(2) : String(+v.toPrecision(5));
}

function statusBadge(status) {
  return el("span", { class: `status status-${status}`, text: status });
}

// Exponential moving average (debiased, like TensorBoard); nulls (NaN/Inf points) stay gaps.
function smooth(values, weight) {
  if (!weight) return values;
  let last = 0, n = 0;
  return values.map((v) => {
    if (v === null) return null;
    last = last * weight + (1 - weight) * v;
    n += 1;
    return last / (1 - Math.pow(weight, n));
  });
}

// Vertical marks for events on a chart; red for warnings / router health.
function eventsPlugin(getEvents) {
  return {
    hooks: {
      draw: [(u) => {
        const evs = getEvents() || [];
        const { ctx } = u;
        const { top, height } = u.bbox;
        ctx.save();
        for (const e of evs) {
          if (e.x === null || e.x === undefined) continue;
          const x = Math.round(u.valToPos(e.x, "x", true));
          if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
          ctx.strokeStyle = e.bad ? "rgba(220,38,38,0.6)" : "rgba(100,116,139,0.45)";
          ctx.setLineDash([4, 3]);
          ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + height); ctx.stroke();
        }
        ctx.restore();
      }],
    },
  };
}

// One uPlot line chart with several series over a shared x (union of xs, gaps elsewhere).
function lineChart(container, key, xLabel, seriesList, opts) {
  opts = opts || {};
  let xs, data;
  if (seriesList.length === 1) {  // one line: draw its points as they are (repeated x kept)
    xs = seriesList[0].xs;
    data = [Array.from(xs), Array.from(seriesList[0].ys)];
  } else {
    const xsSet = new Set();
    seriesList.forEach((s) => s.xs.forEach((x) => xsSet.add(x)));
    xs = Float64Array.from(xsSet).sort();
    const index = new Map();
    xs.forEach((x, i) => index.set(x, i));
    data = [Array.from(xs)];
    for (const s of seriesList) {
      const ys = new Array(xs.length).fill(null);
      s.xs.forEach((x, i) => { ys[index.get(x)] = s.ys[i]; });
      data.push(ys);
    }
  }
  const width = Math.max(300, container.clientWidth - 16 || 440);
  const uopts = {
    width, height: opts.height || 220,
    scales: { x: { time: false }, y: opts.yRange ? { range: opts.yRange } : {} },
    axes: [{ label: xLabel, size: 40 }, { size: 76, values: (u, vals) => vals.map(fmtNum) }],
    legend: { show: seriesList.length > 1 || !!opts.legend },
    series: [{ label: xLabel }].concat(seriesList.map((s, i) => ({
      label: s.label, stroke: s.color || T.colors[i % T.colors.length], width: 1.5,
      spanGaps: seriesList.length > 1, points: { show: xs.length < 60 },
      dash: s.dash,
    }))),
    plugins: opts.events ? [eventsPlugin(opts.events)] : [],
  };
  const u = new uPlot(uopts, data, container);
  T.charts[opts.chartId || key] = u;
  return u;
}

// Viridis-like colour ramp for heatmaps (value in [0, 1]).
function ramp(t) {
  const stops = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  t = Math.min(1, Math.max(0, t)) * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(t)), f = t - i;
  const c = stops[i].map((a, j) => Math.round(a + (stops[i + 1][j] - a) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

// Expert-load heatmap: x = steps, y = experts; each column is normalised to the share of tokens,
// so the colour at 1/E means balanced and bright/dark bands mean hot/dead experts.
function heatmap(container, key, steps, rows) {
  const nExperts = Math.max(...rows.map((r) => r.length));
  const canvas = el("canvas", { class: "heatmap", "data-key": key });
  canvas.width = Math.max(1, steps.length);
  canvas.height = nExperts;
  canvas.style.height = Math.min(260, Math.max(80, nExperts * 8)) + "px";
  const ctx = canvas.getContext("2d");
  let maxShare = 0;
  const shares = rows.map((r) => {
    const sum = r.reduce((a, b) => a + b, 0) || 1;
    const s = r.map((v) => v / sum);
    s.forEach((v) => { maxShare = Math.max(maxShare, v); });
    return s;
  });
  shares.forEach((col, x) => col.forEach((v, y) => {
    ctx.fillStyle = ramp(maxShare ? v / maxShare : 0);
    ctx.fillRect(x, y, 1, 1);
  }));
  canvas.dataset.cells = String(steps.length * nExperts);
  canvas.title = `${key}: ${nExperts} experts × ${steps.length} steps (${steps[0]}–${steps[steps.length - 1]}); colour = share of tokens, max ${(maxShare * 100).toFixed(1)}%`;
  canvas.addEventListener("mousemove", (ev) => {
    const r = canvas.getBoundingClientRect();
    const x = Math.floor((ev.clientX - r.left) / r.width * steps.length);
    const y = Math.floor((ev.clientY - r.top) / r.height * nExperts);
    if (shares[x] && shares[x][y] !== undefined) {
      canvas.title = `step ${steps[x]}, expert ${y}: ${(shares[x][y] * 100).toFixed(2)}% of tokens (${rows[x][y]})`;
    }
  });
  container.appendChild(canvas);
  container.appendChild(el("div", { class: "note", text: `experts 0–${nExperts - 1} (rows) × steps ${steps[0]}–${steps[steps.length - 1]} (columns); colour: share of tokens (yellow = ${(maxShare * 100).toFixed(1)}%, balanced = ${(100 / nExperts).toFixed(1)}%)` }));
  return canvas;
}

function funnel(container, name, stages) {
  const max = Math.max(1, ...stages.map((s) => s.count));
  const first = stages.length ? stages[0].count : 0;
  const box = el("div", { class: "funnel", "data-name": name });
  for (const s of stages) {
    const pct = first ? ` (${(100 * s.count / first).toFixed(1)}%)` : "";
    box.appendChild(el("div", { class: "funnel-row" },
      el("span", { class: "funnel-label", text: s.stage, title: s.stage }),
      el("span", { class: "funnel-bar", style: `width:${(60 * s.count / max).toFixed(2)}%` }),
      el("span", { text: `${s.count.toLocaleString()}${pct}` })));
  }
  container.appendChild(box);
}

function calibrationChart(container, name, bins, chartId) {
  const pts = bins.slice().sort((a, b) => a.predicted - b.predicted);
  const lo = Math.min(...pts.map((b) => Math.min(b.predicted, b.observed)));
  const hi = Math.max(...pts.map((b) => Math.max(b.predicted, b.observed)));
  return lineChart(container, name, "mean predicted", [
    { label: "observed", xs: pts.map((b) => b.predicted), ys: pts.map((b) => b.observed) },
    { label: "perfect", xs: [lo, hi], ys: [lo, hi], color: "#9ca3af", dash: [5, 5] },
  ], { chartId, legend: true });
}

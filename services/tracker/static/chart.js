// Line charts (uPlot) a researcher can read: a hover readout of every line, labelled axes with
// units, an optional log scale, event marks with their messages on hover, non-finite points as
// red marks where the line breaks, min–max bands for run groups, and zoom linked across a page
// (drag to zoom every chart, double-click to reset); the page refetches the zoomed range.
"use strict";

// Linked zoom: every chart of a group shows the same x range; `onRange(range|null)` lets the
// page refetch detail for the range (null: back to the whole series).
class ZoomGroup {
  constructor(onRange) { this.charts = new Set(); this.range = null; this.busy = false; this.onRange = onRange; this._t = null; }
  add(u) { this.charts.add(u); if (this.range) this.apply(u); }
  remove(u) { this.charts.delete(u); }
  apply(u) {
    this.busy = true;
    try { u.setScale("x", { min: this.range[0], max: this.range[1] }); } finally { this.busy = false; }
  }
  set(min, max) {
    if (!(max > min)) return;
    this.range = [min, max];
    this.charts.forEach((u) => this.apply(u));
    clearTimeout(this._t);
    this._t = setTimeout(() => this.onRange && this.onRange(this.range), 120);
  }
  reset() {
    this.range = null;
    clearTimeout(this._t);
    if (this.onRange) this.onRange(null);
  }
}

// Merge lines with different xs onto one sorted x: a missing x is `undefined` (the line spans
// it), a non-finite point is `null` (the line breaks there).
function alignLines(lines) {
  if (lines.length === 1) {
    const l = lines[0];
    const order = l.xs.map((_, i) => i).sort((a, b) => l.xs[a] - l.xs[b]);
    return [order.map((i) => l.xs[i]), order.map((i) => l.ys[i])];
  }
  const xsSet = new Set();
  lines.forEach((l) => l.xs.forEach((x) => xsSet.add(x)));
  const xs = Float64Array.from(xsSet).sort();
  const index = new Map();
  xs.forEach((x, i) => index.set(x, i));
  const data = [Array.from(xs)];
  for (const l of lines) {
    const ys = new Array(xs.length).fill(undefined);
    l.xs.forEach((x, i) => { ys[index.get(x)] = l.ys[i]; });
    data.push(ys);
  }
  return data;
}

function marksPlugin(spec) {
  return {
    hooks: {
      draw: [(u) => {
        const { ctx } = u;
        const { left, top, width, height } = u.bbox;
        ctx.save();
        for (const e of (spec.events && spec.events()) || []) {
          if (e.x === null || e.x === undefined) continue;
          const x = Math.round(u.valToPos(e.x, "x", true));
          if (x < left || x > left + width) continue;
          ctx.strokeStyle = e.bad ? "rgba(220,38,38,0.65)" : "rgba(100,116,139,0.5)";
          ctx.setLineDash([4, 3]);
          ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + height); ctx.stroke();
          ctx.setLineDash([]);
          ctx.fillStyle = ctx.strokeStyle;
          ctx.beginPath(); ctx.moveTo(x - 5, top); ctx.lineTo(x + 5, top); ctx.lineTo(x, top + 8); ctx.fill();
        }
        ctx.fillStyle = "#dc2626";
        for (const g of spec.gaps || []) {
          const x = Math.round(u.valToPos(g.x, "x", true));
          if (x < left - 1 || x > left + width + 1) continue;
          ctx.fillRect(x - 2, top + height - 10, 4, 10);
          ctx.fillRect(x - 0.5, top, 1, height);
        }
        ctx.restore();
      }],
    },
  };
}

function nearest(list, u, left, px) {
  let best = null, bestD = px;
  for (const m of list || []) {
    if (m.x === null || m.x === undefined) continue;
    const d = Math.abs(u.valToPos(m.x, "x") - left);
    if (d <= bestD) { best = m; bestD = d; }
  }
  return best;
}

// The point of a line nearest to x, when x lies within the line's span or within a few pixels of
// that point: lines of runs that log at other steps, or on a wall-time axis, have no value at the
// hovered x itself.
function nearestPoint(u, line, x) {
  let best = -1, bestD = Infinity, lo = Infinity, hi = -Infinity;
  line.xs.forEach((lx, i) => {
    lo = Math.min(lo, lx); hi = Math.max(hi, lx);
    const d = Math.abs(lx - x);
    if (d < bestD) { best = i; bestD = d; }
  });
  if (best < 0) return null;
  const near = { x: line.xs[best], y: line.ys[best] };
  const within = x >= lo && x <= hi;
  return within || Math.abs(u.valToPos(near.x, "x") - u.valToPos(x, "x")) <= 12 ? near : null;
}

function readoutText(u, spec) {
  const idx = u.cursor.idx, left = u.cursor.left;
  if (idx === null || idx === undefined || left < 0) return spec.hint;
  const x = u.data[0][idx];
  const parts = [`${spec.xLabel} ${fmtNum(x)}`];
  u.series.slice(1).forEach((s, i) => {
    if (s.readout === false) return;
    const v = u.data[i + 1][idx];
    if (v !== undefined) { parts.push(`${s.label} ${v === null ? "NaN/Inf" : fmtNum(v)}`); return; }
    const near = u.lines && nearestPoint(u, u.lines[i], x);
    if (near) parts.push(`${s.label} ${near.y === null ? "NaN/Inf" : fmtNum(near.y)} (at ${fmtNum(near.x)})`);
  });
  const gap = nearest(spec.gaps, u, left, 6);
  if (gap) parts.push(`${gap.kind} at ${spec.xLabel} ${fmtNum(gap.x)}`);
  const ev = nearest(spec.events && spec.events(), u, left, 6);
  if (ev) parts.push(`⚑ ${ev.kind}: ${ev.message}${ev.step !== null && ev.step !== undefined ? ` (step ${ev.step})` : ""}`);
  return parts.join(" · ");
}

// spec: {id, xLabel, yLabel, lines: [{label, xs, ys, color, dash, width}], bands: [{label, xs, lo, hi, color}],
//        events: () => [{x, kind, message, step, bad}], gaps: [{x, kind}], log, height, zoom (ZoomGroup)}
function lineChart(container, spec) {
  const lines = spec.lines.slice();
  const bandPairs = [];
  for (const b of spec.bands || []) {
    bandPairs.push([lines.length, lines.length + 1]);
    lines.push({ label: `${b.label} max`, xs: b.xs, ys: b.hi, color: b.color, band: true });
    lines.push({ label: `${b.label} min`, xs: b.xs, ys: b.lo, color: b.color, band: true });
  }
  const data = alignLines(lines);
  if (spec.log) for (let i = 1; i < data.length; i++) data[i] = data[i].map((v) => (v === undefined || v === null || v > 0 ? v : null));
  spec.hint = spec.hint || "hover for values · drag to zoom every chart · double-click to reset";
  const readout = el("div", { class: "readout", text: spec.hint });
  const width = Math.max(300, (container.clientWidth || 460) - 16);
  const zoom = spec.zoom;
  const opts = {
    width, height: spec.height || 220,
    scales: { x: { time: false }, y: spec.log ? { distr: 3 } : {} },
    axes: [
      { label: spec.xLabel, size: 42, values: (u, vals, ax, space, incr) => vals.map((v) => fmtTick(v, incr)) },
      { label: spec.yLabel || "", labelSize: 18, size: 64, values: (u, vals, ax, space, incr) => vals.map((v) => fmtTick(v, incr)) },
    ],
    legend: { show: lines.length > 1 || !!spec.legend, live: false },
    cursor: {
      drag: { x: true, y: false, setScale: !zoom },
      sync: zoom ? { key: zoom.key || "page", setSeries: false } : undefined,
      bind: zoom ? { dblclick: () => () => { zoom.reset(); return null; } } : undefined,
    },
    series: [{ label: spec.xLabel }].concat(lines.map((l, i) => ({
      label: l.label,
      stroke: l.band ? "rgba(0,0,0,0)" : (l.color || T.colors[i % T.colors.length]),
      width: l.band ? 0 : (l.width || 1.5), dash: l.dash, spanGaps: false,
      // a line of few points (a run with one point among others with hundreds) shows its dots
      points: { show: !l.band && (data[0].length < 60 || l.xs.length < 60 || !!l.dots) }, readout: !l.band,
    }))),
    bands: bandPairs.map(([hi, lo], j) => ({ series: [hi + 1, lo + 1], fill: fade(spec.bands[j].color, 0.18) })),
    hooks: {
      setCursor: [(u) => { readout.textContent = readoutText(u, spec); }],
      setSelect: [(u) => {
        if (!zoom || u.select.width < 3) return;
        const min = u.posToVal(u.select.left, "x"), max = u.posToVal(u.select.left + u.select.width, "x");
        u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
        zoom.set(min, max);
      }],
    },
    plugins: [marksPlugin(spec)],
  };
  const holder = el("div");
  container.appendChild(holder);
  container.appendChild(readout);
  const u = new uPlot(opts, data, holder);
  // a band's edges are drawn as the fill between them, not as lines of their own in the legend
  u.root.querySelectorAll(".u-legend .u-series").forEach((row, i) => { if (i > 0 && lines[i - 1].band) row.hidden = true; });
  u.spec = spec;
  u.lines = lines;
  u.readout = readout;
  if (zoom) zoom.add(u);
  if (T.charts[spec.id] && T.charts[spec.id] !== u) destroyChart(spec.id);
  T.charts[spec.id] = u;
  return u;
}

// New data for a drawn chart with the same lines: drawn in place, so a live refresh keeps the
// zoomed range, the chart object and the hover readout (refreshed for the new values).
function updateChart(u, spec) {
  const data = alignLines(spec.lines);
  if (spec.log) for (let i = 1; i < data.length; i++) data[i] = data[i].map((v) => (v === undefined || v === null || v > 0 ? v : null));
  spec.hint = u.spec.hint;
  spec.zoom = u.spec.zoom;
  u.spec = spec;
  u.lines = spec.lines.slice();
  const zoomed = spec.zoom && spec.zoom.range;
  u.setData(data, !zoomed);
  if (zoomed) spec.zoom.apply(u);
  const idx = u.cursor.idx;
  if (idx !== null && idx !== undefined && u.cursor.left >= 0) u.readout.textContent = readoutText(u, spec);
}

function destroyChart(id) {
  const u = T.charts[id];
  if (!u) return;
  if (u.spec.zoom) u.spec.zoom.remove(u);
  u.destroy();
  delete T.charts[id];
}

function fade(color, alpha) {
  const m = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(color || "");
  return m ? `rgba(${parseInt(m[1], 16)},${parseInt(m[2], 16)},${parseInt(m[3], 16)},${alpha})` : `rgba(37,99,235,${alpha})`;
}

// A line's value at x by linear interpolation (null outside its span or next to a gap).
function interpolateAt(xs, ys, x) {
  let lo = 0, hi = xs.length - 1;
  if (!xs.length || x < xs[0] || x > xs[hi]) return null;
  while (hi - lo > 1) { const mid = (lo + hi) >> 1; if (xs[mid] <= x) lo = mid; else hi = mid; }
  if (xs[lo] === x) return ys[lo];
  if (ys[lo] === null || ys[hi] === null) return null;
  return ys[lo] + (ys[hi] - ys[lo]) * (x - xs[lo]) / (xs[hi] - xs[lo]);
}

// A series answer from the API as chart inputs: xs on the chosen axis (step, seconds since
// `created`, or tokens read off the run's `tokens` series), ys, and the gap marks; points the
// axis cannot place (steps outside the tokens series) are left out.
function seriesLine(s, axis, created, tokens) {
  let xs = axis === "step" ? s.steps : axis === "wall" ? s.walls.map((w) => w - created)
    : s.steps.map((st) => (tokens ? interpolateAt(tokens.steps, tokens.values, st) : null));
  let ys = s.values;
  const gaps = (s.gaps || []).map(([i, kind]) => ({ x: xs[i], kind })).filter((g) => g.x !== null);
  if (xs.some((x) => x === null)) {
    const keep = xs.map((x) => x !== null);
    ys = ys.filter((_, i) => keep[i]);
    xs = xs.filter((_, i) => keep[i]);
  }
  return { xs, ys, gaps };
}

// Steps covering an x range on an axis (step; wall: seconds since `created`; tokens: read off the
// run's `tokens` series), from one of the run's loaded series (sorted by step): the last loaded step
// at or before the range and the first at or after it, so the points between them are all inside.
function stepsFor(range, axis, s, created, tokens) {
  if (axis === "step") return [Math.max(0, Math.floor(range[0])), Math.ceil(range[1])];
  const xs = axis === "wall" ? s.walls.map((w) => w - created)
    : s.steps.map((st) => (tokens ? interpolateAt(tokens.steps, tokens.values, st) : null));
  let lo = 0, hi = s.steps.length ? s.steps[s.steps.length - 1] : 0, past = false;
  xs.forEach((x, i) => {
    if (x === null) return;
    if (x <= range[0]) lo = s.steps[i];
    if (x >= range[1] && !past) { hi = s.steps[i]; past = true; }
  });
  return [lo, hi];
}

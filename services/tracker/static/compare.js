// Compare page: the config differences first, then the same keys of several runs overlaid (MoE vs
// its dense twin, fp8 vs bf16) for any number of keys, on a step, wall-time or tokens axis, with
// per-layer keys grouped, scalars logged once in one table, and optional run groups (mean + min–max
// band). A zoom on a downsampled series refetches the range at full resolution on every axis.
"use strict";

const KEYS_PER_CALL = 16;

(async function main() {
  const root = document.getElementById("main");
  const params = new URLSearchParams(location.search);
  const ids = params.getAll("runs").flatMap((v) => v.split(",")).filter(Boolean);
  if (ids.length < 1) {
    root.replaceChildren(el("p", { class: "warn", text: "pick runs to compare on the run list (or /compare?runs=A&runs=B)" }));
    return;
  }
  const state = { xAxis: ["wall", "tokens"].includes(params.get("x")) ? params.get("x") : "step", smoothing: 0,
    groupBy: params.get("group") || "" };
  const smoothIn = el("input", { id: "smoothing", type: "range", min: "0", max: "0.99", step: "0.01", value: "0" });
  const xSel = el("select", { id: "x-axis" }, el("option", { value: "step", text: "x: step" }),
    el("option", { value: "wall", text: "x: wall time (s since each run's start)" }),
    el("option", { value: "tokens", text: "x: tokens (each run's `tokens` series)" }));
  const groupSel = el("select", { id: "group-by" }, el("option", { value: "", text: "no groups" }),
    el("option", { value: "tags", text: "group by tags" }));
  const resetBtn = el("button", { id: "reset-zoom", type: "button", text: "Reset zoom" });
  const legend = el("div", { class: "meta", id: "compare-runs" });
  const diffTable = el("table", { id: "config-diff" });
  const summary = el("div", { id: "compare-summary" });
  const grid = el("div", { class: "grid", id: "compare-charts" });
  const layerGroups = el("div", { id: "compare-layers" });
  const progress = el("span", { class: "note", id: "progress" });
  root.replaceChildren(el("h1", { text: `Compare ${ids.length} runs` }), legend,
    el("h2", { text: "Config differences" }), diffTable,
    el("div", { class: "controls" }, xSel, el("label", {}, "smoothing ", smoothIn), groupSel, resetBtn, progress),
    el("h2", { text: "Summary (values logged once)" }), summary,
    el("h2", { text: "Metrics" }), grid, layerGroups);

  const runs = await Promise.all(ids.map((id) => api(`/api/runs/${encodeURIComponent(id)}`)));
  const color = (i) => T.colors[i % T.colors.length];
  legend.replaceChildren(...runs.map((r, i) => el("span", {},
    el("span", { style: `color:${color(i)}`, text: "■ " }),
    el("a", { href: "/runs/" + encodeURIComponent(r.id), text: r.name }), " ", statusBadge(r.status))));

  // config differences, on top: the first thing to know about two runs is how they differ
  const diffKeys = [];
  const head = el("tr", {}, el("th", { text: "key" }), ...runs.map((r) => el("th", { text: r.name })));
  const rows = [];
  if (runs.length >= 2) {
    const diffs = await Promise.all(runs.slice(1).map((r) => api("/api/diff", { a: runs[0].id, b: r.id })));
    const byKey = new Map();
    diffs.forEach((d, j) => d.differences.forEach((x) => {
      if (!byKey.has(x.key)) byKey.set(x.key, new Array(runs.length).fill(undefined));
      const row = byKey.get(x.key);
      row[0] = x.in_a ? x.a : "(absent)";
      row[j + 1] = x.in_b ? x.b : "(absent)";
    }));
    for (const [key, vals] of [...byKey.entries()].sort()) {
      diffKeys.push(key);
      rows.push(el("tr", { "data-key": key }, el("td", { text: key }),
        ...vals.map((v, i) => el("td", { class: i === 0 ? "diff-a" : "diff-b", text: v === undefined ? "(same as first)" : JSON.stringify(v) }))));
    }
    if (!rows.length) rows.push(el("tr", {}, el("td", { text: "configs are identical" })));
  }
  diffTable.replaceChildren(head, ...rows);
  diffKeys.forEach((k) => groupSel.appendChild(el("option", { value: "config:" + k, text: `group by ${k}` })));
  groupSel.value = [...groupSel.options].some((o) => o.value === state.groupBy) ? state.groupBy : "";

  // every key of every run; keys logged once go to the summary table
  const keySets = await Promise.all(ids.map((id) => api(`/api/runs/${encodeURIComponent(id)}/keys`)));
  const info = new Map();  // key -> [per-run key info or undefined]
  keySets.forEach((ks, i) => ks.scalars.forEach((s) => {
    if (!info.has(s.key)) info.set(s.key, new Array(runs.length).fill(undefined));
    info.get(s.key)[i] = s;
  }));
  const once = [...info.keys()].filter((k) => info.get(k).every((s) => !s || isSummary(s))).sort();
  const keys = orderKeys([...info.keys()].filter((k) => !once.includes(k)));
  summary.replaceChildren(summaryTable("compare-summary-table",
    once.map((k) => ({ key: k, values: info.get(k).map((s) => (s ? s.last_value : "—")) })), runs.map((r) => r.name)));
  summary.hidden = once.length === 0;

  const full = {};  // key -> {runId -> series}
  // `list`'s series of the runs `among` (all by default), whole or the steps [start, end] of `steps`
  async function fetchKeys(list, steps, among = ids) {
    const out = {};
    const chunks = [];
    for (let i = 0; i < list.length; i += KEYS_PER_CALL) chunks.push(list.slice(i, i + KEYS_PER_CALL));
    let done = 0;
    const worker = async () => {
      while (chunks.length) {
        const part = chunks.shift();
        const q = { runs: among, key: part, points: 1500 };
        if (steps) Object.assign(q, { start: steps[0], end: steps[1] });
        const res = await api("/api/compare", q);
        for (const [k, per] of Object.entries(res.series)) Object.assign(out[k] = out[k] || {}, per);
        done += part.length;
        progress.textContent = `${done} of ${list.length} keys loaded`;
      }
    };
    await Promise.all([worker(), worker(), worker()]);
    return out;
  }

  // The zoomed x range at full resolution. On the step axis every run shares the steps; on wall time
  // and tokens each run reaches the range at its own steps, read off its own loaded series, so each
  // run is asked for its own steps.
  async function fetchRange(list, range) {
    if (state.xAxis === "step") return fetchKeys(list, stepsFor(range, "step"));
    const out = {};
    await Promise.all(runs.map(async (r) => {
      let lo = Infinity, hi = -Infinity;
      for (const k of list) {
        const s = (full[k] || {})[r.id];
        if (!s || !s.steps.length) continue;
        const [a, b] = stepsFor(range, state.xAxis, s, r.created, (full.tokens || {})[r.id]);
        lo = Math.min(lo, a); hi = Math.max(hi, b);
      }
      if (!(hi >= lo)) return;
      const got = await fetchKeys(list, [lo, hi], [r.id]);
      for (const [k, per] of Object.entries(got)) Object.assign(out[k] = out[k] || {}, per);
    }));
    return out;
  }
  Object.assign(full, await fetchKeys(keys));
  let zoomed = {};

  const zoom = new ZoomGroup(async (range) => {
    if (!range) { zoomed = {}; drawAll(); return; }
    const need = keys.filter((k) => Object.values(full[k] || {}).some((s) => s.returned < s.total));
    const got = need.length ? await fetchRange(need, range) : {};
    if (zoom.range !== range) return;
    zoomed = got;
    need.forEach((k) => drawKey(k));
    document.body.dataset.zoomed = String((+document.body.dataset.zoomed || 0) + 1);
  });

  function linesFor(key) {
    const per = { ...(full[key] || {}), ...(zoomed[key] || {}) };  // a run the zoom did not refetch keeps its points
    const lineOf = (r) => {
      const s = per[r.id];
      if (!s) return null;
      const l = seriesLine(s, state.xAxis, r.created, (full.tokens || {})[r.id]);
      return { xs: l.xs, ys: smooth(l.ys, state.smoothing), raw: l.ys, gaps: l.gaps };
    };
    // with smoothing, each run's raw points stay drawn faintly under its smoothed line, both named
    // in the readout, as on the run page: nothing is smoothed unseen
    const sm = state.smoothing;
    if (!state.groupBy) {
      const lines = [], gaps = [];
      runs.forEach((r, i) => {
        const l = lineOf(r);
        if (sm > 0) lines.push({ label: `${r.name} raw`, xs: l ? l.xs : [], ys: l ? l.raw : [], color: fade(color(i), 0.3), width: 1 });
        lines.push({ label: sm > 0 ? `${r.name} smoothed ${sm}` : r.name, xs: l ? l.xs : [], ys: l ? l.ys : [], color: color(i) });
        if (l) gaps.push(...l.gaps);
      });
      return { lines, bands: [], gaps };
    }
    const lines = [], bands = [];
    [...groupRuns(runs, state.groupBy).entries()].forEach(([label, members], g) => {
      const ls = members.map(lineOf).filter(Boolean);
      if (!ls.length) return;
      const agg = aggregate(ls);
      lines.push({ label: `${label} (mean of ${ls.length}${sm > 0 ? `, each smoothed ${sm}` : ""})`, xs: agg.xs, ys: agg.mean,
        color: color(g), width: 2 });
      if (ls.length > 1) bands.push({ label, xs: agg.xs, lo: agg.lo, hi: agg.hi, color: color(g) });
    });
    return { lines, bands, gaps: [] };
  }

  const holders = new Map();
  function card(key, parent) {
    const holder = el("div", { class: "plot" });
    parent.appendChild(el("div", { class: "card", "data-key": key }, el("h3", { text: key }), holder));
    holders.set(key, holder);
  }
  function drawKey(key) {
    const holder = holders.get(key);
    destroyChart(key);
    holder.replaceChildren();
    const { lines, bands, gaps } = linesFor(key);
    const xLabel = { step: "step", wall: "seconds since start", tokens: "tokens" }[state.xAxis];
    lineChart(holder, { id: key, xLabel, yLabel: unitOf(key),
      lines, bands, gaps, zoom, legend: true });
  }
  function layout() {
    grid.replaceChildren();
    layerGroups.replaceChildren();
    const byPrefix = new Map();
    for (const k of keys) {
      const l = layerOf(k);
      if (!l) { card(k, grid); continue; }
      if (!byPrefix.has(l.prefix)) byPrefix.set(l.prefix, []);
      byPrefix.get(l.prefix).push(k);
    }
    for (const [prefix, ks] of byPrefix) {
      const g = el("div", { class: "grid layer-grid", "data-prefix": prefix });
      layerGroups.appendChild(el("h2", { text: `${prefix}: per layer (${ks.length})` }));
      layerGroups.appendChild(g);
      ks.sort((a, b) => layerOf(a).layer - layerOf(b).layer).forEach((k) => card(k, g));
    }
  }
  function drawAll() { keys.forEach(drawKey); }

  layout();
  drawAll();
  progress.textContent = `${keys.length} charts, ${once.length} summary values`;
  smoothIn.addEventListener("input", () => { state.smoothing = +smoothIn.value; drawAll(); });
  xSel.value = state.xAxis;
  xSel.addEventListener("change", () => {
    state.xAxis = xSel.value; zoom.range = null; zoomed = {}; drawAll();
    const q = new URLSearchParams(location.search);
    state.xAxis === "step" ? q.delete("x") : q.set("x", state.xAxis);
    history.replaceState(null, "", location.pathname + "?" + q);
  });
  groupSel.addEventListener("change", () => { state.groupBy = groupSel.value; drawAll(); });
  resetBtn.addEventListener("click", () => zoom.reset());
  document.body.dataset.ready = "1";
})().catch(failed);

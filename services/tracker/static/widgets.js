// Non-line views: expert-load heatmaps, data funnels (corpus and per source), the scorer's
// reliability diagrams, and a pipeline's stage table and timeline.
"use strict";

// Viridis-like colour ramp for heatmaps (value in [0, 1]).
function ramp(t) {
  const stops = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  t = Math.min(1, Math.max(0, t)) * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(t)), f = t - i;
  const c = stops[i].map((a, j) => Math.round(a + (stops[i + 1][j] - a) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

// Expert-load heatmap: x = steps, y = experts; each column is the share of that step's tokens
// per expert. The colour scale is fixed, not stretched to the data: 0 (dark) → the fair share 1/E
// (middle) → 2/E or more (bright), so a balanced run reads as an even middle colour and a hot or
// starved expert stands out at once; a colour bar and step/expert axes say so.
function heatmap(container, key, steps, rows) {
  const nExperts = Math.max(...rows.map((r) => r.length));
  const fair = 1 / nExperts;
  const canvas = el("canvas", { class: "heatmap", "data-key": key });
  canvas.width = Math.max(1, steps.length);
  canvas.height = nExperts;
  canvas.style.height = Math.min(260, Math.max(80, nExperts * 8)) + "px";
  const ctx = canvas.getContext("2d");
  const shares = rows.map((r) => {
    const sum = r.reduce((a, b) => a + b, 0) || 1;
    return r.map((v) => v / sum);
  });
  shares.forEach((col, x) => col.forEach((v, y) => {
    ctx.fillStyle = ramp(v / (2 * fair));
    ctx.fillRect(x, y, 1, 1);
  }));
  canvas.dataset.cells = String(steps.length * nExperts);
  const readout = el("div", { class: "readout", text: "hover a cell: step, expert, share of tokens" });
  canvas.addEventListener("mousemove", (ev) => {
    const r = canvas.getBoundingClientRect();
    const x = Math.floor((ev.clientX - r.left) / r.width * steps.length);
    const y = Math.floor((ev.clientY - r.top) / r.height * nExperts);
    if (shares[x] && shares[x][y] !== undefined) {
      readout.textContent = `step ${steps[x]} · expert ${y} · ${(shares[x][y] * 100).toFixed(2)}% of tokens ` +
        `(${(shares[x][y] / fair).toFixed(2)}× fair share; ${rows[x][y]} tokens)`;
    }
  });
  const yAxis = el("div", { class: "hm-yaxis" }, el("span", { text: "expert 0" }), el("span", { text: "experts ↓" }),
    el("span", { text: `expert ${nExperts - 1}` }));
  const mid = steps[Math.floor(steps.length / 2)];
  const xAxis = el("div", { class: "hm-xaxis" }, el("span", { text: `step ${fmtNum(steps[0])}` }),
    el("span", { text: `step ${fmtNum(mid)}` }), el("span", { text: `step ${fmtNum(steps[steps.length - 1])}` }));
  const bar = el("canvas", { class: "hm-colorbar", width: 200, height: 1 });
  const bctx = bar.getContext("2d");
  for (let i = 0; i < 200; i++) { bctx.fillStyle = ramp(i / 199); bctx.fillRect(i, 0, 1, 1); }
  const legend = el("div", { class: "hm-legend" }, bar, el("div", { class: "hm-ticks" },
    el("span", { text: "0%" }), el("span", { text: `${(100 * fair).toFixed(1)}% = fair share (1/${nExperts})` }),
    el("span", { text: `≥ ${(200 * fair).toFixed(1)}% (2× fair)` })));
  container.appendChild(el("div", { class: "hm-body" }, yAxis, el("div", { class: "hm-plot" }, canvas, xAxis)));
  container.appendChild(legend);
  container.appendChild(readout);
  container.appendChild(el("div", { class: "note", text: `experts 0–${nExperts - 1} (rows) × steps ${steps[0]}–${steps[steps.length - 1]} (columns); colour: share of the step's tokens, from 0 through the fair share ${(100 * fair).toFixed(1)}% to twice it` }));
  return canvas;
}

function funnelBars(container, name, stages) {
  const first = stages.length ? stages[0].count : 0;
  const box = el("div", { class: "funnel", "data-name": name });
  for (const s of stages) {
    const pct = first ? ` (${(100 * s.count / first).toFixed(1)}%)` : "";
    box.appendChild(el("div", { class: "funnel-row", title: `${s.stage}: ${s.count.toLocaleString()}${pct}` },
      el("span", { class: "funnel-label", text: s.stage }),
      el("span", { class: "funnel-bar", style: `width:${(60 * s.count / Math.max(1, first)).toFixed(2)}%` }),
      el("span", { text: `${s.count.toLocaleString()}${pct}` })));
  }
  container.appendChild(box);
}

// Every funnel a run logged: the corpus one(s) as bars, the per-source ones (`<name>/<source>`)
// side by side in one table (stages × sources), so 20 sources stay readable.
function funnels(container, byName) {
  container.replaceChildren();
  const names = [...byName.keys()];
  const perSource = names.filter((n) => n.includes("/"));  // `documents/<source>`
  for (const name of names.filter((n) => !perSource.includes(n))) {
    const card = el("div", { class: "card" }, el("h3", { text: `${name}: per stage` }));
    funnelBars(card, name, byName.get(name).data.stages || []);
    container.appendChild(card);
  }
  if (!perSource.length) return;
  const stageOrder = [];
  perSource.forEach((n) => (byName.get(n).data.stages || []).forEach((s) => { if (!stageOrder.includes(s.stage)) stageOrder.push(s.stage); }));
  const table = el("table", { class: "funnel-matrix" },
    el("tr", {}, el("th", { text: "stage" }), ...perSource.map((n) => el("th", { "data-name": n, text: n.split("/").slice(1).join("/") || n }))));
  for (const stage of stageOrder) {
    table.appendChild(el("tr", {}, el("td", { text: stage }), ...perSource.map((n) => {
      const st = byName.get(n).data.stages || [];
      const hit = st.find((s) => s.stage === stage);
      if (!hit) return el("td", { class: "num", text: "—" });
      const first = st.length ? st[0].count : 0;
      return el("td", { class: "num" }, el("span", { class: "mini-bar", style: `width:${first ? (40 * hit.count / first).toFixed(1) : 0}px` }),
        `${hit.count.toLocaleString()}${first ? ` (${(100 * hit.count / first).toFixed(0)}%)` : ""}`);
    })));
  }
  container.appendChild(el("div", { class: "card wide", "data-name": "per-source" },
    el("h3", { text: `per source (${perSource.length}): documents left after each stage` }),
    el("div", { class: "table-scroll", id: "funnel-scroll" }, table)));  // many sources scroll, never clip
}

// Reliability diagram: each bin at (mean predicted, mean observed) against the diagonal, with its
// count; the gap to the diagonal is the miscalibration, the ECE its count-weighted mean.
function reliabilityDiagram(container, name, event) {
  const d = event.data;
  const bins = (d.bins || []).slice().sort((a, b) => a.predicted - b.predicted);
  const lo = d.range ? d.range[0] : Math.min(...bins.map((b) => Math.min(b.predicted, b.observed)));
  const hi = d.range ? d.range[1] : Math.max(...bins.map((b) => Math.max(b.predicted, b.observed)));
  const card = el("div", { class: "card", "data-name": name },
    el("h3", { text: `${name}: ECE ${fmtNum(d.ece)} over ${fmtNum(d.n)} items` }));
  container.appendChild(card);
  const u = lineChart(card, {
    id: "calibration:" + name, xLabel: "mean predicted score", yLabel: "mean observed score", legend: true,
    lines: [
      { label: "observed", xs: bins.map((b) => b.predicted), ys: bins.map((b) => b.observed), width: 2 },
      { label: "perfectly calibrated", xs: [lo, hi], ys: [lo, hi], color: "#9ca3af", dash: [5, 5] },
    ],
    hint: "hover a bin: mean predicted, mean observed",
  });
  const most = Math.max(1, ...bins.map((b) => b.count));
  card.appendChild(el("div", { class: "bin-counts" }, el("span", { class: "note", text: "items per bin: " }),
    ...bins.map((b) => el("span", { class: "bin", title: `predicted ${fmtNum(b.lo)}–${fmtNum(b.hi)}: ${b.count} items, observed ${fmtNum(b.observed)}`,
      style: `height:${Math.max(2, 40 * b.count / most).toFixed(1)}px` }))));
  return u;
}

// A pipeline's stages: one row per child run (status, start, duration, figures, detail runs) and
// a timeline of their spans relative to the pipeline's start.
function stageTable(container, pipeline, kids) {
  const head = el("tr", {}, ...["stage", "status", "started", "duration", "key figures", "detail runs"].map((h) => el("th", { text: h })));
  const rows = kids.map((k) => {
    const skipped = k.tags.includes("skipped");
    const figs = Object.entries(k.figures || {});
    const shown = figs.filter(([key]) => key !== "seconds").slice(0, 5);
    return el("tr", { "data-run": k.id, class: "stage-row" },
      el("td", {}, el("a", { href: "/runs/" + encodeURIComponent(k.id), text: k.name })),
      el("td", {}, statusBadge(skipped ? "skipped" : k.status)),
      el("td", { text: `+${fmtDuration(k.created - pipeline.created)}` }),
      el("td", { class: "duration", text: skipped ? `cached (ran ${fmtDuration((k.figures || {}).seconds)})` : fmtDuration(runDuration(k)) }),
      el("td", { class: "figures", title: figs.map(([a, b]) => `${a} = ${fmtNum(b)}`).join("\n") },
        shown.map(([a, b]) => `${a} ${fmtNum(b)}`).join(" · ") || "—"),
      el("td", {}, ...(k.children || []).map((g) => el("a", { class: "tag", href: "/runs/" + encodeURIComponent(g.id), text: g.name }))));
  });
  container.appendChild(el("table", { id: "stages" }, head, ...rows));
  const end = Math.max(...kids.map((k) => k.created + Math.max(0, runDuration(k))), pipeline.created + 1);
  const span = end - pipeline.created;
  const tl = el("div", { id: "timeline", class: "timeline" });
  for (const k of kids) {
    const skipped = k.tags.includes("skipped");
    const left = 100 * (k.created - pipeline.created) / span;
    const width = Math.max(0.4, 100 * Math.max(0, runDuration(k)) / span);
    tl.appendChild(el("div", { class: "tl-row" }, el("span", { class: "tl-label", text: k.name }),
      el("span", { class: "tl-track" }, el("span", {
        class: `tl-bar status-bg-${skipped ? "skipped" : k.status}`, "data-run": k.id,
        style: `left:${left.toFixed(2)}%;width:${width.toFixed(2)}%`,
        title: `${k.name}: ${skipped ? "skipped (cached)" : k.status}, +${fmtDuration(k.created - pipeline.created)} for ${fmtDuration(runDuration(k))}`,
      }))));
  }
  tl.appendChild(el("div", { class: "note", text: `timeline: 0 – ${fmtDuration(span)} after the pipeline started` }));
  container.appendChild(tl);
}

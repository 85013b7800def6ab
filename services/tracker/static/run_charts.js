// The run page's scalar charts: one chart per key (per-layer keys share one chart per prefix),
// custom panels that overlay any keys, system metrics on wall time; all series read in one
// request per KEYS_PER_CALL keys; live refreshes update the drawn data in place (the zoom and the
// readout stay), and a zoomed range is refetched at full resolution.
"use strict";

const KEYS_PER_CALL = 64;  // the compare endpoint's key limit

class RunCharts {
  constructor(runId, state, sections) {
    this.runId = runId;
    this.state = state;            // {run, events, xAxis, smoothing, panels}
    this.sections = sections;      // section name -> grid element
    this.full = {};                // key -> series answer for the whole run
    this.zoomed = {};              // key -> series answer for the zoomed range
    this.logScale = new Set();     // chart ids drawn on a log scale
    this.cards = new Map();        // chart id -> {card, keys, layered, custom}
    this.zoom = new ZoomGroup((range) => this.onRange(range));
    this.requests = 0;             // series requests made (the page reads its keys in one)
  }

  // Every key's series, KEYS_PER_CALL keys per request (the whole run, or the steps of a range).
  async fetchMany(keys, range) {
    const out = {};
    for (let i = 0; i < keys.length; i += KEYS_PER_CALL) {
      const part = keys.slice(i, i + KEYS_PER_CALL);
      const q = { runs: [this.runId], key: part, points: 2000 };
      if (range) {
        const [start, end] = this.stepsFor(range, part[0]);
        Object.assign(q, { start, end });
      }
      this.requests += 1;
      const res = await api("/api/compare", q);
      for (const k of part) if (res.series[k] && res.series[k][this.runId]) out[k] = res.series[k][this.runId];
    }
    return out;
  }

  isSystem(key) { return key.startsWith("system/"); }
  axisOf(key) { return this.isSystem(key) ? "wall" : this.state.xAxis; }  // samples are not steps

  // x values of a series on an axis: steps, seconds since the run's start, or tokens seen (read
  // off the run's `tokens` series, interpolated between its points).
  xsOf(s, axis) {
    if (axis === "step") return s.steps;
    if (axis === "wall") return s.walls.map((w) => w - this.state.run.created);
    const tok = this.full.tokens;
    return s.steps.map((st) => (tok ? interpolateAt(tok.steps, tok.values, st) : null));
  }

  stepsFor(range, key) {
    return stepsFor(range, this.axisOf(key), this.full[key] || this.full.tokens, this.state.run.created, this.full.tokens);
  }

  chartIdOf(key) {
    const f = frozenOf(key), g = evalGroupOf(key), l = layerOf(key);
    return f ? f.chart : g ? g.id : l ? "layers:" + l.prefix : key;
  }

  ensureCard(key) {
    const id = this.chartIdOf(key);
    if (this.cards.has(id)) { const c = this.cards.get(id); if (!c.keys.includes(key)) c.keys.push(key); return; }
    const frozen = frozenOf(key);
    if (frozen) {
      const layered = frozen.kind === "layer";
      this.addCard(id, layered ? "router/maxvio (per layer)" : "router/maxvio", [key], { layered, section: "router" });
      return;
    }
    const group = evalGroupOf(key);
    if (group) { this.addCard(id, group.title, [key], { group: true, section: "evaluation" }); return; }
    const layer = layerOf(key);
    const title = layer ? `${layer.prefix} (per layer)` : key;
    const section = this.isSystem(key) ? "system" : sectionOf(layer ? layer.prefix : key);
    this.addCard(id, title, [key], { layered: !!layer, section });
  }

  addCard(id, title, keys, { layered = false, custom = false, group = false, section, onRemove } = {}) {
    const logBox = el("input", { type: "checkbox", class: "log-toggle", "data-chart": id });
    logBox.addEventListener("change", () => { logBox.checked ? this.logScale.add(id) : this.logScale.delete(id); this.draw(id, true); });
    const remove = onRemove ? el("button", { type: "button", class: "expand panel-remove", text: "×", title: "remove this panel" }) : null;
    if (remove) remove.addEventListener("click", () => { destroyChart(id); this.cards.get(id).card.remove(); this.cards.delete(id); onRemove(); });
    const card = el("div", { class: "card", id: "card-" + id, "data-key": id },
      el("div", { class: "card-head" }, el("h3", { text: title }), el("label", { class: "note" }, logBox, " log y"), remove),
      el("div", { class: "plot" }), el("div", { class: "note card-note" }));
    this.sections[section].appendChild(card);
    this.cards.set(id, { card, keys: keys.slice(), layered, custom, group });
  }

  // A custom panel: any keys of the run overlaid on one chart (train and eval loss together).
  addPanel(keys, onRemove) {
    const id = "panel:" + keys.join("+");
    if (this.cards.has(id)) return id;
    this.addCard(id, keys.join(" · "), keys, { custom: true, section: "panels", onRemove });
    this.draw(id, true);
    return id;
  }

  async load(keys) {
    keys.forEach((k) => this.ensureCard(k));
    Object.assign(this.full, await this.fetchMany(keys));
    for (const id of this.cards.keys()) this.draw(id);
  }

  eventMarks(axis) {
    const st = this.state;
    return st.events.filter((e) => e.kind !== "funnel" && e.kind !== "calibration").map((e) => ({
      x: axis === "wall" ? e.wall - st.run.created : axis === "step" ? e.step
        : (this.full.tokens && e.step !== null ? interpolateAt(this.full.tokens.steps, this.full.tokens.values, e.step) : null),
      kind: e.kind, message: e.message, step: e.step, bad: BAD_EVENTS.has(e.kind),
    }));
  }

  // The chart's lines as drawn now; with smoothing, each series twice: the raw points faintly
  // underneath and the smoothed line on top, both named, so the readout gives both values.
  spec(id) {
    const entry = this.cards.get(id);
    const st = this.state;
    const layerNo = (k) => frozenOf(k)?.layer ?? layerOf(k)?.layer ?? 0;
    const rank = (k) => { const f = frozenOf(k); return !f ? 0 : f.kind === "floor" ? 2 : 1; };  // step, frozen, floor
    const keys = entry.keys.filter((k) => this.full[k]).sort((a, b) => rank(a) - rank(b) || layerNo(a) - layerNo(b));
    if (!keys.length) return null;
    const axis = this.axisOf(keys[0]);
    const lines = [], gaps = [], frozenLines = [];
    keys.forEach((k, i) => {
      const s = this.zoomed[k] || this.full[k];
      const xs = this.xsOf(s, axis);
      const keep = xs.map((x) => x !== null && x !== undefined);
      const ys = s.values.filter((_, j) => keep[j]);
      const line = { xs: xs.filter((_, j) => keep[j]), ys };
      const frozen = frozenOf(k);
      const label = frozen ? frozen.label : entry.layered ? "layer " + layerOf(k).layer : entry.group ? evalGroupOf(k).label : k;
      const color = T.colors[(frozen && frozen.kind === "layer" ? frozen.layer : i) % T.colors.length];
      if (frozen) { frozenLines.push({ k, frozen, line, color }); return; }
      if (st.smoothing > 0) {
        lines.push({ label: `${label} raw`, xs: line.xs, ys, color: fade(color, 0.3), width: 1 });
        lines.push({ label: `${label} smoothed ${st.smoothing}`, xs: line.xs, ys: smooth(ys, st.smoothing), color });
      } else {
        lines.push({ label, xs: line.xs, ys, color });
      }
      (s.gaps || []).forEach(([j, kind]) => { if (keep[j]) gaps.push({ x: xs[j], kind }); });
    });
    // The frozen router's MaxVio beside the training step's (dots: measured after training, or at
    // evaluations), and the data's floor as a dashed line across the chart: what a frozen router
    // can reach is set by the data, not by zero.
    const span = lines.flatMap((l) => l.xs);
    const [x0, x1] = span.length ? [Math.min(...span), Math.max(...span)] : [0, 1];
    for (const { frozen, line, color } of frozenLines) {
      if (frozen.kind === "floor") {
        const v = line.ys[line.ys.length - 1];
        lines.push({ label: frozen.label, xs: line.xs.length > 1 ? line.xs : [x0, x1],
          ys: line.xs.length > 1 ? line.ys : [v, v], color: "#6b7280", dash: [6, 4], width: 1.5 });
      } else {
        lines.push({ label: frozen.label, xs: line.xs, ys: line.ys, color, dash: frozen.kind === "layer" ? [3, 3] : undefined,
          width: 2, dots: true });
      }
    }
    const unitKey = entry.custom ? keys[0] : entry.layered ? layerOf(keys[0]).prefix : keys[0];
    const yLabel = !entry.group ? unitOf(unitKey) : id === "eval:bpb" ? "bits per byte" : "task score";
    return {
      keys, id, lines, gaps, xLabel: AXIS_LABELS[axis], yLabel, log: this.logScale.has(id),
      events: () => this.eventMarks(axis), zoom: axis === st.xAxis ? this.zoom : null,
      legend: entry.layered || entry.custom || entry.group || st.smoothing > 0,
    };
  }

  note(entry, keys) {
    const nf = keys.reduce((a, k) => a + this.full[k].nonfinite.nan + this.full[k].nonfinite.inf + this.full[k].nonfinite["-inf"], 0);
    const shown = keys.reduce((a, k) => a + (this.zoomed[k] || this.full[k]).returned, 0);
    const total = keys.reduce((a, k) => a + this.full[k].total, 0);
    const first = keys.map((k) => this.full[k].nonfinite.first_step).filter((x) => x !== null && x !== undefined);
    entry.card.querySelector(".card-note").textContent =
      `${total.toLocaleString()} points${shown < total ? ` (${shown.toLocaleString()} drawn: min/max per bucket${this.zoom.range ? ", zoomed range refetched" : ""})` : ""}` +
      (nf ? ` · ${nf} NaN/Inf, marked red (first at step ${Math.min(...first)})` : "") +
      (keys.some((k) => this.isSystem(k)) ? " · sampled every few seconds, drawn on wall time" : "") +
      (this.logScale.has(entry.card.dataset.key) ? " · log scale: values ≤ 0 not drawn" : "");
  }

  // Draw a chart, or when it exists with the same lines, give it the new data in place (a live
  // refresh keeps the zoom, the hover readout and the chart object); `rebuild` forces a new one.
  draw(id, rebuild) {
    const entry = this.cards.get(id);
    if (!entry) return;
    const spec = this.spec(id);
    if (!spec) return;
    this.note(entry, spec.keys);
    const u = T.charts[id];
    const same = u && !rebuild && u.spec.log === spec.log && u.spec.xLabel === spec.xLabel &&
      u.lines.length === spec.lines.length && u.lines.every((l, i) => l.label === spec.lines[i].label);
    if (same) { updateChart(u, spec); return; }
    const holder = entry.card.querySelector(".plot");
    destroyChart(id);
    holder.replaceChildren();
    lineChart(holder, spec);
  }

  redrawAll(rebuild = true) { for (const id of this.cards.keys()) this.draw(id, rebuild); }

  // Zoom: every key whose whole-run answer was downsampled is fetched again for the range, so a
  // 1,000-step window of a 1M-point series is drawn from its real points.
  async onRange(range) {
    const keys = Object.keys(this.full).filter((k) => !this.isSystem(k));
    if (!range) { this.zoomed = {}; this.redrawAll(); return; }
    const need = keys.filter((k) => this.full[k].returned < this.full[k].total);
    const got = need.length ? await this.fetchMany(need, range).catch(() => ({})) : {};
    if (this.zoom.range !== range) return;  // a newer zoom replaced this one
    Object.assign(this.zoomed, got);
    const ids = new Set([...this.cards.entries()].filter(([, e]) => e.keys.some((k) => need.includes(k))).map(([id]) => id));
    ids.forEach((id) => this.draw(id, true));
    document.body.dataset.zoomed = String((+document.body.dataset.zoomed || 0) + 1);
  }
}

const AXIS_LABELS = { step: "step", wall: "seconds since start", tokens: "tokens" };

// Evaluation keys drawn together: every reference set's bits per byte on one chart
// (`eval/bpb/<set>`), and each task's metrics on one chart per task (`eval/task/<task>/<metric>`).
// The frozen router's figures (the trained model routing held-out tokens): `router_frozen/maxvio_worst`
// and `router_frozen/floor` join the step MaxVio chart, `router_frozen/maxvio/<layer>` the
// per-layer one.
// The trainer's chance level (`router/maxvio_chance`, uniform routing of the step's tokens) is a
// dashed line on the step MaxVio chart too, and the end-of-run calibration's per-layer figures
// (`router_calibration/maxvio_before|after/<layer>`) are dots on the per-layer chart.
function frozenOf(key) {
  if (key === "router_frozen/maxvio_worst") return { chart: "router/maxvio", kind: "worst", label: "frozen router, worst layer" };
  if (key === "router_frozen/floor") return { chart: "router/maxvio", kind: "floor", label: "floor set by the data" };
  if (key === "router/maxvio_chance") return { chart: "router/maxvio", kind: "floor", label: "chance level (uniform routing)" };
  let m = key.match(/^router_frozen\/maxvio\/(?:layer)?(\d+)$/);
  if (m) return { chart: "layers:router/maxvio", kind: "layer", layer: +m[1], label: `layer ${m[1]} frozen` };
  m = key.match(/^router_calibration\/maxvio_(before|after)\/(?:layer)?(\d+)$/);
  if (m) return { chart: "layers:router/maxvio", kind: "layer", layer: +m[2], label: `layer ${m[2]} ${m[1]} calibration` };
  return null;
}

function evalGroupOf(key) {
  let m = key.match(/^eval\/bpb\/(.+)$/);
  if (m) return { id: "eval:bpb", title: "bits per byte per reference set (eval/bpb/…)", label: m[1] };
  m = key.match(/^eval\/task\/([^/]+)\/(.+)$/);
  if (m) return { id: "eval:task:" + m[1], title: `task ${m[1]} (eval/task/${m[1]}/…)`, label: m[2] };
  return null;
}

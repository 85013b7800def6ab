// The run page's scalar charts: one chart per key (per-layer keys share one chart per prefix),
// redrawn on axis/smoothing/log changes, and refetched at full resolution for a zoomed range.
"use strict";

class RunCharts {
  constructor(runId, state, sections) {
    this.runId = runId;
    this.state = state;            // {run, events, xAxis, smoothing}
    this.sections = sections;      // section name -> grid element
    this.full = {};                // key -> series answer for the whole run
    this.zoomed = {};              // key -> series answer for the zoomed range
    this.logScale = new Set();     // chart ids drawn on a log scale
    this.cards = new Map();        // chart id -> {card, keys, title}
    this.zoom = new ZoomGroup((range) => this.onRange(range));
  }

  async fetch(key, range) {
    const params = { key, points: 2000 };
    if (range) {
      const [start, end] = stepsFor(range, this.state.xAxis, this.full[key], this.state.run.created);
      Object.assign(params, { start, end });
    }
    return api(`/api/runs/${encodeURIComponent(this.runId)}/series`, params);
  }

  chartIdOf(key) { const l = layerOf(key); return l ? "layers:" + l.prefix : key; }

  ensureCard(key) {
    const id = this.chartIdOf(key);
    if (this.cards.has(id)) { const c = this.cards.get(id); if (!c.keys.includes(key)) c.keys.push(key); return; }
    const layer = layerOf(key);
    const title = layer ? `${layer.prefix} (per layer)` : key;
    const logBox = el("input", { type: "checkbox", class: "log-toggle", "data-chart": id });
    logBox.addEventListener("change", () => { logBox.checked ? this.logScale.add(id) : this.logScale.delete(id); this.draw(id); });
    const card = el("div", { class: "card", id: "card-" + id, "data-key": id },
      el("div", { class: "card-head" }, el("h3", { text: title }), el("label", { class: "note" }, logBox, " log y")),
      el("div", { class: "plot" }), el("div", { class: "note card-note" }));
    this.sections[sectionOf(layer ? layer.prefix : key)].appendChild(card);
    this.cards.set(id, { card, keys: [key], layered: !!layer });
  }

  async load(keys) {
    await Promise.all(keys.map(async (k) => {
      this.ensureCard(k);
      this.full[k] = await this.fetch(k);
    }));
    for (const id of this.cards.keys()) this.draw(id);
  }

  eventMarks() {
    const st = this.state;
    return st.events.filter((e) => e.kind !== "funnel" && e.kind !== "calibration").map((e) => ({
      x: st.xAxis === "step" ? e.step : e.wall - st.run.created, kind: e.kind, message: e.message, step: e.step,
      bad: BAD_EVENTS.has(e.kind),
    }));
  }

  draw(id) {
    const entry = this.cards.get(id);
    if (!entry) return;
    const st = this.state;
    const holder = entry.card.querySelector(".plot");
    destroyChart(id);
    holder.replaceChildren();
    const keys = entry.keys.filter((k) => this.full[k]).sort((a, b) => (layerOf(a)?.layer ?? 0) - (layerOf(b)?.layer ?? 0));
    if (!keys.length) return;
    // With smoothing, each series is drawn twice: the raw points faintly underneath and the
    // smoothed line on top, both named, so the readout gives the raw value beside the smoothed one.
    const lines = [], gaps = [];
    keys.forEach((k, i) => {
      const s = this.zoomed[k] || this.full[k];
      const line = seriesLine(s, st.xAxis, st.run.created);
      const label = entry.layered ? "layer " + layerOf(k).layer : k;
      const color = T.colors[i % T.colors.length];
      if (st.smoothing > 0) {
        lines.push({ label: `${label} raw`, xs: line.xs, ys: line.ys, color: fade(color, 0.3), width: 1 });
        lines.push({ label: `${label} smoothed ${st.smoothing}`, xs: line.xs, ys: smooth(line.ys, st.smoothing), color });
      } else {
        lines.push({ label, xs: line.xs, ys: line.ys, color });
      }
      gaps.push(...line.gaps);
    });
    const head = this.full[keys[0]];
    const nf = keys.reduce((a, k) => a + this.full[k].nonfinite.nan + this.full[k].nonfinite.inf + this.full[k].nonfinite["-inf"], 0);
    const shown = keys.reduce((a, k) => a + (this.zoomed[k] || this.full[k]).returned, 0);
    const total = keys.reduce((a, k) => a + this.full[k].total, 0);
    entry.card.querySelector(".card-note").textContent =
      `${total.toLocaleString()} points${shown < total ? ` (${shown.toLocaleString()} drawn: min/max per bucket${this.zoom.range ? ", zoomed range refetched" : ""})` : ""}` +
      (nf ? ` · ${nf} NaN/Inf, marked red (first at step ${head.nonfinite.first_step})` : "") +
      (this.logScale.has(id) ? " · log scale: values ≤ 0 not drawn" : "");
    lineChart(holder, {
      id, xLabel: st.xAxis === "step" ? "step" : "seconds since start", yLabel: unitOf(entry.layered ? layerOf(keys[0]).prefix : keys[0]),
      lines, gaps, events: () => this.eventMarks(), log: this.logScale.has(id), zoom: this.zoom,
      legend: entry.layered || st.smoothing > 0,
    });
  }

  redrawAll() { for (const id of this.cards.keys()) this.draw(id); }

  // Zoom: every key whose whole-run answer was downsampled is fetched again for the range, so a
  // 1,000-step window of a 1M-point series is drawn from its real points.
  async onRange(range) {
    const keys = Object.keys(this.full);
    if (!range) { this.zoomed = {}; this.redrawAll(); return; }
    const need = keys.filter((k) => this.full[k].returned < this.full[k].total);
    const got = await Promise.all(need.map((k) => this.fetch(k, range).catch(() => null)));
    if (this.zoom.range !== range) return;  // a newer zoom replaced this one
    need.forEach((k, i) => { if (got[i]) this.zoomed[k] = got[i]; });
    const ids = new Set(need.map((k) => this.chartIdOf(k)));
    ids.forEach((id) => this.draw(id));
    document.body.dataset.zoomed = String((+document.body.dataset.zoomed || 0) + 1);
  }
}

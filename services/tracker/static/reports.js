// What other stages leave on a run as events, shown as views: an ablation's report (verdicts, each
// arm's mean ± sd over seeds, each arm against the baseline with its interval, a link comparing the
// arm-seed runs grouped by arm) and the models exported from a training run, with their checks and
// the checkpoint they came from.
"use strict";

function fmtMeanSd(m) {
  return m ? `${fmtNum(m.mean)} ± ${fmtNum(m.sd)} (n ${m.n})` : "—";
}

function ablationReport(container, event) {
  container.replaceChildren();
  if (!event) return;
  const d = event.data;
  const arms = d.arms_order || Object.keys(d.arms || {});
  const metrics = d.metrics || [];
  container.appendChild(el("p", { class: "note", text: `${arms.length} arms × ${(d.seeds || []).length} seeds ` +
    `(seeds ${(d.seeds || []).join(", ")}), baseline ${d.baseline}` +
    (d.budget_tokens ? `, ${fmtNum(d.budget_tokens)} tokens per run` : "") +
    (d.failed_runs ? `; ${d.failed_runs} failed run(s) left out` : "") }));
  container.appendChild(el("ul", { id: "ablation-verdicts" }, ...(d.verdicts || []).map((v) => el("li", { text: v }))));
  const armTable = el("table", { id: "ablation-arms", class: "summary" },
    el("tr", {}, el("th", { text: "arm (mean ± sd over seeds)" }), ...metrics.map((m) => el("th", { text: m }))),
    ...arms.map((a) => el("tr", { "data-arm": a, class: a === d.baseline ? "baseline" : "" },
      el("td", { text: a === d.baseline ? `${a} (baseline)` : a }),
      ...metrics.map((m) => el("td", { class: "num", text: fmtMeanSd(((d.arms[a] || {}).metrics || {})[m]) })))));
  container.appendChild(el("div", { class: "table-scroll" }, armTable));
  const rows = [];
  for (const [arm, per] of Object.entries(d.comparisons || {})) {
    for (const [m, c] of Object.entries(per)) {
      rows.push(el("tr", { "data-arm": arm, "data-metric": m, class: c.excludes_zero ? "differs" : "" },
        el("td", { text: arm }), el("td", { text: m }),
        el("td", { class: "num", text: c.error ? "—" : (c.mean >= 0 ? "+" : "") + fmtNum(c.mean) }),
        el("td", { class: "num", text: c.error ? c.error : `[${fmtNum(c.ci_low)}, ${fmtNum(c.ci_high)}] (${Math.round(100 * (c.level || 0.95))}%)` }),
        el("td", { class: "num", text: c.seeds ? String(c.seeds.length) : "0" }),
        el("td", { text: c.verdict || "" })));
    }
  }
  container.appendChild(el("h3", { text: `each arm against ${d.baseline} (arm − baseline, paired by seed)` }));
  container.appendChild(el("div", { class: "table-scroll" }, el("table", { id: "ablation-comparisons" },
    el("tr", {}, ...["arm", "metric", "mean difference", "interval", "seeds", "verdict"].map((h) => el("th", { text: h }))),
    ...rows)));
  const ids = arms.flatMap((a) => Object.values((d.arms[a] || {}).runs || {}).map((r) => r.run_id).filter(Boolean));
  if (ids.length) {
    container.appendChild(el("p", {}, el("a", { id: "ablation-compare", href: "/compare?group=tags&" +
      ids.map((i) => "runs=" + encodeURIComponent(i)).join("&"), text: `compare the ${ids.length} arm-seed runs, grouped by arm` })));
  }
}

// Exports of this run's model (events of kind `artifact`): where, in which format and
// architecture, how close the exported model's logits came to ours and whether greedy decoding
// agreed, from which checkpoint; the lineage line above the page leads back to the data stages.
function exportTable(container, events, run, chain) {
  container.replaceChildren();
  if (!events.length) return;
  const head = el("tr", {}, ...["time (UTC)", "step", "path", "format", "architecture", "max |Δ logit|", "greedy equal",
    "source checkpoint"].map((h) => el("th", { text: h })));
  const rows = events.map((e) => {
    const x = e.data || {};
    return el("tr", { class: x.greedy_equal === false ? "event-bad" : "" }, el("td", { text: fmtTime(e.wall) }),
      el("td", { text: e.step ?? "" }), el("td", { class: "event-message", text: x.path || "" }), el("td", { text: x.format || "" }),
      el("td", { text: x.architecture || "" }), el("td", { class: "num", text: fmtNum(x.max_abs_logit_diff) }),
      el("td", { text: x.greedy_equal === undefined ? "—" : x.greedy_equal ? "yes" : "NO" }),
      el("td", { class: "event-message", text: x.source_checkpoint || "" }));
  });
  // lineage: the runs above this one (pipeline › stage), this run, then its exports
  const links = chain.flatMap((p) => [el("a", { href: "/runs/" + encodeURIComponent(p.id), text: p.name }), " › "]);
  container.appendChild(el("p", { class: "note", id: "export-lineage" }, "lineage: ", ...links, el("strong", { text: run.name }),
    ` → ${events.length} export(s): `, events.map((e) => (e.data || {}).path || "?").join(", ")));
  container.appendChild(el("div", { class: "table-scroll" }, el("table", { id: "exports-table" }, head, ...rows)));
}

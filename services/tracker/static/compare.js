// Compare page: overlay the same keys of several runs (e.g. MoE vs its dense twin, fp8 vs bf16)
// and show where their configs differ.
"use strict";

(async function main() {
  const root = document.getElementById("main");
  const params = new URLSearchParams(location.search);
  const ids = params.getAll("runs").flatMap((v) => v.split(",")).filter(Boolean);
  if (ids.length < 1) {
    root.replaceChildren(el("p", { class: "warn", text: "pick runs to compare on the run list (or /compare?runs=A&runs=B)" }));
    return;
  }
  const smoothIn = el("input", { id: "smoothing", type: "range", min: "0", max: "0.99", step: "0.01", value: "0" });
  const legend = el("div", { class: "meta", id: "compare-runs" });
  const grid = el("div", { class: "grid", id: "compare-charts" });
  const diffTable = el("table", { id: "config-diff" });
  root.replaceChildren(el("h1", { text: `Compare ${ids.length} runs` }), legend,
    el("div", { class: "controls" }, el("label", {}, "smoothing ", smoothIn)),
    el("h2", { text: "Metrics" }), grid, el("h2", { text: "Config differences" }), diffTable);

  const runs = await Promise.all(ids.map((id) => api(`/api/runs/${encodeURIComponent(id)}`)));
  legend.replaceChildren(...runs.map((r, i) => el("span", {},
    el("span", { style: `color:${T.colors[i % T.colors.length]}`, text: "■ " }),
    el("a", { href: "/runs/" + encodeURIComponent(r.id), text: r.name }), " ", statusBadge(r.status))));

  const keySets = await Promise.all(ids.map((id) => api(`/api/runs/${encodeURIComponent(id)}/keys`)));
  const keys = [...new Set(keySets.flatMap((k) => k.scalars.map((s) => s.key)))].sort((a, b) => {
    const order = ["loss", "eval/loss", "lr", "tokens_per_s", "mfu"];
    const ra = order.indexOf(a) < 0 ? 99 : order.indexOf(a), rb = order.indexOf(b) < 0 ? 99 : order.indexOf(b);
    return ra - rb || a.localeCompare(b);
  });
  const res = keys.length ? await api("/api/compare", { runs: ids, key: keys, points: 1500 }) : { series: {} };

  function drawAll() {
    const w = +smoothIn.value;
    grid.replaceChildren();
    for (const key of keys) {
      const holder = el("div", { class: "plot" });
      grid.appendChild(el("div", { class: "card", "data-key": key }, el("h3", { text: key }), holder));
      if (T.charts[key]) T.charts[key].destroy();
      const per = res.series[key] || {};
      lineChart(holder, key, "step", runs.map((r, i) => {
        const s = per[r.id];
        return { label: r.name, xs: s ? s.steps : [], ys: s ? smooth(s.values, w) : [], color: T.colors[i % T.colors.length] };
      }), { legend: true });
    }
  }
  drawAll();
  smoothIn.addEventListener("input", drawAll);

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
      rows.push(el("tr", { "data-key": key }, el("td", { text: key }),
        ...vals.map((v, i) => el("td", { class: i === 0 ? "diff-a" : "diff-b", text: v === undefined ? "(same as first)" : JSON.stringify(v) }))));
    }
    if (!rows.length) rows.push(el("tr", {}, el("td", { text: "configs are identical" })));
  }
  diffTable.replaceChildren(head, ...rows);
  document.body.dataset.ready = "1";
})().catch((e) => { document.getElementById("main").replaceChildren(el("p", { class: "warn", text: String(e) })); });

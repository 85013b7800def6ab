// Run page: lineage (pipeline › stage › run), a pipeline's stage table and timeline, the summary
// of scalars logged once, live charts (step or wall-time axis, smoothing, log scale, linked zoom),
// expert-load heatmaps, every data funnel, the scorer's reliability diagrams, events, config and
// artifacts.
"use strict";

const EVENT_PAGE = 2000;  // plain events per request; the table pages on demand beyond it

(async function main() {
  const root = document.getElementById("main");
  const runId = decodeURIComponent(location.pathname.split("/").pop());
  const state = { run: null, events: [], plain: [], eventTotal: 0, funnelEvents: [], calibrationEvents: [],
    xAxis: "step", smoothing: 0, live: true, panels: [] };
  const enc = encodeURIComponent(runId);

  const title = el("h1", { id: "run-name" });
  const lineage = el("div", { class: "meta", id: "lineage" });
  const meta = el("div", { class: "meta", id: "run-meta" });
  const xSel = el("select", { id: "x-axis" }, el("option", { value: "step", text: "x: step" }),
    el("option", { value: "wall", text: "x: wall time (s since start)" }),
    el("option", { value: "tokens", text: "x: tokens (the run's `tokens` series)", disabled: true }));
  const smoothIn = el("input", { id: "smoothing", type: "range", min: "0", max: "0.99", step: "0.01", value: "0" });
  const smoothOut = el("span", { class: "note", text: "smoothing 0" });
  const liveBox = el("input", { id: "live", type: "checkbox" });
  liveBox.checked = true;
  const resetBtn = el("button", { id: "reset-zoom", type: "button", text: "Reset zoom" });
  const keyList = el("datalist", { id: "run-keys" });
  const panelIn = el("input", { id: "panel-keys", list: "run-keys", size: 34, placeholder: "keys to overlay: train/loss, eval/loss" });
  const panelBtn = el("button", { id: "add-panel", type: "button", text: "Add panel" });
  const controls = el("div", { class: "controls" }, xSel, el("label", {}, "smoothing ", smoothIn), smoothOut,
    el("label", {}, liveBox, " live update"), resetBtn, panelIn, keyList, panelBtn);
  const sections = {
    panels: el("div", { class: "grid", id: "charts-panels" }),
    training: el("div", { class: "grid", id: "charts-training" }),
    evaluation: el("div", { class: "grid", id: "charts-evaluation" }),
    router: el("div", { class: "grid", id: "charts-router" }),
    other: el("div", { class: "grid", id: "charts-other" }),
    system: el("div", { class: "grid", id: "charts-system" }),
  };
  const box = (id) => el("div", { class: "grid", id });
  const eventsNote = el("div", { class: "note", id: "events-note" });
  const parts = { stages: el("div", { id: "stage-list" }), summary: el("div", { id: "summary" }), heatmaps: box("heatmaps"),
    funnels: box("funnels"), calibration: box("calibration"), events: el("table", { id: "events" }),
    ablation: el("div", { id: "ablation-report" }), exports: el("div", { id: "exports" }),
    config: el("pre", { id: "config" }), artifacts: el("table", { id: "artifacts" }) };
  const headings = {};
  const h2 = (id, text) => (headings[id] = el("h2", { id: "h-" + id, text }));

  root.replaceChildren(title, lineage, meta,
    h2("stages", "Stages"), parts.stages,
    h2("ablation", "Ablation report"), parts.ablation,
    h2("summary", "Summary (values logged once)"), parts.summary,
    controls,
    h2("panels", "Panels"), sections.panels,
    h2("training", "Training"), sections.training,
    h2("evaluation", "Evaluation (bits per byte per reference set, each task's metrics)"), sections.evaluation,
    h2("router", "Router health"), sections.router,
    h2("heatmaps", "Expert load per layer"), parts.heatmaps,
    h2("other", "Other metrics"), sections.other,
    h2("system", "System (CPU, memory, GPU) over wall time"), sections.system,
    h2("funnels", "Data funnels"), parts.funnels,
    h2("calibration", "Scorer calibration (reliability diagrams)"), parts.calibration,
    h2("events", "Events"), eventsNote, parts.events,
    h2("config", "Config"), parts.config,
    h2("exports", "Exported models"), parts.exports,
    h2("artifacts", "Artifacts"), parts.artifacts);
  const show = (id, on) => { headings[id].hidden = !on; (parts[id] || sections[id]).hidden = !on; };

  const charts = new RunCharts(runId, state, sections);
  const heatmapsDone = new Set();

  async function renderLineage(r) {
    const chain = [];
    let parent = r.parent;
    while (parent && chain.length < 4) {
      const p = await api(`/api/runs/${encodeURIComponent(parent)}`).catch(() => null);
      if (!p) { chain.unshift({ id: parent, name: parent }); break; }
      chain.unshift(p);
      parent = p.parent;
    }
    state.chain = chain;
    lineage.replaceChildren(...chain.flatMap((p, i) => [
      el("a", { href: "/runs/" + encodeURIComponent(p.id), class: i === 0 ? "lineage-root" : "lineage-parent",
        text: `${(p.tags || []).includes("pipeline") ? "pipeline " : ""}${p.name}` }), el("span", { text: " › " })]),
      ...(chain.length ? [el("span", { text: r.name })] : []));
    if (r.fork_of) {  // a fork names the run and step it started from
      const src = await api(`/api/runs/${encodeURIComponent(r.fork_of)}`).catch(() => null);
      lineage.appendChild(el("span", { id: "fork-of" }, chain.length ? " · " : "", "forked from ",
        el("a", { href: "/runs/" + encodeURIComponent(r.fork_of), text: src ? src.name : r.fork_of }),
        ` at step ${fmtNum(r.fork_step)} (its points up to there are copied into this run)`));
    }
    lineage.hidden = chain.length === 0 && !r.fork_of;
  }

  async function renderStages(r) {
    const kids = await api(`/api/runs/${enc}/children`);
    parts.stages.replaceChildren();
    if (kids.length) stageTable(parts.stages, r, kids);
    headings.stages.textContent = (r.tags || []).includes("pipeline") ? `Stages (${kids.length})` : `Child runs (${kids.length})`;
    show("stages", kids.length > 0);
  }

  function renderSummary(single) {
    parts.summary.replaceChildren();
    if (single.length) {
      // a figure logged at step 0 is a stage's figure, not a point "at step 0"; later ones say their step
      parts.summary.appendChild(summaryTable("summary-table", single.map((s) => ({ key: s.key,
        values: [s.last_value, s.last_step ? `at step ${fmtNum(s.last_step)}` : ""] })), ["value", "logged"], false));
    }
    show("summary", single.length > 0);
  }

  async function renderHeatmaps(hists) {
    for (const h of hists) {
      if (heatmapsDone.has(h.key) && state.run.status !== "running") continue;
      heatmapsDone.add(h.key);
      const data = await api(`/api/runs/${enc}/histograms`, { key: h.key, max_steps: 400 });
      let card = document.getElementById("hm-" + h.key);
      if (!card) {
        card = el("div", { class: "card", id: "hm-" + h.key }, el("h3", { text: h.key }), el("div", { class: "plot" }));
        parts.heatmaps.appendChild(card);
      }
      const holder = card.querySelector(".plot");
      holder.replaceChildren();
      if (data.edges) {  // binned samples: the latest step's histogram
        const last = data.values[data.values.length - 1];
        const mids = data.edges.slice(0, -1).map((e, i) => (e + data.edges[i + 1]) / 2);
        lineChart(holder, { id: "hist:" + h.key, xLabel: "value", yLabel: "count", lines: [{ label: `step ${data.steps[data.steps.length - 1]}`, xs: mids, ys: last }] });
      } else {
        heatmap(holder, h.key, data.steps, data.values);
      }
    }
    show("heatmaps", hists.length > 0);
  }

  // Plain events come in pages of EVENT_PAGE, oldest first; the table says how many of the run's
  // events it holds and fetches the next page on demand. Funnels and calibrations are read on
  // their own, so a flood of other events never pushes them out.
  async function loadEvents(reset) {
    if (reset) { state.plain = []; state.eventTotal = 0; }
    const page = await apiPage(`/api/runs/${enc}/events`,
      { exclude: ["funnel", "calibration", "ablation_report"], limit: EVENT_PAGE, offset: state.plain.length });
    state.plain.push(...page.items);
    state.eventTotal = page.total ?? state.plain.length;
  }

  async function loadAll(kind) {
    const out = [];
    for (;;) {
      const page = await apiPage(`/api/runs/${enc}/events`, { kind, limit: 10000, offset: out.length });
      out.push(...page.items);
      if (!page.items.length || out.length >= (page.total ?? out.length)) return out;
    }
  }

  function renderEvents() {
    const plain = state.plain;
    const head = el("tr", {}, ...["time (UTC)", "step", "kind", "message", "data"].map((h) => el("th", { text: h })));
    parts.events.replaceChildren(head, ...plain.slice().reverse().map((e) =>
      el("tr", { class: BAD_EVENTS.has(e.kind) ? "event-bad" : "" },
        el("td", { text: fmtTime(e.wall) }), el("td", { text: e.step ?? "" }), el("td", { text: e.kind }),
        el("td", { class: "event-message", text: e.message }),
        el("td", { class: "event-data", text: Object.keys(e.data).length ? JSON.stringify(e.data) : "" }))));
    const missing = state.eventTotal - plain.length;
    eventsNote.replaceChildren(el("span", { id: "events-count", text: missing > 0
      ? `showing the first ${plain.length.toLocaleString()} of ${state.eventTotal.toLocaleString()} events (newest first); ${missing.toLocaleString()} not loaded`
      : `all ${plain.length.toLocaleString()} events` }));
    if (missing > 0) {
      const more = el("button", { id: "events-more", type: "button", text: `Load ${Math.min(missing, EVENT_PAGE).toLocaleString()} more` });
      more.addEventListener("click", async () => {
        more.disabled = true;
        await loadEvents(false);
        state.events = state.plain.concat(state.funnelEvents, state.calibrationEvents);
        renderEvents();
        charts.redrawAll();
      });
      eventsNote.appendChild(more);
    }
    show("events", plain.length > 0);
    eventsNote.hidden = plain.length === 0;
    const latest = (kind) => {
      const byName = new Map();
      state.events.filter((e) => e.kind === kind).forEach((e) => byName.set(e.data.name || kind, e));
      return byName;
    };
    const fun = latest("funnel");
    funnels(parts.funnels, fun);
    show("funnels", fun.size > 0);
    parts.calibration.replaceChildren();
    const cal = latest("calibration");
    for (const [name, e] of cal) reliabilityDiagram(parts.calibration, name, e);
    show("calibration", cal.size > 0);
  }

  function renderArtifacts(list) {
    const head = el("tr", {}, ...["name", "kind", "path", "sha256", "size", "created"].map((h) => el("th", { text: h })));
    parts.artifacts.replaceChildren(head, ...list.map((a) => el("tr", {},
      el("td", { text: a.name }), el("td", { text: a.kind }), el("td", { text: a.path }),
      el("td", { text: (a.sha256 || "").slice(0, 16) }), el("td", { text: a.size ?? "" }), el("td", { text: fmtTime(a.created) }))));
    show("artifacts", list.length > 0);
  }

  async function refresh(first) {
    state.run = await api(`/api/runs/${enc}`);
    const r = state.run;
    title.replaceChildren(r.name, " ", statusBadge(r.status));
    document.title = `${r.name} · moelab tracker`;
    meta.replaceChildren(...[
      el("span", { text: `id ${r.id}` }), el("span", { text: `project ${r.project}` }),
      el("span", { text: `created ${fmtTime(r.created)}` }), el("span", { id: "run-duration", text: `duration ${fmtDuration(runDuration(r))}` }),
      r.host ? el("span", { text: `host ${r.host}` }) : null,
      r.git_commit ? el("span", { text: `commit ${r.git_commit.slice(0, 12)}` }) : null,
      ...r.tags.map((t) => el("a", { class: "tag", href: "/?tag=" + encodeURIComponent(t), text: t })),
    ].filter(Boolean));
    if (first) { await renderLineage(r); parts.config.textContent = JSON.stringify(r.config, null, 2); show("config", Object.keys(r.config).length > 0); }
    const [keys, , funnelEvents, calibrationEvents, artifacts, reports, exported] = await Promise.all([
      api(`/api/runs/${enc}/keys`), first ? loadEvents(true) : state.plain.length >= state.eventTotal ? loadEvents(false) : null, loadAll("funnel"), loadAll("calibration"),
      api(`/api/runs/${enc}/artifacts`), loadAll("ablation_report"), loadAll("artifact")]);
    ablationReport(parts.ablation, reports[reports.length - 1]);
    show("ablation", reports.length > 0);
    exportTable(parts.exports, exported, r, state.chain || []);
    show("exports", exported.length > 0);
    Object.assign(state, { funnelEvents, calibrationEvents });
    state.events = state.plain.concat(funnelEvents, calibrationEvents);
    await renderStages(r);
    renderSummary(keys.scalars.filter((s) => isSummary(s) && !frozenOf(s.key)));
    // the frozen router's figures are drawn beside the step MaxVio even when logged once
    const series = orderKeys(keys.scalars.filter((s) => !isSummary(s) || frozenOf(s.key)).map((s) => s.key));
    keyList.replaceChildren(...keys.scalars.map((s) => el("option", { value: s.key })));
    xSel.querySelector("option[value='tokens']").disabled = !keys.scalars.some((s) => s.key === "tokens" && !isSummary(s));
    await charts.load(series);
    if (first) state.panels.forEach((p) => charts.addPanel(p, () => removePanel(p)));
    for (const name of Object.keys(sections)) show(name, sections[name].children.length > 0);
    controls.hidden = !Object.values(sections).some((sec) => sec.children.length > 0);
    await renderHeatmaps(keys.histograms);
    renderEvents();
    renderArtifacts(artifacts);
    document.body.dataset.ready = "1";
  }

  // the view's settings live in the URL (?x=wall&smoothing=0.9), so a shared link shows the same view
  function saveView() {
    const q = new URLSearchParams(location.search);
    state.xAxis === "step" ? q.delete("x") : q.set("x", state.xAxis);
    state.smoothing ? q.set("smoothing", String(state.smoothing)) : q.delete("smoothing");
    q.delete("panel");
    state.panels.forEach((p) => q.append("panel", p.join(",")));
    history.replaceState(null, "", location.pathname + (q.toString() ? "?" + q : ""));
  }
  const given = new URLSearchParams(location.search);
  if (["wall", "tokens"].includes(given.get("x"))) { state.xAxis = given.get("x"); xSel.value = state.xAxis; }
  state.panels = given.getAll("panel").map((p) => p.split(",").map((k) => k.trim()).filter(Boolean)).filter((p) => p.length);
  function removePanel(keys) {
    state.panels = state.panels.filter((p) => p.join(",") !== keys.join(","));
    show("panels", sections.panels.children.length > 0);
    saveView();
  }
  panelBtn.addEventListener("click", () => {
    const keys = panelIn.value.split(",").map((k) => k.trim()).filter((k) => charts.full[k]);
    if (!keys.length) { panelIn.setCustomValidity("name keys of this run, separated by commas"); panelIn.reportValidity(); return; }
    panelIn.setCustomValidity("");
    state.panels.push(keys);
    charts.addPanel(keys, () => removePanel(keys));
    show("panels", true);
    panelIn.value = "";
    saveView();
  });
  const s0 = +given.get("smoothing");
  if (s0 > 0 && s0 < 1) { state.smoothing = s0; smoothIn.value = String(s0); smoothOut.textContent = `smoothing ${s0}`; }

  xSel.addEventListener("change", () => {
    state.xAxis = xSel.value; charts.zoom.range = null; charts.zoomed = {}; charts.redrawAll(); saveView();
  });
  smoothIn.addEventListener("input", () => {
    state.smoothing = +smoothIn.value;
    smoothOut.textContent = `smoothing ${state.smoothing}`;
    charts.redrawAll();
    saveView();
  });
  liveBox.addEventListener("change", () => { state.live = liveBox.checked; });
  resetBtn.addEventListener("click", () => charts.zoom.reset());

  await refresh(true);
  const every = Math.max(500, +given.get("refresh") || 5000);  // ?refresh=<ms> refreshes faster
  setInterval(() => {
    if (state.live && state.run && state.run.status === "running") {
      refresh(false).then(() => { document.body.dataset.refreshes = String((+document.body.dataset.refreshes || 0) + 1); })
        .catch(console.error);
    }
  }, every);
})().catch(failed);

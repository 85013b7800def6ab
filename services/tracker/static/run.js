// Run page: live charts (step or wall-time axis, smoothing), router health, expert-load heatmaps,
// events on the timeline, data funnel, scorer calibration, config and artifacts.
"use strict";

const TRAINING = ["loss", "train/loss", "eval/loss", "eval_loss", "lr", "tokens_per_s", "mfu"];
const BAD_EVENTS = new Set(["router_health", "warning", "error", "bad_step"]);

function groupOf(key) {
  if (key.startsWith("router/")) return "router";
  if (TRAINING.includes(key) || key.startsWith("train/") || key.startsWith("eval/")) return "training";
  return "other";
}

function orderKeys(keys) {
  const rank = (k) => { const i = TRAINING.indexOf(k); return i < 0 ? 100 : i; };
  return keys.slice().sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
}

(async function main() {
  const root = document.getElementById("main");
  const runId = decodeURIComponent(location.pathname.split("/").pop());
  const state = { run: null, events: [], xAxis: "step", smoothing: 0, live: true };

  const title = el("h1", { id: "run-name" });
  const meta = el("div", { class: "meta", id: "run-meta" });
  const xSel = el("select", { id: "x-axis" }, el("option", { value: "step", text: "x: step" }),
    el("option", { value: "wall", text: "x: wall time (s since start)" }));
  const smoothIn = el("input", { id: "smoothing", type: "range", min: "0", max: "0.99", step: "0.01", value: "0" });
  const smoothOut = el("span", { class: "note", text: "smoothing 0" });
  const liveBox = el("input", { id: "live", type: "checkbox" });
  liveBox.checked = true;
  const sections = {
    training: el("div", { class: "grid", id: "charts-training" }),
    router: el("div", { class: "grid", id: "charts-router" }),
    heatmaps: el("div", { class: "grid", id: "heatmaps" }),
    other: el("div", { class: "grid", id: "charts-other" }),
  };
  const funnels = el("div", { class: "grid", id: "funnels" });
  const calib = el("div", { class: "grid", id: "calibration" });
  const eventsTable = el("table", { id: "events" });
  const configPre = el("pre", { id: "config" });
  const artifactsTable = el("table", { id: "artifacts" });
  const headings = {};
  const h2 = (id, text) => (headings[id] = el("h2", { id: "h-" + id, text }));

  root.replaceChildren(title, meta,
    el("div", { class: "controls" }, xSel, el("label", {}, "smoothing ", smoothIn), smoothOut,
      el("label", {}, liveBox, " live update")),
    h2("training", "Training"), sections.training,
    h2("router", "Router health"), sections.router,
    h2("heatmaps", "Expert load per layer"), sections.heatmaps,
    h2("other", "Other metrics"), sections.other,
    h2("funnels", "Data pipeline funnel"), funnels,
    h2("calibration", "Scorer calibration"), calib,
    h2("events", "Events"), eventsTable,
    h2("config", "Config"), configPre,
    h2("artifacts", "Artifacts"), artifactsTable);

  const seriesCache = {};
  const chartKeys = new Set();

  function xOf(steps, walls) {
    return state.xAxis === "step" ? steps : walls.map((w) => w - state.run.created);
  }
  function eventMarks() {
    return state.events.map((e) => ({
      x: state.xAxis === "step" ? e.step : e.wall - state.run.created,
      bad: BAD_EVENTS.has(e.kind),
    }));
  }

  function draw(key) {
    const s = seriesCache[key];
    const card = document.getElementById("card-" + key);
    const holder = card.querySelector(".plot");
    holder.replaceChildren();
    if (T.charts[key]) { T.charts[key].destroy(); delete T.charts[key]; }
    const nf = s.nonfinite.nan + s.nonfinite.inf + s.nonfinite["-inf"];
    card.querySelector(".note").textContent =
      `${s.total.toLocaleString()} points${s.returned < s.total ? ` (${s.returned} drawn: min/max per bucket)` : ""}` +
      (nf ? ` · ${nf} NaN/Inf (gaps; first at step ${s.nonfinite.first_step})` : "");
    lineChart(holder, key, state.xAxis === "step" ? "step" : "seconds", [
      { label: key, xs: xOf(s.steps, s.walls), ys: smooth(s.values, state.smoothing) },
    ], { events: eventMarks });
  }

  async function loadSeries(key) {
    seriesCache[key] = await api(`/api/runs/${encodeURIComponent(runId)}/series`, { key, points: 2000 });
    if (!layerOf(key)) draw(key);
  }

  // Per-layer keys (`router/maxvio/layer3`) share one chart per prefix, one line per layer.
  const groups = new Map();
  function layerOf(key) {
    const m = key.match(/^(.+)\/layer(\d+)$/);
    return m ? { prefix: m[1], layer: +m[2] } : null;
  }
  function drawGroup(prefix) {
    const id = "layers:" + prefix;
    const holder = document.getElementById("card-" + id).querySelector(".plot");
    holder.replaceChildren();
    if (T.charts[id]) { T.charts[id].destroy(); delete T.charts[id]; }
    const keys = groups.get(prefix).filter((k) => seriesCache[k]);
    lineChart(holder, id, state.xAxis === "step" ? "step" : "seconds", keys.map((k) => {
      const s = seriesCache[k];
      return { label: "layer " + layerOf(k).layer, xs: xOf(s.steps, s.walls), ys: smooth(s.values, state.smoothing) };
    }), { events: eventMarks, legend: true, chartId: id });
  }
  function redrawAll() {
    Object.keys(seriesCache).filter((k) => !layerOf(k)).forEach(draw);
    [...groups.keys()].forEach(drawGroup);
  }

  function ensureCard(section, key) {
    if (chartKeys.has(key)) return false;
    chartKeys.add(key);
    sections[section].appendChild(el("div", { class: "card", id: "card-" + key, "data-key": key },
      el("h3", { text: key }), el("div", { class: "plot" }), el("div", { class: "note" })));
    return true;
  }

  async function refresh() {
    state.run = await api(`/api/runs/${encodeURIComponent(runId)}`);
    const r = state.run;
    title.replaceChildren(r.name, " ", statusBadge(r.status));
    document.title = `${r.name} · moelab tracker`;
    const end = r.finished || (r.status === "running" ? Date.now() / 1000 : r.updated);
    meta.replaceChildren(...[
      el("span", { text: `id ${r.id}` }), el("span", { text: `project ${r.project}` }),
      el("span", { text: `created ${fmtTime(r.created)}` }), el("span", { text: `duration ${fmtDuration(end - r.created)}` }),
      r.host ? el("span", { text: `host ${r.host}` }) : null,
      r.git_commit ? el("span", { text: `commit ${r.git_commit.slice(0, 12)}` }) : null,
      r.parent ? el("span", {}, "pipeline ", el("a", { href: "/?q=" + encodeURIComponent(r.parent), text: r.parent })) : null,
      el("span", {}, ...r.tags.map((t) => el("span", { class: "tag", text: t }))),
    ].filter(Boolean));
    configPre.textContent = JSON.stringify(r.config, null, 2);

    state.events = await api(`/api/runs/${encodeURIComponent(runId)}/events`, { limit: 5000 });
    renderEvents();

    const keys = await api(`/api/runs/${encodeURIComponent(runId)}/keys`);
    const scalarKeys = orderKeys(keys.scalars.map((s) => s.key));
    const loads = [];
    for (const key of scalarKeys) {
      const lk = layerOf(key);
      if (lk) {
        if (!groups.has(lk.prefix)) groups.set(lk.prefix, []);
        const g = groups.get(lk.prefix);
        if (!g.includes(key)) { g.push(key); g.sort((a, b) => layerOf(a).layer - layerOf(b).layer); }
        if (ensureCard(groupOf(key), "layers:" + lk.prefix)) {
          document.getElementById("card-layers:" + lk.prefix).querySelector("h3").textContent = `${lk.prefix} (per layer)`;
        }
      } else {
        ensureCard(groupOf(key), key);
      }
      const known = seriesCache[key];
      const info = keys.scalars.find((s) => s.key === key);
      if (!known || known.total !== info.points) loads.push(loadSeries(key));
    }
    await Promise.all(loads);
    [...groups.keys()].forEach(drawGroup);
    for (const h of keys.histograms) await loadHeatmap(h);
    for (const [id, sec] of Object.entries(sections)) {
      headings[id].hidden = sec.children.length === 0;
      sec.hidden = sec.children.length === 0;
    }
    renderArtifacts(await api(`/api/runs/${encodeURIComponent(runId)}/artifacts`));
    document.body.dataset.ready = "1";
  }

  const heatmapSteps = {};
  async function loadHeatmap(h) {
    if (heatmapSteps[h.key] === h.steps) return;
    heatmapSteps[h.key] = h.steps;
    const data = await api(`/api/runs/${encodeURIComponent(runId)}/histograms`, { key: h.key, max_steps: 400 });
    let card = document.getElementById("heat-" + h.key);
    if (!card) {
      card = el("div", { class: "card", id: "heat-" + h.key, "data-key": h.key }, el("h3", { text: h.key }), el("div", { class: "plot" }));
      sections.heatmaps.appendChild(card);
    }
    const holder = card.querySelector(".plot");
    holder.replaceChildren();
    if (data.edges) {
      const last = data.values[data.values.length - 1];
      const mids = data.edges.slice(0, -1).map((e, i) => (e + data.edges[i + 1]) / 2);
      lineChart(holder, h.key, "value", [{ label: `step ${data.steps[data.steps.length - 1]}`, xs: mids, ys: last }], { chartId: "hist:" + h.key });
    } else {
      heatmap(holder, h.key, data.steps, data.values);
    }
  }

  function renderEvents() {
    const plain = state.events.filter((e) => e.kind !== "funnel" && e.kind !== "calibration");
    const head = el("tr", {}, ...["time", "step", "kind", "message", "data"].map((h) => el("th", { text: h })));
    eventsTable.replaceChildren(head, ...plain.slice(-500).reverse().map((e) =>
      el("tr", { class: BAD_EVENTS.has(e.kind) ? "event-bad" : "" },
        el("td", { text: fmtTime(e.wall) }), el("td", { text: e.step ?? "" }), el("td", { text: e.kind }),
        el("td", { text: e.message }), el("td", { text: Object.keys(e.data).length ? JSON.stringify(e.data) : "" }))));
    headings.events.hidden = eventsTable.hidden = plain.length === 0;

    const latest = (kind) => {
      const byName = new Map();
      state.events.filter((e) => e.kind === kind).forEach((e) => byName.set(e.data.name || kind, e));
      return byName;
    };
    funnels.replaceChildren();
    for (const [name, e] of latest("funnel")) {
      const card = el("div", { class: "card" }, el("h3", { text: `${name} per stage` }));
      funnel(card, name, e.data.stages || []);
      funnels.appendChild(card);
    }
    calib.replaceChildren();
    for (const [name, e] of latest("calibration")) {
      const card = el("div", { class: "card", "data-name": name }, el("h3", { text: `${name} (ECE ${fmtNum(e.data.ece)}, n=${e.data.n})` }));
      calib.appendChild(card);
      calibrationChart(card, name, e.data.bins || [], "calibration:" + name);
    }
    headings.funnels.hidden = funnels.hidden = funnels.children.length === 0;
    headings.calibration.hidden = calib.hidden = calib.children.length === 0;
  }

  function renderArtifacts(list) {
    const head = el("tr", {}, ...["name", "kind", "path", "sha256", "size", "created"].map((h) => el("th", { text: h })));
    artifactsTable.replaceChildren(head, ...list.map((a) => el("tr", {},
      el("td", { text: a.name }), el("td", { text: a.kind }), el("td", { text: a.path }),
      el("td", { text: (a.sha256 || "").slice(0, 16) }), el("td", { text: a.size ?? "" }), el("td", { text: fmtTime(a.created) }))));
    headings.artifacts.hidden = artifactsTable.hidden = list.length === 0;
  }

  xSel.addEventListener("change", () => { state.xAxis = xSel.value; redrawAll(); });
  smoothIn.addEventListener("input", () => {
    state.smoothing = +smoothIn.value;
    smoothOut.textContent = `smoothing ${state.smoothing}`;
    redrawAll();
  });
  liveBox.addEventListener("change", () => { state.live = liveBox.checked; });

  await refresh();
  setInterval(() => { if (state.live && state.run && state.run.status === "running") refresh().catch(console.error); }, 5000);
})().catch((e) => { document.getElementById("main").replaceChildren(el("p", { class: "warn", text: String(e) })); });

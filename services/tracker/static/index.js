// Runs table: filter by project, status, tags (all of them or any of them), text and config values;
// chosen metric and config columns; sort by any column; pages of PAGE runs; pipeline children nested
// under their parent; pick runs to compare. Every setting lives in the URL. The table polls every
// POLL_MS for the runs changed since its last answer only (configs never travel: the server sends
// the columns shown): the page's rows, and the child rows of every parent opened on it.
"use strict";

const PAGE = 100;
const POLL_MS = 10000;  // ?poll=<ms> (at least 500) polls faster

(async function main() {
  const root = document.getElementById("main");
  const params = new URLSearchParams(location.search);
  const list = (v) => (v || "").split(",").map((x) => x.trim()).filter(Boolean);
  const view = {
    project: params.get("project") || "", status: params.get("status") || "", tags: list(params.get("tag")),
    tagMode: params.get("tagmode") === "any" ? "any" : "all",
    q: params.get("q") || "", config: params.get("config") || "", metrics: list(params.get("metrics")),
    columns: list(params.get("columns")), sort: params.get("sort") || "created", desc: params.get("desc") !== "0",
    offset: Math.max(0, +params.get("offset") || 0), nest: params.get("nest") !== "0",
  };
  const projectSel = el("select", { id: "f-project" }, el("option", { value: "", text: "all projects" }));
  const statusSel = el("select", { id: "f-status" },
    ...["", "running", "finished", "failed", "crashed"].map((s) => el("option", { value: s, text: s || "any status" })));
  const tagIn = el("input", { id: "f-tag", placeholder: "tags: moe, fp8", size: 14, value: view.tags.join(", ") });
  const tagModeSel = el("select", { id: "f-tag-mode", title: "runs with all of these tags, or with any of them" },
    el("option", { value: "all", text: "all tags" }), el("option", { value: "any", text: "any tag" }));
  const qIn = el("input", { id: "f-q", placeholder: "search name or id", size: 20, value: view.q });
  const configIn = el("input", { id: "f-config", placeholder: "config filter: optim.lr=0.001", size: 26, value: view.config });
  const metricsIn = el("input", { id: "c-metrics", placeholder: "metric columns: loss, eval/loss", size: 26, value: view.metrics.join(", ") });
  const columnsIn = el("input", { id: "c-columns", placeholder: "config columns: optim.lr", size: 24, value: view.columns.join(", ") });
  const nestBox = el("input", { id: "f-nest", type: "checkbox" });
  nestBox.checked = view.nest;
  const compareBtn = el("button", { id: "compare", type: "button", text: "Compare selected" });
  const count = el("span", { class: "note", id: "count" });
  const prev = el("button", { id: "page-prev", type: "button", text: "‹ newer" });
  const next = el("button", { id: "page-next", type: "button", text: "older ›" });
  const filterNote = el("span", { class: "warn", id: "filter-error" });
  const table = el("table", { id: "runs" });
  root.replaceChildren(el("h1", { text: "Runs" }),
    el("div", { class: "filters" }, projectSel, statusSel, tagIn, tagModeSel, qIn, configIn, el("label", {}, nestBox, " nest child runs"), filterNote),
    el("div", { class: "filters" }, metricsIn, columnsIn, compareBtn),
    el("div", { class: "filters" }, prev, count, next), el("div", { class: "table-scroll" }, table));
  statusSel.value = view.status;
  tagModeSel.value = view.tagMode;

  for (const p of await api("/api/projects")) projectSel.appendChild(el("option", { value: p.name, text: `${p.name} (${p.runs})` }));
  projectSel.value = view.project;

  const selected = new Set();
  compareBtn.addEventListener("click", () => {
    if (selected.size < 2) { alert("select at least two runs"); return; }
    location.href = "/compare?" + [...selected].map((id) => "runs=" + encodeURIComponent(id)).join("&");
  });

  let since = null;   // the server's `now` of the last full answer: polls ask for what changed after it
  let total = 0;
  const rowsById = new Map();

  function query(extra) {
    return { project: view.project, status: view.status, tag: view.tags, tag_mode: view.tags.length > 1 ? view.tagMode : undefined, q: view.q,
      config: view.config || undefined, metric: view.metrics, column: view.columns, sort: view.sort,
      desc: view.desc ? "true" : "false", brief: "true", limit: PAGE, offset: view.offset, top: view.nest && !view.q ? "true" : undefined, ...extra };
  }

  function header() {
    const th = (key, label) => {
      const arrow = view.sort === key ? (view.desc ? " ▼" : " ▲") : "";
      const cell = el("th", { class: "sortable", "data-sort": key, text: label + arrow, title: `sort by ${label}` });
      cell.addEventListener("click", () => {
        view.desc = view.sort === key ? !view.desc : key === "created";
        view.sort = key; view.offset = 0; refresh();
      });
      return cell;
    };
    return el("tr", {}, el("th", {}), th("name", "name"), el("th", { text: "project" }), th("status", "status"),
      el("th", { text: "tags" }), th("created", "created"), el("th", { text: "duration" }),
      ...view.metrics.map((m) => th("metric:" + m, m)), ...view.columns.map((c) => th("config:" + c, c)),
      el("th", { text: "host" }), el("th", { text: "commit" }), el("th", { text: "parent" }));
  }

  function row(r, depth) {
    const box = el("input", { type: "checkbox", "data-run": r.id });
    box.checked = selected.has(r.id);
    box.addEventListener("change", () => { box.checked ? selected.add(r.id) : selected.delete(r.id); });
    const nameCell = el("td", { style: depth ? `padding-left:${8 + 18 * depth}px` : undefined });
    if (r.children && view.nest) {
      const toggle = el("button", { type: "button", class: "expand", "data-run": r.id, "data-count": r.children, text: `▸ ${r.children}`,
        title: `show its ${r.children} child run(s)` });
      toggle.addEventListener("click", () => expand(r, toggle, depth));
      nameCell.appendChild(toggle);
    }
    nameCell.appendChild(el("a", { href: "/runs/" + encodeURIComponent(r.id), class: "run-name", text: r.name }));
    const tr = el("tr", { "data-run": r.id, class: depth ? "child-row" : "" },
      el("td", {}, box), nameCell, el("td", { text: r.project }), el("td", {}, statusBadge(r.status)),
      el("td", {}, ...r.tags.map((t) => el("span", { class: "tag", text: t }))),
      el("td", { text: fmtTime(r.created) }), el("td", { text: fmtDuration(runDuration(r)) }),
      ...view.metrics.map((m) => {
        const v = r.metrics[m];
        return el("td", { class: "num", "data-metric": m, title: v ? `at step ${v.step}` : "not logged", text: v ? fmtNum(v.value) : "—" });
      }),
      ...view.columns.map((c) => el("td", { class: "num", "data-column": c,
        text: r.columns[c] === undefined || r.columns[c] === null ? "—" : typeof r.columns[c] === "number" ? fmtNum(r.columns[c]) : JSON.stringify(r.columns[c]) })),
      el("td", { text: r.host || "" }), el("td", { text: (r.git_commit || "").slice(0, 10) }),
      el("td", {}, r.parent ? el("a", { href: "/runs/" + encodeURIComponent(r.parent), class: "parent-link",
        title: r.parent, text: "↑ " + (r.parent_name || r.parent) }) : null));
    tr._depth = depth;
    rowsById.set(r.id, tr);
    return tr;
  }

  // a parent's children, fetched when opened and inserted under it (indented)
  async function expand(r, toggle, depth) {
    const open = toggle.dataset.open === "1";
    removeChildren(r.id, depth);
    toggle.dataset.open = open ? "0" : "1";
    toggle.textContent = `${open ? "▸" : "▾"} ${toggle.dataset.count}`;
    if (!open) await listChildren(r.id, depth);
  }

  function removeChildren(id, depth) {
    let after = rowsById.get(id).nextSibling;
    while (after && after._depth > depth) { const n = after.nextSibling; rowsById.delete(after.dataset.run); after.remove(); after = n; }
  }

  async function listChildren(id, depth) {
    const res = await api("/api/runs", childQuery(id));
    let at = rowsById.get(id);
    for (const kid of res.runs) { const tr = row(kid, depth + 1); at.after(tr); at = tr; }
    return res.runs.length;
  }

  // a parent's children are listed whatever the filters (they hold the parent's stages)
  function childQuery(parentId, extra) {
    return query({ parent: parentId, top: undefined, offset: 0, limit: 1000, sort: "created", desc: "false",
      config: undefined, status: undefined, tag: undefined, tag_mode: undefined, ...extra });
  }

  // the parents opened on the page
  function openParents() {
    return [...table.querySelectorAll("button.expand[data-open='1']")].map((b) => ({ id: b.dataset.run }))
      .filter((p) => rowsById.has(p.id));
  }

  function saveView() {
    const q = new URLSearchParams();
    for (const k of ["project", "status", "q", "config"]) if (view[k]) q.set(k, view[k]);
    if (view.tags.length) q.set("tag", view.tags.join(","));
    if (view.tagMode === "any") q.set("tagmode", "any");
    if (view.metrics.length) q.set("metrics", view.metrics.join(","));
    if (view.columns.length) q.set("columns", view.columns.join(","));
    if (view.sort !== "created") q.set("sort", view.sort);
    if (!view.desc) q.set("desc", "0");
    if (view.offset) q.set("offset", String(view.offset));
    if (!view.nest) q.set("nest", "0");
    history.replaceState(null, "", q.toString() ? "?" + q : "/");
  }

  async function refresh() {
    saveView();
    let res;
    try {
      res = await api("/api/runs", query());
      filterNote.textContent = "";
    } catch (e) {
      filterNote.textContent = String(e.message || e).replace(/^\d+ /, "");
      return;
    }
    since = res.now;
    total = res.total;
    rowsById.clear();
    table.replaceChildren(header(), ...res.runs.map((r) => row(r, 0)));
    const first = res.runs.length ? view.offset + 1 : 0;
    count.textContent = `runs ${first.toLocaleString()}–${(view.offset + res.runs.length).toLocaleString()} of ${res.total.toLocaleString()}` +
      (view.nest && !view.q ? " (top-level; child runs under their parent)" : "");
    prev.disabled = view.offset === 0;
    next.disabled = view.offset + res.runs.length >= res.total;
  }

  // A row redrawn in place with a run's new figures; an opened parent stays open with its children.
  function redraw(r) {
    const old = rowsById.get(r.id);
    const wasOpen = old.querySelector("button.expand[data-open='1']");
    const tr = row(r, old._depth);
    old.replaceWith(tr);
    const toggle = tr.querySelector("button.expand");
    if (wasOpen && toggle) { toggle.dataset.open = "1"; toggle.textContent = `▾ ${toggle.dataset.count}`; }
  }

  // A poll asks only for the runs changed since the last answer: the page's rows, and the children
  // of every parent opened on it (they are not in the top-level list). Known rows are redrawn in
  // place; a new child reloads its parent's children; a new top-level run, or a change in how many
  // match, reloads the page.
  async function poll() {
    if (since === null) return;
    const after = since;
    const res = await api("/api/runs", query({ changed_after: after, offset: 0, limit: 1000 }));
    const opened = openParents();
    const kids = await Promise.all(opened.map((p) => api("/api/runs", childQuery(p.id, { changed_after: after }))));
    since = Math.min(res.now, ...kids.map((k) => k.now));
    const known = res.runs.filter((r) => rowsById.has(r.id));
    const fresh = res.runs.length - known.length;
    known.forEach(redraw);
    for (const [i, p] of opened.entries()) {
      const news = kids[i].runs.filter((r) => !rowsById.has(r.id));
      kids[i].runs.filter((r) => rowsById.has(r.id)).forEach(redraw);
      if (news.length && rowsById.has(p.id)) {  // a new child: list the parent's children again, still open
        const depth = rowsById.get(p.id)._depth;
        removeChildren(p.id, depth);
        const n = await listChildren(p.id, depth);
        const toggle = rowsById.get(p.id).querySelector("button.expand");
        if (toggle) { toggle.dataset.count = String(n); toggle.textContent = `▾ ${n}`; }
      }
    }
    document.body.dataset.polls = String((+document.body.dataset.polls || 0) + 1);
    if (fresh && view.offset === 0) await refresh();
    else if (fresh) count.textContent += ` · ${fresh} new or changed run(s) on other pages`;
  }

  const onChange = () => {
    Object.assign(view, { project: projectSel.value, status: statusSel.value, tags: list(tagIn.value), tagMode: tagModeSel.value, q: qIn.value.trim(),
      config: configIn.value.trim(), metrics: list(metricsIn.value), columns: list(columnsIn.value), nest: nestBox.checked, offset: 0 });
    refresh();
  };
  for (const input of [projectSel, statusSel, tagModeSel, nestBox]) input.addEventListener("change", onChange);
  for (const input of [tagIn, qIn, configIn, metricsIn, columnsIn]) {
    input.addEventListener("input", () => { clearTimeout(input._t); input._t = setTimeout(onChange, 300); });
  }
  prev.addEventListener("click", () => { view.offset = Math.max(0, view.offset - PAGE); refresh(); });
  next.addEventListener("click", () => { view.offset += PAGE; refresh(); });
  await refresh();
  document.body.dataset.ready = "1";
  setInterval(() => poll().catch(console.error), Math.max(500, +params.get("poll") || POLL_MS));
})().catch(failed);

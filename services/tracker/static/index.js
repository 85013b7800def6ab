// Run list: filter by project, status, tag and text; pick runs to compare.
"use strict";

(async function main() {
  const root = document.getElementById("main");
  const params = new URLSearchParams(location.search);
  const projectSel = el("select", { id: "f-project" }, el("option", { value: "", text: "all projects" }));
  const statusSel = el("select", { id: "f-status" },
    ...["", "running", "finished", "failed", "crashed"].map((s) => el("option", { value: s, text: s || "any status" })));
  const tagIn = el("input", { id: "f-tag", placeholder: "tag", size: 12 });
  const qIn = el("input", { id: "f-q", placeholder: "search name or id", size: 22 });
  const compareBtn = el("button", { id: "compare", type: "button", text: "Compare selected" });
  const count = el("span", { class: "note", id: "count" });
  const table = el("table", { id: "runs" });
  root.replaceChildren(el("h1", { text: "Runs" }),
    el("div", { class: "filters" }, projectSel, statusSel, tagIn, qIn, compareBtn, count), table);
  statusSel.value = params.get("status") || "";
  tagIn.value = params.get("tag") || "";
  qIn.value = params.get("q") || "";

  for (const p of await api("/api/projects")) projectSel.appendChild(el("option", { value: p.name, text: `${p.name} (${p.runs})` }));
  projectSel.value = params.get("project") || "";

  const selected = new Set();
  compareBtn.addEventListener("click", () => {
    if (selected.size < 2) { alert("select at least two runs"); return; }
    location.href = "/compare?" + [...selected].map((id) => "runs=" + encodeURIComponent(id)).join("&");
  });

  async function refresh() {
    const query = { project: projectSel.value, status: statusSel.value, tag: tagIn.value.trim() || undefined, q: qIn.value.trim(), limit: 500 };
    const res = await api("/api/runs", query);
    count.textContent = `${res.runs.length} of ${res.total} runs`;
    const head = el("tr", {}, ...["", "name", "project", "status", "tags", "created", "duration", "host", "commit", "parent"].map((h) => el("th", { text: h })));
    const rows = res.runs.map((r) => {
      const box = el("input", { type: "checkbox", "data-run": r.id });
      box.checked = selected.has(r.id);
      box.addEventListener("change", () => { box.checked ? selected.add(r.id) : selected.delete(r.id); });
      const end = r.finished || (r.status === "running" ? Date.now() / 1000 : r.updated);
      return el("tr", { "data-run": r.id },
        el("td", {}, box),
        el("td", {}, el("a", { href: "/runs/" + encodeURIComponent(r.id), class: "run-name", text: r.name })),
        el("td", { text: r.project }),
        el("td", {}, statusBadge(r.status)),
        el("td", {}, ...r.tags.map((t) => el("span", { class: "tag", text: t }))),
        el("td", { text: fmtTime(r.created) }),
        el("td", { text: fmtDuration(end - r.created) }),
        el("td", { text: r.host || "" }),
        el("td", { text: (r.git_commit || "").slice(0, 10) }),
        el("td", {}, r.parent ? el("a", { href: "/runs/" + encodeURIComponent(r.parent), class: "parent-link", text: "↑ " + r.parent }) : null));
    });
    table.replaceChildren(head, ...rows);
    const qs = new URLSearchParams(Object.entries(query).filter(([k, v]) => v && k !== "limit"));
    history.replaceState(null, "", qs.toString() ? "?" + qs : "/");
  }
  for (const input of [projectSel, statusSel]) input.addEventListener("change", refresh);
  for (const input of [tagIn, qIn]) input.addEventListener("input", () => { clearTimeout(input._t); input._t = setTimeout(refresh, 250); });
  await refresh();
  document.body.dataset.ready = "1";
  setInterval(refresh, 10000);
})().catch(failed);

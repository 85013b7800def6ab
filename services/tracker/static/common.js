// moelab tracker: helpers every page shares. User data only ever enters the DOM as text
// (textContent / createTextNode), never as HTML, so a run named "<script>…" shows as written.
// Credentials: the API is called with the page's own cookies only. On a read-protected server the
// login form trades a token for an HttpOnly session cookie; no script ever stores a token.
"use strict";

const T = {
  charts: {},        // chart id -> uPlot instance (tests read drawn points from here)
  colors: ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4d7c0f", "#be185d"],
};
window.__tracker = T;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    node.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return node;
}

class LoginNeeded extends Error {}

async function api(path, params) {
  return (await apiPage(path, params)).items;
}

// A list endpoint's answer with the X-Total-Count the server sends (null when it sends none), so a
// page can say how much of a list it holds and ask for the rest.
async function apiPage(path, params) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params || {})) {
    if (Array.isArray(v)) v.forEach((x) => url.searchParams.append(k, x));
    else if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, v);
  }
  const resp = await fetch(url, { credentials: "same-origin" });
  if (resp.status === 401) { showLogin(); throw new LoginNeeded("log in to read this tracker"); }
  if (!resp.ok) {  // the server's reason, as a sentence, not its JSON
    const body = await resp.text();
    let detail = body;
    try { const d = JSON.parse(body).detail; detail = typeof d === "string" ? d : JSON.stringify(d); } catch (e) { /* not JSON */ }
    throw new Error(`${resp.status} ${detail}`);
  }
  const total = resp.headers.get("X-Total-Count");
  return { items: await resp.json(), total: total === null ? null : +total };
}

// The login form: the token goes to POST /api/session once and is never kept by the page.
function showLogin(message) {
  const main = document.getElementById("main");
  if (document.getElementById("login-form")) return;
  const input = el("input", { id: "login-token", type: "password", autocomplete: "off", size: 48,
    placeholder: "API token (moelab tracker token --scope read)" });
  const note = el("p", { class: "warn", id: "login-error", text: message || "" });
  const form = el("form", { id: "login-form", class: "filters" }, input, el("button", { type: "submit", text: "Log in" }));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const resp = await fetch("/api/session", { method: "POST", credentials: "same-origin",
      headers: { "content-type": "application/json" }, body: JSON.stringify({ token: input.value }) });
    input.value = "";
    if (resp.ok) location.reload();
    else note.textContent = resp.status === 403 ? "unknown or revoked token" : `login failed (${resp.status})`;
  });
  main.replaceChildren(el("h1", { text: "This tracker protects its runs" }),
    el("p", { class: "note", text: "Paste an API token of any scope. The server keeps a read-only session for this browser in an HttpOnly cookie; the token itself is not stored." }),
    form, note);
  document.body.dataset.ready = "login";
}

function failed(e) {
  if (e instanceof LoginNeeded) return;
  document.getElementById("main").replaceChildren(el("p", { class: "warn", id: "page-error", text: e.message || String(e) }));
  document.body.dataset.ready = "error";
}

function fmtTime(ts) {
  if (!ts) return "";
  return new Date(ts * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC";
}

function fmtDuration(s) {
  if (s === null || s === undefined || !isFinite(s)) return "";
  if (s < 10) return `${s.toFixed(1)} s`;
  if (s < 120) return `${s.toFixed(0)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

function fmtNum(v) {
  if (v === null || v === undefined) return "—";
  if (typeof v !== "number") return String(v);
  const a = Math.abs(v);
  if (Number.isInteger(v) && a < 1e9) return v.toLocaleString("en-US");
  return a !== 0 && (a < 1e-3 || a >= 1e6) ? v.toExponential(3) : String(+v.toPrecision(5));
}

// Axis ticks: short (12k, 1.5M) so a million-step axis stays legible, with as many decimals as
// the tick spacing `incr` needs to keep neighbouring ticks distinct.
function fmtTick(v, incr) {
  if (v === null || v === undefined) return "";  // a tick uPlot leaves unlabelled (log scales)
  const a = Math.abs(v);
  if (a < 1e4 || !incr) return fmtNum(v);
  const [scale, suffix] = a >= 1e9 ? [1e9, "G"] : a >= 1e6 ? [1e6, "M"] : [1e3, "k"];
  const decimals = Math.max(0, Math.min(6, Math.ceil(-Math.log10(incr / scale) - 1e-9)));
  return (v / scale).toFixed(decimals) + suffix;
}

function statusBadge(status) {
  return el("span", { class: `status status-${status}`, text: status });
}

function runDuration(r) {
  const end = r.finished || (r.status === "running" ? Date.now() / 1000 : r.updated);
  return end - r.created;
}

// The unit a key's values are in, for the y-axis label (keys are free-form; these are the
// conventions moelab's stages use).
function unitOf(key) {
  const k = key.toLowerCase(), leaf = k.split("/").pop();
  if (leaf === "loss" || /^(train|eval|val)_?loss$/.test(leaf)) return "loss (nats/token)";
  if (leaf === "bpb" || k.includes("/bpb/")) return "bits per byte";
  if (k.startsWith("eval/task/")) return "task score";
  if (leaf.endsWith("loss")) return leaf.replace(/_/g, " ");
  if (leaf.endsWith("_gib")) return "GiB";
  if (leaf === "lr" || leaf.endsWith("_lr")) return "learning rate";
  if (leaf.includes("tokens_per_s") || leaf.endsWith("per_s")) return leaf.replace("_per_s", "/s");
  if (leaf === "mfu") return "fraction of peak FLOP/s";
  if (leaf.includes("maxvio")) return "MaxVio (max/mean − 1)";
  if (leaf.includes("dead_experts")) return "experts";
  if (leaf.includes("grad_norm")) return "L2 norm";
  if (leaf.endsWith("seconds") || leaf.endsWith("_s") || leaf === "time") return "seconds";
  if (leaf.includes("rate") || leaf.includes("fraction") || leaf.includes("share")) return "fraction";
  if (/^layer\d+$/.test(leaf)) return unitOf(key.split("/").slice(0, -1).join("/") || leaf);
  return leaf;
}

// Exponential moving average (debiased, like TensorBoard); nulls (NaN/Inf points) stay gaps.
function smooth(values, weight) {
  if (!weight) return values;
  let last = 0, n = 0;
  return values.map((v) => {
    if (v === null) return null;
    last = last * weight + (1 - weight) * v;
    n += 1;
    return last / (1 - Math.pow(weight, n));
  });
}

const TRAINING = ["loss", "train/loss", "eval/loss", "eval_loss", "lr", "tokens_per_s", "mfu"];
const BAD_EVENTS = new Set(["router_health", "warning", "error", "bad_step"]);

// The run page's sections.
function sectionOf(key) {
  if (key.startsWith("system/")) return "system";
  if (key.startsWith("router/")) return "router";
  if (TRAINING.includes(key) || key.startsWith("train/") || key.startsWith("eval/")) return "training";
  return "other";
}

function orderKeys(keys) {
  const rank = (k) => { const i = TRAINING.indexOf(k); return i < 0 ? 100 : i; };
  return keys.slice().sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
}

// Per-layer keys (`router/maxvio/layer3`) are grouped per prefix.
function layerOf(key) {
  const m = key.match(/^(.+)\/layer(\d+)$/);
  return m ? { prefix: m[1], layer: +m[2] } : null;
}

// Keys logged once (a stage's figures) belong in a summary table, not in one-point charts.
function isSummary(info) { return info.points <= 1; }

function summaryTable(id, rows, columns, marksDifferences = true) {
  // rows: [{key, values: [..one per column]}]; with marksDifferences, rows whose columns differ
  // (runs side by side) are highlighted
  const head = el("tr", {}, el("th", { text: "key" }), ...columns.map((c) => el("th", { text: c })));
  const table = el("table", { id, class: "summary" }, head);
  for (const r of rows) {
    const differs = marksDifferences && r.values.length > 1 && new Set(r.values.map(String)).size > 1;
    table.appendChild(el("tr", { "data-key": r.key, class: differs ? "differs" : "" }, el("td", { text: r.key }),
      ...r.values.map((v) => el("td", { class: "num", text: fmtNum(v) }))));
  }
  return table;
}

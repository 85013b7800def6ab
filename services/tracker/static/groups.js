// Run groups on the compare page (as W&B groups runs): runs sharing a tag set or a config value
// are drawn as one mean line with a min–max band instead of one line each.
"use strict";

// A dotted config path as the server writes it (a dot or backslash inside one key is escaped with
// a backslash) -> its keys: "lr_x0\\.1" is the one key "lr_x0.1", "model.top_k" is two keys.
function configPath(dotted) {
  const parts = [];
  let cur = "";
  for (let i = 0; i < dotted.length; i++) {
    const c = dotted[i];
    if (c === "\\" && i + 1 < dotted.length) { cur += dotted[++i]; continue; }
    if (c === ".") { parts.push(cur); cur = ""; continue; }
    cur += c;
  }
  parts.push(cur);
  return parts;
}

function configValue(config, dotted) {
  let v = config;
  for (const part of configPath(dotted)) {
    if (v === null || typeof v !== "object" || !(part in v)) return undefined;
    v = v[part];
  }
  return v;
}

// by: "" (no groups), "tags", or "config:<dotted key>" -> Map(label -> runs), in first-seen order.
function groupRuns(runs, by) {
  const groups = new Map();
  for (const r of runs) {
    let label = r.name;
    if (by === "tags") label = r.tags.length ? r.tags.join(", ") : "(no tags)";
    else if (by.startsWith("config:")) label = `${by.slice(7)} = ${JSON.stringify(configValue(r.config, by.slice(7)) ?? null)}`;
    if (!groups.has(label)) groups.set(label, []);
    groups.get(label).push(r);
  }
  return groups;
}

// Linear interpolation of a line at x (null outside its range or next to a gap).
function interpolate(xs, ys, x) {
  let lo = 0, hi = xs.length - 1;
  if (!xs.length || x < xs[0] || x > xs[hi]) return null;
  while (hi - lo > 1) { const mid = (lo + hi) >> 1; if (xs[mid] <= x) lo = mid; else hi = mid; }
  if (xs[lo] === x) return ys[lo];
  const a = ys[lo], b = ys[hi];
  if (a === null || b === null || a === undefined || b === undefined) return null;
  return a + (b - a) * (x - xs[lo]) / (xs[hi] - xs[lo]);
}

// Mean, min and max over lines at every x any of them has (each line interpolated at the others').
function aggregate(lines) {
  const xsSet = new Set();
  lines.forEach((l) => l.xs.forEach((x) => xsSet.add(x)));
  const xs = Float64Array.from(xsSet).sort();
  const mean = [], lo = [], hi = [];
  for (const x of xs) {
    const vals = lines.map((l) => interpolate(l.xs, l.ys, x)).filter((v) => v !== null && v !== undefined && isFinite(v));
    if (!vals.length) { mean.push(null); lo.push(null); hi.push(null); continue; }
    mean.push(vals.reduce((a, b) => a + b, 0) / vals.length);
    lo.push(Math.min(...vals));
    hi.push(Math.max(...vals));
  }
  return { xs: Array.from(xs), mean, lo, hi };
}

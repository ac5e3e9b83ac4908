// The status page: renders /api/v1/job (inlined at first, then fetched every 2 s) with
// DOM calls only; every string from the job goes in as text, never as markup.
"use strict";

const REFRESH_MS = 2000, FETCH_TIMEOUT_MS = 8000;
const SVG = "http://www.w3.org/2000/svg";
const NODE_W = 180, NODE_H = 46, COL_GAP = 70, ROW_GAP = 18, PAD = 8;

function el(tag, attrs, text) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }
function byId(id) { return document.getElementById(id); }
function num(n) { return n === null || n === undefined ? "–" : Math.round(n).toLocaleString("en-US"); }

function duration(ms) {
  if (ms < 1000) return ms + " ms";
  const s = Math.floor(ms / 1000);
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
  return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
}

function watermark(ms, now) {
  if (ms === null || ms === undefined) return "none yet";
  const behind = Math.max(0, now - ms);
  let when;
  try { when = new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z"); } catch (e) { when = String(ms); }
  return when + " (" + duration(behind) + " behind)";
}

function render(job) {
  document.title = "weir · " + job.name;
  byId("name").textContent = job.name;
  const phase = byId("phase");
  phase.textContent = job.phase;
  phase.className = "badge " + job.phase;
  const last = job.checkpoints.last_committed;
  byId("summary").textContent = job.delivery + " · checkpoints every " + job.checkpoint_interval_ms + " ms · up " +
    duration(job.now_ms - job.started_at_ms) + (last ? " · last committed checkpoint " + last : "") +
    " · dead letters " + num(job.dead_letters);
  renderProgress(job.progress);
  renderGraph(job);
  renderCheckpoints(job);
  renderOperators(job);
  renderPartitions(job);
  renderRestarts(job);
  renderGroup(job);
}

function renderProgress(progress) {
  byId("progress-section").hidden = !progress;
  if (!progress) return;
  const of = progress.total ? " of " + num(progress.total) : "";
  const eta = progress.eta_ms !== null && progress.eta_ms !== undefined ? ", about " + duration(progress.eta_ms) + " left" : "";
  byId("progress-text").textContent = progress.what + ": " + num(progress.done) + of + " " + progress.unit + ", " +
    num(progress.entries) + " entries, " + num(progress.bytes) + " bytes, " + duration(progress.elapsed_ms) + eta;
  const share = progress.total ? Math.min(100, 100 * progress.done / progress.total) : 0;
  byId("progress-bar").style.width = share.toFixed(1) + "%";
}

// Columns by depth: sources first, each operator one right of its furthest input, sinks last.
function layout(graph) {
  const nodes = new Map();
  graph.sources.forEach(s => nodes.set(s.name, { kind: "source", name: s.name, depth: 0, item: s }));
  graph.operators.forEach(o => nodes.set(o.name, { kind: "operator", name: o.name, depth: 1, item: o }));
  for (let round = 0; round < graph.operators.length; round++) {
    for (const e of graph.edges) {
      const from = nodes.get(e.from), to = nodes.get(e.to);
      if (from && to && to.kind === "operator") to.depth = Math.max(to.depth, from.depth + 1);
    }
  }
  const deepest = Math.max(0, ...[...nodes.values()].map(n => n.depth));
  graph.sinks.forEach(s => nodes.set(s.name, { kind: "sink", name: s.name, depth: deepest + 1, item: s }));
  const rows = new Map();
  for (const node of nodes.values()) {
    node.row = rows.get(node.depth) || 0;
    rows.set(node.depth, node.row + 1);
  }
  const across = Math.max(1, ...rows.values()), levels = deepest + 2;
  // Left to right where it fits, top to bottom on a narrow screen.
  const vertical = levels * (NODE_W + COL_GAP) > Math.max(320, window.innerWidth - 32);
  for (const node of nodes.values()) {
    node.x = PAD + (vertical ? node.row * (NODE_W + ROW_GAP) : node.depth * (NODE_W + COL_GAP));
    node.y = PAD + (vertical ? node.depth * (NODE_H + COL_GAP / 2) : node.row * (NODE_H + ROW_GAP));
  }
  const width = vertical ? PAD * 2 + across * (NODE_W + ROW_GAP) - ROW_GAP : PAD * 2 + levels * NODE_W + (levels - 1) * COL_GAP;
  const height = vertical ? PAD * 2 + levels * NODE_H + (levels - 1) * COL_GAP / 2 : PAD * 2 + across * (NODE_H + ROW_GAP) - ROW_GAP;
  return { nodes, width, height, vertical };
}

// Text cut to fit a box, the whole of it in the box's title.
function fit(text, chars) {
  text = String(text);
  return text.length <= chars ? text : text.slice(0, chars - 1) + "…";
}

function subline(node) {
  const item = node.item;
  if (node.kind === "source") {
    const lag = item.partitions.reduce((sum, p) => sum + p.lag, 0);
    return (item.table ? "table " : "") + item.topic + " · lag " + num(lag);
  }
  if (node.kind === "sink") return "→ " + item.topic;
  return "×" + item.parallelism + (item.key_by ? " by key" : "") + " · " + num(item.records_in_per_s) + "/s";
}

function renderGraph(job) {
  const svg = clear(byId("graph"));
  const { nodes, width, height, vertical } = layout(job.graph);
  svg.setAttribute("viewBox", "0 0 " + width + " " + height);
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  const defs = el("svg:defs");
  const marker = el("svg:marker", { id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" });
  marker.appendChild(el("svg:path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#7c8a9d" }));
  defs.appendChild(marker);
  svg.appendChild(defs);
  for (const e of job.graph.edges) {
    const from = nodes.get(e.from), to = nodes.get(e.to);
    if (!from || !to) continue;
    let d, x1, y1;
    if (vertical) {
      x1 = from.x + NODE_W / 2; y1 = from.y + NODE_H;
      const x2 = to.x + NODE_W / 2, y2 = to.y, mid = (y1 + y2) / 2;
      d = `M ${x1} ${y1} C ${x1} ${mid}, ${x2} ${mid}, ${x2} ${y2}`;
    } else {
      x1 = from.x + NODE_W; y1 = from.y + NODE_H / 2;
      const x2 = to.x, y2 = to.y + NODE_H / 2, mid = (x1 + x2) / 2;
      d = `M ${x1} ${y1} C ${mid} ${y1}, ${mid} ${y2}, ${x2} ${y2}`;
    }
    svg.appendChild(el("svg:path", { class: "edge", d, "marker-end": "url(#arrow)" }));
    if (e.output) svg.appendChild(el("svg:text", { class: "edge-label", x: x1 + 4, y: y1 - 4 }, e.output));
  }
  for (const node of nodes.values()) {
    const g = el("svg:g", { class: "node " + node.kind, transform: `translate(${node.x},${node.y})` });
    g.appendChild(el("svg:title", {}, node.kind + " " + node.name + ": " + subline(node)));
    g.appendChild(el("svg:rect", { width: NODE_W, height: NODE_H }));
    g.appendChild(el("svg:text", { x: 8, y: 18, class: "name" }, fit(node.name, 24)));
    g.appendChild(el("svg:text", { x: 8, y: 36, class: "sub" }, fit(subline(node), 28)));
    svg.appendChild(g);
  }
}

function renderCheckpoints(job) {
  const recent = job.checkpoints.recent;
  const committed = recent.filter(c => c.committed).map(c => c.duration_ms).sort((a, b) => a - b);
  const failed = recent.length - committed.length;
  byId("checkpoint-summary").textContent = recent.length === 0 ? "no checkpoint yet" :
    "last " + recent.length + ": p50 " + (committed.length ? committed[Math.floor(committed.length / 2)] : "–") +
    " ms, max " + (committed.length ? committed[committed.length - 1] : "–") + " ms, " + failed + " failed";
  const svg = clear(byId("checkpoint-chart"));
  const barW = 12, height = 120, top = 14, left = 4;
  const width = Math.max(320, left + recent.length * barW + 60);
  svg.setAttribute("viewBox", "0 0 " + width + " " + (height + 16));
  svg.setAttribute("width", width);
  svg.setAttribute("height", height + 16);
  const max = Math.max(1, ...recent.map(c => c.duration_ms));
  svg.appendChild(el("svg:text", { class: "axis", x: left, y: 10 }, max + " ms"));
  recent.forEach((c, i) => {
    const h = c.committed ? Math.max(1, (height - top) * c.duration_ms / max) : height - top;
    const bar = el("svg:rect", { class: c.committed ? "bar-ok" : "bar-failed", x: left + i * barW, y: height - h, width: barW - 2, height: h });
    bar.appendChild(el("svg:title", {}, "checkpoint " + c.id + ": " + c.duration_ms + " ms" +
      (c.committed ? ", " + num(c.state_changes) + " state changes, " + num(c.changelog_bytes) + " changelog bytes" : ", failed: " + c.error)));
    svg.appendChild(bar);
  });
  if (recent.length) {
    svg.appendChild(el("svg:text", { class: "axis", x: left, y: height + 12 }, "#" + recent[0].id));
    svg.appendChild(el("svg:text", { class: "axis", x: left + (recent.length - 1) * barW, y: height + 12, "data-last": "" }, "#" + recent[recent.length - 1].id));
  }
}

function row(cells) {
  const tr = el("tr");
  for (const [text, cls] of cells) tr.appendChild(el("td", cls ? { class: cls } : {}, text));
  return tr;
}

function renderOperators(job) {
  const body = clear(byId("operators").tBodies[0]);
  for (const op of job.graph.operators) {
    for (const s of op.subtasks) {
      body.appendChild(row([[op.name], [s.subtask, "num"], [num(s.records_in), "num wide"], [num(s.records_in_per_s), "num"],
        [num(s.records_out), "num wide"], [num(s.records_out_per_s), "num"], [watermark(s.watermark_ms, job.now_ms)],
        [num(s.log_dropped_lines) + " lines", "num wide"]]));
    }
  }
}

function renderPartitions(job) {
  const body = clear(byId("partitions").tBodies[0]);
  for (const source of job.graph.sources) {
    for (const p of source.partitions) {
      body.appendChild(row([[source.name], [source.topic, "wide"], [p.partition, "num"], [num(p.lag), "num lag"], [watermark(p.watermark_ms, job.now_ms)]]));
    }
  }
}

function renderRestarts(job) {
  const failedCheckpoints = job.checkpoints.recent.filter(c => !c.committed);
  byId("restart-summary").textContent = job.restarts.count + " restarts; " + failedCheckpoints.length + " of the last checkpoints failed";
  const list = clear(byId("restarts"));
  for (const r of job.restarts.recent.slice().reverse()) {
    list.appendChild(el("li", {}, duration(job.now_ms - r.at_ms) + " ago: " + r.cause));
  }
  for (const c of failedCheckpoints.slice().reverse()) {
    list.appendChild(el("li", {}, "checkpoint " + c.id + " failed: " + c.error));
  }
}

function renderGroup(job) {
  byId("group-section").hidden = !job.group;
  if (!job.group) return;
  const g = job.group;
  byId("group-summary").textContent = "member " + (g.member_id || "(none yet)") + " · partitions " +
    (g.owned_partitions.length ? g.owned_partitions.join(", ") : "none") + " · " + g.rebalances + " rebalances";
  const list = clear(byId("rebalances"));
  for (const r of g.recent.slice().reverse()) {
    list.appendChild(el("li", {}, duration(job.now_ms - r.at_ms) + " ago: now " + r.owned.join(", ") +
      (r.gained.length ? "; gained " + r.gained.join(", ") : "") + (r.lost.length ? "; lost " + r.lost.join(", ") : "") +
      (r.duration_ms !== null && r.duration_ms !== undefined ? "; running again after " + duration(r.duration_ms) : "")));
  }
}

// One request at a time, each given up after a while: a slow job never piles them up.
async function refresh() {
  const stale = byId("stale");
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), FETCH_TIMEOUT_MS);
  try {
    const response = await fetch("/api/v1/job", { cache: "no-store", signal: abort.signal });
    if (!response.ok) throw new Error("HTTP " + response.status);
    render(await response.json());
    stale.hidden = true;
  } catch (error) {
    if (stale.hidden) stale.textContent = "not reachable since " + new Date().toLocaleTimeString() + " (" + error.message + ")";
    stale.hidden = false;
  } finally {
    clearTimeout(timer);
    setTimeout(refresh, REFRESH_MS);
  }
}

const initial = document.getElementById("initial");
if (initial) render(JSON.parse(initial.textContent));
setTimeout(refresh, REFRESH_MS);

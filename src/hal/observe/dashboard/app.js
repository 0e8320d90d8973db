// HAL dashboard: plain JS + SVG, no framework. Polls the control plane every 2 s and
// renders the visible tab only. The server filters, sorts and pages the queue, so the
// browser never holds more than one page of rows (fast at 10,000+ queued jobs).
// All user-controlled text (job names, users, reasons) goes in via textContent.
"use strict";

const POLL_MS = 2000;
const PAGE = 100;
const state = { token: "", tab: "overview", offset: 0, detail: null, timer: null,
  filterKey: "", reasonsSeen: new Set() };

function $(sel) { return document.querySelector(sel); }
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}
function svg(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}
function fmtTime(t) { return t ? new Date(t * 1000).toLocaleString() : ""; }
function fmtBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}
function pct(a, b) { return b ? Math.round((100 * a) / b) : 0; }

// -- token and requests ---------------------------------------------------------------
function readToken() {
  const m = location.hash.match(/token=([^&]+)/);
  if (m) {
    localStorage.setItem("halToken", decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + "#overview");
  }
  return localStorage.getItem("halToken") || "";
}

async function api(path, asText) {
  const r = await fetch(path, { headers: { Authorization: `Bearer ${state.token}` } });
  if (r.status === 401) { showLogin("the token was refused; paste a valid one"); throw new Error("401"); }
  if (!r.ok) {
    let detail = r.statusText;
    try { detail = (await r.json()).detail || detail; } catch (e) { /* not JSON */ }
    throw new Error(detail);
  }
  return asText ? r.text() : r.json();
}

function showLogin(message) {
  $("#login").hidden = false;
  $("main").hidden = true;
  $("#login-error").textContent = message || "";
}

// -- tabs -----------------------------------------------------------------------------
function selectTab(name) {
  if (!document.getElementById(`tab-${name}`)) name = "overview";
  state.tab = name;
  for (const s of document.querySelectorAll(".tab")) s.hidden = s.id !== `tab-${name}`;
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.tab === name);
  refresh();
}

async function refresh() {
  if (!state.token) return;
  clearTimeout(state.timer);
  try {
    if (state.tab === "overview") await renderOverview();
    else if (state.tab === "queue") await renderQueue();
    else if (state.tab === "alerts") await renderAlerts();
    if (state.detail !== null) await renderDetail(state.detail, false);
    $("#live").classList.remove("stale");
  } catch (err) {
    $("#live").classList.add("stale");
    $("#live").title = `update failed: ${err.message}`;
  }
  state.timer = setTimeout(refresh, POLL_MS);
}

// -- overview -------------------------------------------------------------------------
async function renderOverview() {
  const o = await api("/v1/observe/overview");
  $("#cluster-name").textContent = o.cluster;
  $("#version").textContent = `v${o.version}`;
  $("#alert-count").textContent = o.alerts.length ? String(o.alerts.length) : "";
  const s = o.now_sample;
  const cards = [
    ["CPUs in use", `${s.cpus_alloc} / ${s.cpus_total}`, `${pct(s.cpus_alloc, s.cpus_total)}%`],
    ["Memory in use", fmtBytes(s.memory_alloc_bytes), `of ${fmtBytes(s.memory_total_bytes)}`],
    ["GPUs in use", `${s.gpus_alloc} / ${s.gpus_total}`, `${pct(s.gpus_alloc, s.gpus_total)}%`],
    ["Running jobs", s.running, ""],
    ["Pending jobs", s.pending, ""],
    ["Nodes up", `${s.nodes_up} / ${s.nodes_total}`, ""],
    ["Last cycle", `${(o.scheduler.last_cycle_s * 1000).toFixed(1)} ms`, `${o.scheduler.cycles} cycles`],
  ];
  $("#cards").replaceChildren(...cards.map(([label, value, sub]) =>
    el("div", { class: "card", "data-card": label }, el("b", {}, value), el("span", {}, `${label} ${sub}`))));
  drawChart(o.history.concat([s]));
  const chips = Object.entries(o.node_states).map(([st, n]) => el("span", { class: `s-${st}` }, `${n} ${st}`));
  $("#node-states").replaceChildren(...chips);
  // Topology map: nodes grouped by the first level of their topology path.
  const groups = new Map();
  for (const n of o.nodes) {
    const key = n.topology.length ? n.topology.join(" / ") : "cluster";
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(n);
  }
  const map = [];
  for (const [key, nodes] of groups) {
    map.push(el("div", { class: "node-group" }, el("div", { class: "group-label" }, key), ...nodes.map(nodeTile)));
  }
  $("#node-map").replaceChildren(...map);
  const rows = Object.entries(o.queue.by_reason).sort((a, b) => b[1] - a[1])
    .map(([reason, n]) => el("tr", {}, el("td", {}, reason), el("td", {}, n)));
  $("#reasons tbody").replaceChildren(...rows);
}

function nodeTile(n) {
  const bar = el("div", { class: "bar" }, el("i", {}));
  bar.firstChild.style.width = `${pct(n.cpus_alloc, n.cpus)}%`;
  const tile = el("div", { class: `node s-${n.state}`, "data-node": n.name, "data-state": n.state,
    title: `${n.name}: ${n.state}${n.reason ? " (" + n.reason + ")" : ""}\nCPUs ${n.cpus_alloc}/${n.cpus}` +
      `, GPUs ${n.gpus_alloc}/${n.gpus}, memory ${fmtBytes(n.memory_alloc_bytes)}/${fmtBytes(n.memory_bytes)}` +
      `\n${n.jobs} job(s), heartbeat ${n.heartbeat_age_s} s ago` },
    el("b", {}, n.name), ` ${n.state}`, bar);
  return tile;
}

function drawChart(points) {
  const chart = $("#util-chart");
  const w = 600, h = 160;
  const children = [];
  for (const y of [0.25, 0.5, 0.75]) {
    children.push(svg("line", { x1: 0, x2: w, y1: h * y, y2: h * y, stroke: "#e3e7ec" }));
  }
  if (points.length > 1) {
    const t0 = points[0].time, span = Math.max(1, points[points.length - 1].time - t0);
    const series = [["cpu-line", (p) => p.cpus_alloc / (p.cpus_total || 1)],
      ["mem-line", (p) => p.memory_alloc_bytes / (p.memory_total_bytes || 1)],
      ["gpu-line", (p) => p.gpus_total ? p.gpus_alloc / p.gpus_total : null]];
    for (const [cls, f] of series) {
      const coords = points.filter((p) => f(p) !== null)
        .map((p) => `${((p.time - t0) / span * w).toFixed(1)},${(h - f(p) * (h - 4) - 2).toFixed(1)}`);
      if (coords.length > 1) {
        children.push(svg("polyline", { class: cls, points: coords.join(" "), fill: "none", "stroke-width": 2 }));
      }
    }
  }
  chart.replaceChildren(...children);
}

// -- queue ----------------------------------------------------------------------------
function queueQuery() {
  const p = new URLSearchParams();
  const add = (k, id) => { const v = $(id).value.trim(); if (v) p.set(k, v); };
  add("state", "#f-state"); add("partition", "#f-partition"); add("user", "#f-user");
  add("reason", "#f-reason"); add("q", "#f-text"); add("sort", "#f-sort");
  const key = p.toString();
  if (key !== state.filterKey) { state.filterKey = key; state.offset = 0; }
  p.set("offset", state.offset); p.set("limit", PAGE);
  return p.toString();
}

function fillSelect(sel, values, label) {
  const current = sel.value;
  const known = [...sel.options].map((o) => o.value).slice(1).join("\n");
  if (known === values.join("\n")) return;
  sel.replaceChildren(el("option", { value: "" }, label), ...values.map((v) => el("option", { value: v }, v)));
  sel.value = values.includes(current) ? current : "";
}

async function renderQueue() {
  const data = await api(`/v1/observe/queue?${queueQuery()}`);
  fillSelect($("#f-partition"), data.partitions, "all partitions");
  fillSelect($("#f-user"), data.users, "all users");
  for (const j of data.jobs) if (j.state === "PENDING") state.reasonsSeen.add(j.reason);
  fillSelect($("#f-reason"), [...state.reasonsSeen].sort(), "any reason");
  const last = Math.min(data.total, state.offset + data.jobs.length);
  $("#page-info").textContent = data.total ? `${state.offset + 1}–${last} of ${data.total}` : "no jobs";
  $("#prev").disabled = state.offset === 0;
  $("#next").disabled = last >= data.total;
  const rows = data.jobs.map((j) => {
    const tr = el("tr", { "data-job": j.display_id, "data-state": j.state },
      el("td", {}, j.display_id), el("td", {}, j.name), el("td", {}, j.user),
      el("td", {}, j.partition), el("td", {}, j.state),
      el("td", {}, j.state === "PENDING" ? j.reason : ""),
      el("td", {}, j.state === "PENDING" ? fmtTime(j.expected_start) : fmtTime(j.start_time)),
      el("td", {}, fmtTime(j.submit_time)), el("td", {}, j.cpus), el("td", {}, j.gpus),
      el("td", {}, j.nodes.join(",")));
    tr.addEventListener("click", () => openDetail(j.display_id));
    return tr;
  });
  $("#queue-table tbody").replaceChildren(...rows);
}

// -- job detail -----------------------------------------------------------------------
function openDetail(id) { state.detail = id; $("#job-detail").hidden = false; renderDetail(id, true); }

async function renderDetail(id, withLog) {
  const j = await api(`/v1/observe/jobs/${encodeURIComponent(id)}`);
  $("#d-id").textContent = j.display_id;
  $("#d-state").textContent = j.state;
  const fields = [["Name", j.name], ["User", j.user], ["Partition", j.partition],
    ["Why pending", j.state === "PENDING" ? j.reason : "—"],
    ["Expected start", fmtTime(j.expected_start) || "—"], ["Nodes", j.nodes.join(", ") || "—"],
    ["CPUs / GPUs", `${j.cpus} / ${j.gpus}`], ["Memory", fmtBytes(j.memory_bytes)],
    ["Max RSS", fmtBytes(j.max_rss_bytes)], ["CPU time", `${j.cpu_seconds.toFixed(2)} s`],
    ["Exit code", j.exit_code], ["Restarts", j.restarts], ["Working dir", j.workdir]];
  $("#d-fields").replaceChildren(...fields.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  $("#d-timeline").replaceChildren(...j.timeline.map((e) =>
    el("li", {}, el("b", {}, e.event), ` ${fmtTime(e.time)} `, e.detail)));
  drawTimeline(j);
  $("#d-trace").textContent = `trace ${j.trace_id}  (TRACEPARENT ${j.traceparent})`;
  if (withLog || j.state === "RUNNING") {
    try {
      $("#d-log").textContent = (await api(`/v1/jobs/${encodeURIComponent(id)}/output?tail_bytes=4096`, true)) || "(empty)";
    } catch (err) {
      $("#d-log").textContent = `output not available: ${err.message}`;
    }
  }
}

function drawTimeline(j) {
  const end = j.end_time || Date.now() / 1000;
  const t0 = j.submit_time, span = Math.max(0.001, end - t0);
  const x = (t) => ((t - t0) / span) * 400;
  const parts = [svg("rect", { x: 0, y: 4, width: 400, height: 16, fill: "#e0a526" })];
  if (j.start_time) {
    parts.push(svg("rect", { x: x(j.start_time), y: 4, width: Math.max(1, 400 - x(j.start_time)), height: 16, fill: "#2f6fd6" }));
  }
  $("#d-timeline-bar").replaceChildren(...parts);
}

// -- alerts ---------------------------------------------------------------------------
async function renderAlerts() {
  const a = await api("/v1/alerts");
  $("#alert-count").textContent = a.alerts.length ? String(a.alerts.length) : "";
  const row = (x, resolved) => el("tr", { "data-alert": x.name },
    el("td", {}, x.name), el("td", {}, x.severity), el("td", {}, x.summary),
    el("td", {}, fmtTime(x.starts_at)), ...(resolved ? [el("td", {}, fmtTime(x.ends_at))] : []));
  $("#alerts-firing tbody").replaceChildren(...(a.alerts.length ? a.alerts.map((x) => row(x, false))
    : [el("tr", {}, el("td", { colSpan: 4 }, "nothing firing"))]));
  $("#alerts-resolved tbody").replaceChildren(...a.resolved.map((x) => row(x, true)));
}

// -- start ----------------------------------------------------------------------------
function start() {
  state.token = readToken();
  $("#login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.token = $("#token").value.trim();
    localStorage.setItem("halToken", state.token);
    $("#login").hidden = true; $("main").hidden = false;
    refresh();
  });
  for (const a of document.querySelectorAll("nav a")) {
    a.addEventListener("click", (ev) => { ev.preventDefault(); history.replaceState(null, "", `#${a.dataset.tab}`); selectTab(a.dataset.tab); });
  }
  let typing = null;
  $("#filters").addEventListener("change", () => refresh());
  $("#f-text").addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(refresh, 250); });
  $("#filters").addEventListener("submit", (ev) => ev.preventDefault());
  $("#prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - PAGE); refresh(); });
  $("#next").addEventListener("click", () => { state.offset += PAGE; refresh(); });
  $("#close-detail").addEventListener("click", () => { state.detail = null; $("#job-detail").hidden = true; });
  if (!state.token) { showLogin(""); return; }
  selectTab((location.hash || "#overview").slice(1));
}

start();

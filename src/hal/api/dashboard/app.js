// HAL dashboard: plain JS + SVG, no framework. Polls the control plane every 2 s and
// renders the visible tab only. The server filters, sorts and pages the queue, so the
// browser never holds more than one page of rows (fast at 10,000+ queued jobs).
// All user-controlled text (job names, users, reasons) goes in via textContent.
"use strict";

const POLL_MS = 2000;
const PAGE = 100;
const state = { token: "", tab: "overview", offset: 0, detail: null, timer: null,
  filterKey: "", reasonsSeen: new Set(), trafficLayout: null };

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
function fmtSeconds(s) {
  if (s === null || s === undefined) return "—";
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 3600) return `${(s / 60).toFixed(1)} min`;
  if (s < 86400) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} d`;
}
function fmtCost(x) { return x === null || x === undefined ? "" : `$${Number(x).toFixed(2)}`; }
function fmtNum(x, digits) { return x === null || x === undefined ? "—" : Number(x).toFixed(digits); }
function cards(target, items) {
  $(target).replaceChildren(...items.map(([label, value, sub]) =>
    el("div", { class: "card", "data-card": label }, el("b", {}, value), el("span", {}, `${label} ${sub}`))));
}
function rowsOrEmpty(rows, cols, text) {
  return rows.length ? rows : [el("tr", { class: "empty" }, el("td", { colSpan: cols }, text))];
}

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
    let detail = r.statusText, code = "";
    try { const p = await r.json(); detail = p.detail || detail; code = p.code || ""; } catch (e) { /* not JSON */ }
    const err = new Error(detail);
    err.status = r.status;
    err.code = code;  // "not_configured": a plane this server does not run; the tab says so
    throw err;
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
    else if (state.tab === "fairshare") await renderFairShare();
    else if (state.tab === "prediction") await renderPrediction();
    else if (state.tab === "traffic") await renderTraffic();
    else if (state.tab === "data") await renderData();
    else if (state.tab === "cloud") await renderCloud();
    else if (state.tab === "software") await renderSoftware();
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
  const items = [
    ["CPUs in use", `${s.cpus_alloc} / ${s.cpus_total}`, `${pct(s.cpus_alloc, s.cpus_total)}%`],
    ["Memory in use", fmtBytes(s.memory_alloc_bytes), `of ${fmtBytes(s.memory_total_bytes)}`],
    ["GPUs in use", `${s.gpus_alloc} / ${s.gpus_total}`, `${pct(s.gpus_alloc, s.gpus_total)}%`],
    ["Running jobs", s.running, ""],
    ["Pending jobs", s.pending, ""],
    ["Nodes up", `${s.nodes_up} / ${s.nodes_total}`, ""],
    lastPass(o.scheduler, o.now),
  ];
  cards("#cards", items);
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

// Slurm's suffixes on a node's state, as sinfo prints them (maintenance first)
const FLAG_SUFFIX = [["MAINTENANCE", "$"], ["NOT_RESPONDING", "*"]];

function nodeTile(n) {
  const bar = el("div", { class: "bar" }, el("i", {}));
  bar.firstChild.style.width = `${pct(n.cpus_alloc, n.cpus)}%`;
  const flags = n.flags || [];
  const suffix = (FLAG_SUFFIX.find(([flag]) => flags.includes(flag)) || ["", ""])[1];
  const silent = flags.includes("NOT_RESPONDING");
  const tile = el("div", { class: `node s-${n.state}${silent ? " not-responding" : ""}`,
    "data-node": n.name, "data-state": n.state, "data-flags": flags.join(","),
    title: `${n.name}: ${n.state}${suffix}${n.reason ? " (" + n.reason + ")" : ""}` +
      `${silent ? "\nnot responding: its agent missed heartbeats" : ""}` +
      `\nCPUs ${n.cpus_alloc}/${n.cpus}` +
      `, GPUs ${n.gpus_alloc}/${n.gpus}, memory ${fmtBytes(n.memory_alloc_bytes)}/${fmtBytes(n.memory_bytes)}` +
      `\n${n.jobs} job(s), heartbeat ${n.heartbeat_age_s} s ago` },
    el("b", {}, n.name), ` ${n.state}${suffix}`, bar);
  return tile;
}

// The scheduler's last pass: how long it took and how long ago it ran (a pass runs
// only while jobs wait, so "5 min ago" on an idle cluster is not a stall).
function lastPass(sched, now) {
  if (sched.last_cycle_at === null || sched.last_cycle_at === undefined) {
    return ["Last pass", "—", "none yet (no job has waited)"];
  }
  // the pass alone, not the forecast slice after it (a server without it: the cycle)
  const s = sched.last_pass_s ?? sched.last_cycle_s;
  const took = s < 1 ? `${(s * 1000).toFixed(s < 0.01 ? 1 : 0)} ms` : `${s.toFixed(1)} s`;
  return ["Last pass", took, `${fmtAgo(Math.max(0, now - sched.last_cycle_at))} ago`];
}
function fmtAgo(s) { return s < 60 ? `${Math.round(s)} s` : fmtSeconds(s); }

// Time ticks a person reads at a glance: the first step that puts at most 6 on the span.
const TICK_STEPS = [10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600];
function clockLabel(t, step) {
  const opts = step < 60 ? { hour: "2-digit", minute: "2-digit", second: "2-digit" }
    : { hour: "2-digit", minute: "2-digit" };
  return new Date(t * 1000).toLocaleTimeString([], opts);
}

// Utilisation over the last hour: each resource's share in use (0-100 %, left axis)
// against the server's clock (local time, bottom axis). Drawn at the element's own
// width so the labels are not stretched.
function drawChart(points) {
  const chart = $("#util-chart");
  const w = Math.max(300, chart.clientWidth || 600), h = 180;
  const L = 44, R = 12, T = 8, B = 22, pw = w - L - R, ph = h - T - B;
  chart.setAttribute("viewBox", `0 0 ${w} ${h}`);
  const y = (f) => T + ph - f * ph;
  const children = [];
  const text = (attrs, content) => { const t = svg("text", attrs); t.textContent = content; return t; };
  for (const f of [0, 0.25, 0.5, 0.75, 1]) {
    children.push(svg("line", { x1: L, x2: w - R, y1: y(f), y2: y(f), class: "grid" }));
    children.push(text({ x: L - 6, y: y(f) + 4, "text-anchor": "end", class: "axis" }, `${f * 100}%`));
  }
  const end = points.length ? points[points.length - 1].time : Date.now() / 1000;
  const t0 = Math.min(points.length ? points[0].time : end, end - 60);  // at least a minute
  const span = end - t0;
  const x = (t) => L + ((t - t0) / span) * pw;
  const step = TICK_STEPS.find((st) => span / st <= 6) || 3600;
  for (let t = Math.ceil(t0 / step) * step; t <= end; t += step) {
    children.push(svg("line", { x1: x(t), x2: x(t), y1: T, y2: T + ph, class: "grid" }));
    if (x(t) > w - R - 30) continue;  // a label there would run off the chart
    children.push(text({ x: x(t), y: h - 6, "text-anchor": "middle", class: "axis tick" }, clockLabel(t, step)));
  }
  const series = [["cpu-line", (p) => p.cpus_alloc / (p.cpus_total || 1)],
    ["mem-line", (p) => p.memory_alloc_bytes / (p.memory_total_bytes || 1)],
    ["gpu-line", (p) => p.gpus_total ? p.gpus_alloc / p.gpus_total : null]];
  for (const [cls, f] of series) {
    const coords = points.filter((p) => f(p) !== null)
      .map((p) => `${x(p.time).toFixed(1)},${y(Math.min(1, f(p))).toFixed(1)}`);
    if (coords.length > 1) {
      children.push(svg("polyline", { class: cls, points: coords.join(" "), fill: "none", "stroke-width": 2 }));
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
  let data = await api(`/v1/observe/queue?${queueQuery()}`);
  if (state.offset > 0 && state.offset >= data.total) {
    // the open page fell off the end (its jobs ended or left the filter): show the last
    state.offset = Math.max(0, Math.floor((data.total - 1) / PAGE) * PAGE);
    data = await api(`/v1/observe/queue?${queueQuery()}`);
  }
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
      el("td", {}, j.nodes.join(",")), el("td", { class: "num" }, fmtCost(j.cost)));
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
  if (j.cost !== null && j.cost !== undefined) fields.push(["Cloud cost", fmtCost(j.cost)]);
  const g = j.gpu_usage;  // its GPUs' memory and utilisation, read through NVML
  if (g) fields.splice(10, 0, ["GPU use", `${fmtBytes(g.max_mem_bytes)} most, ` +
    `${g.max_util} % most, ${g.ave_util} % mean`]);
  $("#d-fields").replaceChildren(...fields.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  $("#d-timeline").replaceChildren(...j.timeline.map((e) =>
    el("li", {}, el("b", {}, e.event), ` ${fmtTime(e.time)} `, e.detail)));
  drawTimeline(j);
  renderProfile(j);
  await renderFeedback(j);
  $("#d-trace").textContent = `trace ${j.trace_id}  (TRACEPARENT ${j.traceparent})`;
  if (withLog || j.state === "RUNNING") {
    try {
      $("#d-log").textContent = (await api(`/v1/jobs/${encodeURIComponent(id)}/output?tail_bytes=4096`, true)) || "(empty)";
    } catch (err) {
      $("#d-log").textContent = `output not available: ${err.message}`;
    }
  }
}

// How the job behaves on its batch node (its agent's latest profile sample, while it
// runs) and the class that put it in (kept after it ends): GET /v1/observe/jobs/{id}.
function renderProfile(j) {
  $("#d-profile-class").textContent = (j.profile_class ? `class ${j.profile_class}` : "no class yet") +
    (j.latency_sensitive ? ", latency-sensitive" : "");
  const p = j.profile;
  if (!p) {
    const why = j.state === "RUNNING" ? "no sample from its agent yet" : "sampled while it runs";
    $("#d-profile").replaceChildren(el("dt", {}, "Measured"), el("dd", {}, why));
    return;
  }
  const stall = (x) => (x === null || x === undefined ? "—" : `${(x * 100).toFixed(0)} %`);
  const rows = [
    ["cpu", "CPU", `${p.cpu_util.toFixed(2)} CPUs busy`],
    ["memory", "Memory", `${fmtBytes(p.rss_bytes)} resident` +
      (p.memory_bytes === null || p.memory_bytes === undefined ? "" : `, ${fmtBytes(p.memory_bytes)} charged`)],
    ["io", "I/O", `${fmtRate(p.read_bytes_per_s)} read, ${fmtRate(p.write_bytes_per_s)} written`],
    ["network", "Network", p.net_bytes_per_s === null || p.net_bytes_per_s === undefined
      ? "— (not attributed)" : fmtRate(p.net_bytes_per_s)],
    ["pressure", "Pressure", p.cpu_pressure === null && p.memory_pressure === null && p.io_pressure === null
      ? "— (no pressure-stall files for it)"
      : `cpu ${stall(p.cpu_pressure)}, memory ${stall(p.memory_pressure)}, io ${stall(p.io_pressure)}`],
    ["source", "Sampled", `over ${fmtSeconds(p.interval_seconds)}, from ${p.source}`],
  ];
  $("#d-profile").replaceChildren(...rows.flatMap(([key, k, v]) =>
    [el("dt", {}, k), el("dd", { "data-profile": key }, v)]));
}

// What the job reported about itself (hal feedback, hal.feedback.report, POST
// /v1/jobs/{id}/feedback): per metric the way it is better, the latest value and a
// small chart of the kept series.
const GOALS = { max: "higher is better", min: "lower is better" };
async function renderFeedback(j) {
  const box = $("#d-feedback");
  let f;
  try {
    f = await api(`/v1/jobs/${j.id}/feedback`);
  } catch (err) {
    if (err.message === "401") throw err;
    const why = err.status === 503 ? "this server takes no application feedback" : `not available: ${err.message}`;
    box.replaceChildren(el("p", { class: "note" }, why));
    return;
  }
  if (!f.metrics.length) {
    box.replaceChildren(el("p", { class: "note" },
      "none reported (inside a job: hal feedback NAME=VALUE, or hal.feedback.report in Python)"));
    return;
  }
  box.replaceChildren(...f.metrics.map(feedbackMetric));
}

function fmtValue(v) { return Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(6))); }

function feedbackMetric(m) {
  const goal = GOALS[m.goal] || "no goal declared";
  const head = el("div", {}, el("b", { class: "metric-name" }, m.name), " ",
    el("span", { class: "goal" }, goal), " · latest ", el("span", { class: "latest" }, fmtValue(m.latest)),
    ` · ${m.count} report${m.count === 1 ? "" : "s"}`);
  const values = m.points.map(([, v]) => v);
  const range = values.length
    ? `${fmtValue(Math.min(...values))} to ${fmtValue(Math.max(...values))}, ` +
      `${fmtTime(m.points[0][0])} to ${fmtTime(m.points[m.points.length - 1][0])}` : "";
  return el("div", { class: "feedback-metric", "data-metric": m.name, "data-goal": m.goal || "" },
    head, sparkline(m.points), el("p", { class: "note range" }, range));
}

// The series as a line in a small box, oldest on the left; low values at the bottom
// whichever way is better (the goal is written beside it).
function sparkline(points) {
  const w = 400, h = 48, pad = 4;
  const chart = svg("svg", { class: "spark", viewBox: `0 0 ${w} ${h}`, preserveAspectRatio: "none",
    "data-points": points.length, role: "img", "aria-label": "the reported values over time" });
  if (points.length < 2) {
    if (points.length) chart.append(svg("circle", { cx: w / 2, cy: h / 2, r: 3, fill: "#2f6fd6" }));
    return chart;
  }
  const t0 = points[0][0], span = Math.max(1e-9, points[points.length - 1][0] - t0);
  const vs = points.map(([, v]) => v), lo = Math.min(...vs), hi = Math.max(...vs);
  const y = (v) => (hi > lo ? pad + (h - 2 * pad) * (1 - (v - lo) / (hi - lo)) : h / 2);
  const coords = points.map(([t, v]) => `${(((t - t0) / span) * w).toFixed(1)},${y(v).toFixed(1)}`);
  chart.append(svg("polyline", { points: coords.join(" ") }));
  return chart;
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

// -- fair share and quotas -----------------------------------------------------------
// The pending reasons of the limits plugin (docs/admin/priority.md, "Limits") and the hal.toml
// limit behind each. The limits' values are not served by the API: the panel shows the
// jobs they hold instead.
const LIMIT_REASONS = {
  QOSMaxJobsPerUserLimit: "QoS max_jobs_per_user",
  QOSMaxWallDurationPerJobLimit: "QoS max_wall",
  QOSMaxCpuPerJobLimit: "QoS max_tres_per_job.cpus",
  QOSMaxGRESPerJob: "QoS max_tres_per_job.gpus",
  QOSMaxMemoryPerJob: "QoS max_tres_per_job.mem",
  QOSMaxNodePerJobLimit: "QoS max_tres_per_job.nodes",
  QOSGrpCpuLimit: "QoS grp_tres.cpus",
  QOSGrpGRES: "QoS grp_tres.gpus",
  QOSGrpMemLimit: "QoS grp_tres.mem",
  QOSGrpNodeLimit: "QoS grp_tres.nodes",
  QOSGrpJobsLimit: "QoS grp_jobs",
  AssocMaxJobsLimit: "account max_jobs",
  AssocGrpJobsLimit: "account grp_jobs",
  AssocGrpCpuLimit: "account grp_tres.cpus",
  AssocGrpGRES: "account grp_tres.gpus",
  AssocGrpMemLimit: "account grp_tres.mem",
  AssocGrpNodeLimit: "account grp_tres.nodes",
  AssocMaxWallDurationPerJobLimit: "account max_wall",
  AssocMaxCpuPerJobLimit: "account max_tres_per_job.cpus",
  AssocMaxGRESPerJob: "account max_tres_per_job.gpus",
  AssocMaxMemPerJob: "account max_tres_per_job.mem",
  AssocMaxNodePerJobLimit: "account max_tres_per_job.nodes",
};
const SHARE_ROWS = 300;  // associations drawn; sshare --account narrows a bigger tree
const PRIORITY_ROWS = 10;

async function renderFairShare() {
  // The queue's first page by priority, then sprio for just those jobs: /v1/priority
  // without ids would send every pending job (10,000+) on each poll. The overview gives
  // the pending jobs per reason in one request (the limit reasons are among them).
  const [shares, overview, next, limits] = await Promise.all([
    api("/v1/shares"), api("/v1/observe/overview"),
    api(`/v1/observe/queue?state=PENDING&sort=priority&limit=${PRIORITY_ROWS}`), api("/v1/limits")]);
  renderShares(shares);
  renderLimitUsage(limits.limits);
  const limited = Object.entries(overview.queue.by_reason)
    .filter(([reason]) => Object.hasOwn(LIMIT_REASONS, reason)).sort((a, b) => b[1] - a[1]);
  const examples = await Promise.all(limited.slice(0, 8).map(([reason]) =>
    api(`/v1/observe/queue?state=PENDING&sort=priority&limit=4&reason=${encodeURIComponent(reason)}`)));
  const limitRows = limited.map(([reason, n], i) => el("tr", { "data-reason": reason },
    el("td", {}, reason), el("td", {}, LIMIT_REASONS[reason]), el("td", {}, n),
    el("td", {}, i < examples.length
      ? examples[i].jobs.map((j) => `${j.display_id} (${j.user})`).join(", ") : "")));
  $("#fs-limits tbody").replaceChildren(...rowsOrEmpty(limitRows, 4, "no pending job is held by a limit"));
  await renderPriority(next.jobs);
}

// "used / limit" ("used" alone when there is no cap on it)
function usedOf(used, cap, fmt = (x) => x) {
  return cap === null || cap === undefined ? fmt(used) : `${fmt(used)} / ${fmt(cap)}`;
}

function renderLimitUsage(limits) {
  const rows = limits.map((l) => {
    const users = Object.entries(l.running_by_user).map(([u, n]) => `${u} ${n}`).join(", ");
    const perUser = l.max_jobs_per_user === null ? (users || "—") : `max ${l.max_jobs_per_user}${users ? `: ${users}` : ""}`;
    const job = l.max_tres_per_job || {}, perJob = [];
    if (job.cpus !== null && job.cpus !== undefined) perJob.push(`${job.cpus} CPUs`);
    if (job.gpus !== null && job.gpus !== undefined) perJob.push(`${job.gpus} GPUs`);
    if (job.memory_bytes !== null && job.memory_bytes !== undefined) perJob.push(fmtBytes(job.memory_bytes));
    if (job.nodes !== null && job.nodes !== undefined) perJob.push(`${job.nodes} nodes`);
    if (l.max_wall_seconds !== null && l.max_wall_seconds !== undefined) perJob.push(`wall ${fmtSeconds(l.max_wall_seconds)}`);
    const name = l.kind === "account" && l.cohort ? `${l.name} (cohort ${l.cohort})` : l.name;
    return el("tr", { "data-kind": l.kind, "data-name": l.name },
      el("td", {}, l.kind === "qos" ? "QoS" : "account"), el("td", {}, name),
      el("td", {}, usedOf(l.running_jobs, l.grp_jobs)), el("td", {}, perUser),
      el("td", {}, usedOf(l.used.cpus, l.grp_tres.cpus)), el("td", {}, usedOf(l.used.gpus, l.grp_tres.gpus)),
      el("td", {}, usedOf(l.used.memory_bytes, l.grp_tres.memory_bytes, fmtBytes)),
      el("td", {}, usedOf(l.used.nodes, l.grp_tres.nodes)), el("td", {}, perJob.join(", ") || "—"));
  });
  $("#fs-usage tbody").replaceChildren(...rowsOrEmpty(rows, 9, "no QoS or account has limits"));
}

function renderShares(shares) {
  const half = shares.decay_half_life_seconds;
  $("#fs-mode").textContent = `usage half-life ${half ? fmtSeconds(half) : "none (never decays)"}`;
  const rows = shares.rows.slice(0, SHARE_ROWS).map((r) => {
    const name = el("td", { class: r.user ? "" : "fs-account" }, r.user || r.account);
    name.style.paddingLeft = `${8 + 14 * r.depth}px`;
    if (r.user) name.title = `user ${r.user} in account ${r.account}`;
    const bar = el("span", { class: "fs-bar" }, el("i", {}));
    bar.firstChild.style.width = `${Math.round(100 * r.fairshare)}%`;
    return el("tr", { "data-account": r.account, "data-user": r.user }, name,
      el("td", {}, r.raw_shares), el("td", {}, fmtNum(r.norm_shares, 3)),
      el("td", {}, Math.round(r.raw_usage).toLocaleString()), el("td", {}, fmtNum(r.norm_usage, 3)),
      el("td", {}, fmtNum(r.effective_usage, 3)),
      el("td", { class: "fs-factor" }, bar, fmtNum(r.fairshare, 3)));
  });
  $("#fs-shares tbody").replaceChildren(...rowsOrEmpty(rows, 7, "no associations"));
  $("#fs-shares-note").textContent = shares.rows.length > SHARE_ROWS
    ? `showing ${SHARE_ROWS} of ${shares.rows.length} associations (hal sshare lists all)` : "";
}

async function renderPriority(pending) {
  const ids = pending.map((j) => j.display_id);
  const reasons = new Map(pending.map((j) => [j.display_id, j.reason]));
  let prio;
  try {
    // with no ids it lists every pending job: asked only when the queue had none, for
    // the weights
    prio = await api(`/v1/priority${ids.length ? `?id=${encodeURIComponent(ids.join(","))}` : ""}`);
  } catch (err) {
    if (err.status !== 409) throw err;
    // priority/basic: no [priority] table, so there are no factors to break down
    $("#fs-weights").textContent = "priority/basic";
    $("#fs-priority").hidden = true;
    $("#fs-priority-note").textContent = err.message;
    return;
  }
  const w = prio.weights;
  $("#fs-weights").textContent = `${prio.plugin}: weights age ${w.age}, fair share ${w.fairshare}, ` +
    `job size ${w.job_size}, partition ${w.partition}, QoS ${w.qos}`;
  $("#fs-priority-note").textContent = "";
  $("#fs-priority").hidden = false;
  // /v1/priority answers in its own order: keep the queue's
  const byId = new Map(prio.jobs.map((j) => [j.display_id, j]));
  const rows = ids.filter((id) => byId.has(id)).map((id) => {
    const j = byId.get(id), f = j.weighted;
    return el("tr", { "data-job": j.display_id },
      el("td", {}, j.display_id), el("td", {}, j.user), el("td", {}, j.account), el("td", {}, j.qos),
      el("td", {}, j.partition), el("td", {}, j.fixed ? `${j.priority} (set)` : j.priority),
      el("td", {}, fmtNum(f.age, 0)), el("td", {}, fmtNum(f.fairshare, 0)),
      el("td", {}, fmtNum(f.job_size, 0)), el("td", {}, fmtNum(f.partition, 0)),
      el("td", {}, fmtNum(f.qos, 0)), el("td", {}, j.nice), el("td", {}, reasons.get(id)));
  });
  $("#fs-priority tbody").replaceChildren(...rowsOrEmpty(rows, 13, "no pending jobs"));
}

// -- prediction quality ---------------------------------------------------------------
const RUNNING_DRAWN = 12;

async function renderPrediction() {
  let p;
  try {
    p = await api("/v1/predict/status");
  } catch (err) {
    if (err.code !== "not_configured") throw err;
    $("#prediction-off").hidden = false; $("#prediction-on").hidden = true;
    $("#prediction-off-reason").textContent = err.message;
    return;
  }
  $("#prediction-off").hidden = true; $("#prediction-on").hidden = false;
  const model = p.model_version ? `model v${p.model_version}` : "no model yet";
  cards("#pred-cards", [
    ["Predictor", p.predictor, model],
    ["Model age", p.model_age_seconds === null ? "—" : fmtSeconds(p.model_age_seconds),
      p.model_source ? `(${p.model_source})` : ""],
    ["Trained on", p.trained_on, "finished jobs"],
    ["Finished jobs seen", p.finished_jobs_seen,
      `(${p.replayed_jobs} from the history${p.replaying ? ", replaying" : ""})`],
    ["Queued", p.queued, "job starts/ends not learnt yet"],
  ]);
  const r = p.recent;
  const acc = [
    ["Jobs", r.jobs, "finished jobs in the window (those with no estimate at all are left out)"],
    ["Mean absolute error", r.mae_seconds === null ? "—" : fmtSeconds(r.mae_seconds), "mean |predicted − actual|"],
    ["Accuracy (Tsafrir)", fmtNum(r.accuracy, 3), "mean of min(p, r) / max(p, r); 1 is perfect"],
    ["Under-predicted", r.underprediction_rate === null ? "—" : `${(100 * r.underprediction_rate).toFixed(1)} %`,
      "jobs that ran longer than predicted"],
  ];
  $("#pred-accuracy tbody").replaceChildren(...acc.map(([k, v, m]) =>
    el("tr", { "data-measure": k }, el("td", {}, k), el("td", {}, v), el("td", {}, m))));
  const details = Object.entries(p.details).map(([k, v]) =>
    el("tr", {}, el("td", {}, k), el("td", {}, Number.isInteger(v) ? v : fmtNum(v, 4))));
  $("#pred-details tbody").replaceChildren(...rowsOrEmpty(details, 2, "none"));
  $("#pred-error").textContent = p.last_error ? `last error: ${p.last_error}` : "";
  await Promise.all([renderRunningPredictions(), renderFinishedPredictions()]);
}

const FINISHED_DRAWN = 200;

// A log-log scatter: x the predicted run time, y the actual one, the diagonal exact.
async function renderFinishedPredictions() {
  const { jobs } = await api(`/v1/predict/finished?limit=${FINISHED_DRAWN}`);
  const chart = $("#pred-finished");
  const W = 420, H = 320, L = 52, B = 34, T = 8, R = 8;
  const seconds = jobs.flatMap((j) => [j.predicted_seconds, j.actual_seconds]).map((s) => Math.max(s, 1));
  const top = Math.log10(Math.max(60, ...seconds)) + 0.1;
  const x = (s) => L + ((W - L - R) * Math.log10(Math.max(s, 1))) / top;
  const y = (s) => H - B - ((H - B - T) * Math.log10(Math.max(s, 1))) / top;
  const parts = [svg("line", { x1: x(1), y1: y(1), x2: x(10 ** top), y2: y(10 ** top), class: "diag" })];
  for (let e = 0; e <= Math.floor(top); e++) {
    const label = fmtSeconds(10 ** e);
    const tx = svg("text", { x: x(10 ** e), y: H - B + 16, "text-anchor": "middle", class: "axis" });
    tx.textContent = label;
    const ty = svg("text", { x: L - 6, y: y(10 ** e) + 4, "text-anchor": "end", class: "axis" });
    ty.textContent = label;
    parts.push(tx, ty);
  }
  const xl = svg("text", { x: (L + W) / 2, y: H - 4, "text-anchor": "middle", class: "axis" });
  xl.textContent = "predicted at start";
  const yl = svg("text", { x: 12, y: (H - B) / 2, transform: `rotate(-90 12 ${(H - B) / 2})`, "text-anchor": "middle", class: "axis" });
  yl.textContent = "actual";
  parts.push(xl, yl);
  for (const j of jobs) {
    const under = j.actual_seconds > j.predicted_seconds;
    const dot = svg("circle", { cx: x(j.predicted_seconds), cy: y(j.actual_seconds), r: 3,
      class: under ? "dot-under" : "dot", "data-job": j.job_id });
    const tip = svg("title", {});
    tip.textContent = `${j.job_id} (${j.user}, ${j.partition}): predicted ${fmtSeconds(j.predicted_seconds)}, ` +
      `ran ${fmtSeconds(j.actual_seconds)}`;
    dot.append(tip);
    parts.push(dot);
  }
  chart.replaceChildren(...parts);
  const under = jobs.filter((j) => j.actual_seconds > j.predicted_seconds).length;
  $("#pred-finished-info").textContent = jobs.length
    ? `${jobs.length} jobs, ${under} ran longer than predicted` : "no finished job yet";
}

async function renderRunningPredictions() {
  // One page of running jobs, then each one's prediction (only GET /v1/jobs/{id} has it).
  const q = await api(`/v1/observe/queue?state=RUNNING&sort=id&limit=${RUNNING_DRAWN}`);
  const jobs = await Promise.all(q.jobs.map((j) => api(`/v1/jobs/${encodeURIComponent(j.display_id)}`)));
  $("#pred-running-info").textContent = q.total > jobs.length
    ? `(the ${jobs.length} oldest of ${q.total})` : `(${q.total})`;
  drawRunning(jobs, Date.now() / 1000);
}

function drawRunning(jobs, now) {
  const chart = $("#pred-chart");
  // drawn in CSS pixels (viewBox = the element's width) so that labels keep their size
  const w = Math.max(300, chart.clientWidth || 600), left = 90, right = 130, rowH = 20;
  const h = Math.max(40, jobs.length * rowH + 8);
  chart.setAttribute("viewBox", `0 0 ${w} ${h}`);
  chart.style.height = `${h}px`;
  const parts = [];
  if (!jobs.length) {
    const t = svg("text", { x: 8, y: 24, class: "chart-empty" });
    t.textContent = "no running jobs";
    chart.replaceChildren(t);
    return;
  }
  const rows = jobs.map((j) => ({ j, elapsed: Math.max(0, now - (j.start_time || now)),
    predicted: j.predicted_runtime_seconds }));
  const span = Math.max(1, ...rows.map((r) => Math.max(r.elapsed, r.predicted || 0)));
  const x = (s) => left + (s / span) * (w - left - right);
  rows.forEach((r, i) => {
    const y = 4 + i * rowH;
    const label = svg("text", { x: 4, y: y + 13, class: "chart-label" });
    label.textContent = r.j.display_id;
    const g = svg("g", { "data-job": r.j.display_id });
    g.append(label);
    if (r.predicted !== null && r.predicted !== undefined) {
      g.append(svg("rect", { x: left, y: y + 2, width: Math.max(1, x(r.predicted) - left), height: 14, class: "pred-bar" }));
    }
    const over = r.predicted !== null && r.predicted !== undefined && r.elapsed > r.predicted;
    g.append(svg("rect", { x: left, y: y + 6, width: Math.max(1, x(r.elapsed) - left), height: 6,
      class: over ? "over-bar" : "elapsed-bar" }));
    const text = svg("text", { x: w - right + 6, y: y + 13, class: "chart-label" });
    text.textContent = `${fmtSeconds(r.elapsed)} / ${r.predicted === null || r.predicted === undefined ? "?" : fmtSeconds(r.predicted)}`;
    g.append(text);
    const tip = svg("title", {});
    tip.textContent = `${r.j.display_id} (${r.j.user}): running ${fmtSeconds(r.elapsed)}, predicted ` +
      `${fmtSeconds(r.predicted)}, time limit ${r.j.time_limit_seconds ? fmtSeconds(r.j.time_limit_seconds) : "none"}`;
    g.append(tip);
    parts.push(g);
  });
  chart.replaceChildren(...parts);
}

// -- traffic: who talks to whom (the harmonic graph) ------------------------------------
// Drawn as plain SVG. The layout is deterministic (no randomness; it depends on which
// nodes and edges there are, not on their rates): a fixed number of force-directed
// steps from a circle in (user, id) order, in a unit square the drawing then scales to
// the panel. It is kept while the same nodes and edges come back, so a refresh moves
// nothing; only the rates change.
const TRAFFIC_EDGES = 200;
const LAYOUT_STEPS = 200;
const USER_COLOURS = ["#2f6fd6", "#3fa66a", "#e0a526", "#8a63c9", "#d64545", "#1b9aaa",
  "#c2549d", "#6b7a8f"];

function fmtRate(v) {  // decimal units, as network rates are written (and hal harmonic graph)
  for (const unit of ["B/s", "kB/s", "MB/s", "GB/s"]) {
    if (v < 999.5) return unit === "B/s" ? `${v.toFixed(0)} ${unit}` : `${v.toFixed(1)} ${unit}`;
    v /= 1000;
  }
  return `${v.toFixed(1)} TB/s`;
}
// by the user's place among the cluster's users, so a filter does not change it
function userColour(users, user) {
  const i = users.indexOf(user);
  return i < 0 ? "#aab3bf" : USER_COLOURS[i % USER_COLOURS.length];
}
const byId = (a, b) => a.localeCompare(b, undefined, { numeric: true });

// Each connected part (a service and its clients, a pair) is laid out on its own, then
// the parts are packed in rows, biggest first, each in a square cell whose side grows
// with the root of its node count: no part is flung to a corner by the others.
function layoutGraph(nodes, edges, aspect) {
  const order = [...nodes].sort((a, b) => byId(a.user, b.user) || byId(a.id, b.id));
  const index = new Map(order.map((v, i) => [v.id, i]));
  const parent = order.map((_, i) => i);
  const root = (i) => (parent[i] === i ? i : (parent[i] = root(parent[i])));
  const links = edges.filter((e) => e.a !== e.b).map((e) => [index.get(e.a), index.get(e.b)]);
  for (const [i, j] of links) parent[root(i)] = root(j);
  const parts = new Map();
  order.forEach((_, i) => { const r = root(i); if (!parts.has(r)) parts.set(r, []); parts.get(r).push(i); });
  const sorted = [...parts.values()].sort((a, b) => b.length - a.length || a[0] - b[0]);
  const local = order.map(() => ({ x: 0.5, y: 0.5 }));
  for (const part of sorted) layoutPart(part, links, local);
  // shelf packing into a box about ``aspect`` times as wide as it is high
  const area = sorted.reduce((s, p) => s + p.length, 0);
  const rowWidth = Math.max(Math.sqrt(sorted[0].length), Math.sqrt(area * aspect));
  const pos = new Map();
  let x = 0, y = 0, rowHigh = 0, wide = 0;
  for (const part of sorted) {
    const side = Math.sqrt(part.length);
    if (x > 0 && x + side > rowWidth + 1e-9) { x = 0; y += rowHigh; rowHigh = 0; }
    for (const i of part) {
      pos.set(order[i].id, { x: x + side * (0.15 + 0.7 * local[i].x), y: y + side * (0.15 + 0.7 * local[i].y) });
    }
    x += side; wide = Math.max(wide, x); rowHigh = Math.max(rowHigh, side);
  }
  for (const p of pos.values()) { p.x /= wide; p.y /= y + rowHigh; }
  return pos;
}

// Fruchterman and Reingold in the unit square from a circle, then fitted to it (flat
// arrays: 400 nodes in one part take about 0.25 s, only when the graph changes shape).
function layoutPart(part, links, pts) {
  const n = part.length;
  if (n === 1) return;
  const x = new Float64Array(n), y = new Float64Array(n), mx = new Float64Array(n), my = new Float64Array(n);
  for (let a = 0; a < n; a++) {
    x[a] = 0.5 + 0.4 * Math.cos((2 * Math.PI * a) / n); y[a] = 0.5 + 0.4 * Math.sin((2 * Math.PI * a) / n);
  }
  const at = new Map(part.map((i, a) => [i, a]));
  const springs = links.filter(([i]) => at.has(i)).map(([i, j]) => [at.get(i), at.get(j)]);
  const k = 0.8 / Math.sqrt(n), k2 = k * k;  // the distance nodes settle at
  for (let step = 0; step < LAYOUT_STEPS; step++) {
    const heat = 0.1 * (1 - step / LAYOUT_STEPS);
    for (let a = 0; a < n; a++) { mx[a] = (0.5 - x[a]) * k; my[a] = (0.5 - y[a]) * k; }  // gravity
    for (let a = 0; a < n; a++) {
      for (let b = a + 1; b < n; b++) {
        const dx = x[a] - x[b], dy = y[a] - y[b], f = k2 / Math.max(1e-6, dx * dx + dy * dy);
        mx[a] += dx * f; my[a] += dy * f; mx[b] -= dx * f; my[b] -= dy * f;
      }
    }
    for (const [a, b] of springs) {
      const dx = x[a] - x[b], dy = y[a] - y[b], f = Math.sqrt(dx * dx + dy * dy) / k;
      mx[a] -= dx * f; my[a] -= dy * f; mx[b] += dx * f; my[b] += dy * f;
    }
    for (let a = 0; a < n; a++) {
      const len = Math.sqrt(mx[a] * mx[a] + my[a] * my[a]) || 1, s = Math.min(len, heat) / len;
      x[a] += mx[a] * s; y[a] += my[a] * s;
    }
  }
  const x0 = Math.min(...x), y0 = Math.min(...y);
  const w = Math.max(...x) - x0, h = Math.max(...y) - y0, span = Math.max(w, h, 1e-3);
  part.forEach((i, a) => {  // fitted, keeping its shape, centred
    pts[i] = { x: (x[a] - x0 + (span - w) / 2) / span, y: (y[a] - y0 + (span - h) / 2) / span };
  });
}

async function renderTraffic() {
  await renderDissonance();
  const p = new URLSearchParams({ view: $("#t-view").value, limit: TRAFFIC_EDGES });
  if ($("#t-user").value) p.set("user", $("#t-user").value);
  if ($("#t-partition").value) p.set("partition", $("#t-partition").value);
  const g = await api(`/v1/observe/traffic?${p}`);
  fillSelect($("#t-partition"), g.partitions, "all partitions");
  fillSelect($("#t-user"), g.users, "all users");
  const what = g.view === "jobs" ? "running jobs" : "workloads";
  $("#traffic-info").textContent = g.edges.length
    ? `${g.nodes.length} ${what}, ${g.more ? "the " : ""}${g.edges.length} ${g.more ? "strongest " : ""}` +
      `edge${g.edges.length === 1 ? "" : "s"}; half-life ${fmtSeconds(g.half_life_seconds)}` : "";
  const empty = !g.edges.length;
  $("#traffic-empty").hidden = !empty;
  $("#traffic-graph").style.display = empty ? "none" : "";
  if (empty) {
    $("#traffic-empty").replaceChildren(...trafficEmpty(g));
    $("#traffic-graph").replaceChildren();
    $("#traffic-legend").replaceChildren();
  } else {
    drawTraffic(g);
  }
  const byNode = new Map(g.nodes.map((v) => [v.id, v]));
  const rows = g.edges.map((e) => el("tr", { "data-edge": `${e.a} ${e.b}` },
    el("td", {}, nodeName(byNode.get(e.a))), el("td", {}, byNode.get(e.a).user),
    el("td", {}, nodeName(byNode.get(e.b))), el("td", {}, byNode.get(e.b).user),
    el("td", { class: "num" }, fmtRate(e.bytes_per_second)), el("td", {}, fmtTime(e.since))));
  $("#traffic-edges tbody").replaceChildren(...rowsOrEmpty(rows, 6, "no edges"));
}

// The interference model as a matrix: rows the class slowed, columns its neighbours'
// class, each cell the learned slowdown and the outcomes behind it.
async function renderDissonance() {
  let d;
  try {
    d = await api("/v1/harmonic/dissonance");
  } catch (err) {
    if (err.message === "401") throw err;
    $("#dissonance-empty").hidden = false;
    $("#dissonance-empty").replaceChildren(el("p", {}, err.status === 503
      ? "This server keeps no interference model." : `The model is not available: ${err.message}`));
    $("#dissonance-matrix thead").replaceChildren();
    $("#dissonance-matrix tbody").replaceChildren();
    $("#dissonance-info").textContent = "";
    return;
  }
  $("#dissonance-empty").hidden = true;
  $("#dissonance-info").textContent = `${d.outcomes_learnt} outcome${d.outcomes_learnt === 1 ? "" : "s"} ` +
    `learnt since the server started; pairs never seen: ${d.prior.toFixed(2)}×`;
  const cells = new Map(d.cells.map((c) => [`${c.victim} ${c.aggressor}`, c]));
  $("#dissonance-matrix thead").replaceChildren(el("tr", {}, el("th", {}, "slowed ↓ beside →"),
    ...d.classes.map((a) => el("th", {}, a))));
  $("#dissonance-matrix tbody").replaceChildren(...d.classes.map((v) => el("tr", {}, el("th", {}, v),
    ...d.classes.map((a) => {
      const c = cells.get(`${v} ${a}`);
      if (!c) return el("td", {}, "—");
      const shade = c.slowdown >= 1.25 ? "clash" : c.slowdown >= 1.1 ? "mild" : "";
      return el("td", { class: shade, "data-cell": `${v} ${a}`, "data-slowdown": c.slowdown,
        "data-observations": c.observations, title: `${v} beside ${a}: ${c.slowdown.toFixed(3)}x, ` +
        `${c.observations} outcome(s)` },
      `${c.slowdown.toFixed(2)}×`, el("small", {}, ` (${c.observations})`));
    }))));
}

function nodeName(v) { return v.name ? `${v.label} ${v.name}` : v.label; }

function trafficEmpty(g) {
  const filtered = [$("#t-user").value && `user ${$("#t-user").value}`,
    $("#t-partition").value && `partition ${$("#t-partition").value}`].filter(Boolean);
  if (filtered.length) {
    return [el("p", {}, `No edge has ${g.view === "jobs" ? "jobs" : "workloads"} of ` +
      `${filtered.join(" in ")} at an end. Choose all users and all partitions to see every edge.`)];
  }
  const code = (t) => el("code", {}, t);
  return [
    el("h3", {}, g.view === "jobs" ? "No running jobs talk to each other yet" : "No workloads have talked yet"),
    el("p", {}, "An edge appears once two jobs exchange TCP traffic (loopback included) and the " +
      "agents of their nodes have reported it: each agent measures its jobs' connections every ",
      code("--traffic-interval"), " seconds (", code("hal agent"), ", 10 by default; 0 turns it off). " +
      "Traffic HAL cannot see (RDMA, hosts outside the cluster) makes no edge."),
    el("p", {}, "Edges between running jobs go when a job ends; the workloads view keeps them " +
      `(decaying by half every ${fmtSeconds(g.half_life_seconds)}). The same graph: `,
      code("hal harmonic graph"), "; docs/harmonic.md."),
  ];
}

function drawTraffic(g) {
  const chart = $("#traffic-graph");
  const w = Math.max(300, chart.clientWidth || 600), h = Math.max(320, Math.min(720, 160 + 24 * g.nodes.length));
  chart.setAttribute("viewBox", `0 0 ${w} ${h}`);
  chart.style.height = `${h}px`;
  const keyOf = [g.view, w, ...g.nodes.map((v) => v.id).sort(), "|",
    ...g.edges.map((e) => `${e.a} ${e.b}`).sort()].join("\n");
  if (!state.trafficLayout || state.trafficLayout.key !== keyOf) {
    const aspect = (w - 140) / (h - 80);
    state.trafficLayout = { key: keyOf, pos: layoutGraph(g.nodes, g.edges, aspect) };
  }
  const pos = state.trafficLayout.pos;
  const M = 70;  // room for the labels around the edge of the drawing
  const at = (id) => { const p = pos.get(id); return { x: M + p.x * (w - 2 * M), y: 40 + p.y * (h - 80) }; };
  const top = Math.max(1, ...g.edges.map((e) => e.bytes_per_second));
  const text = (attrs, content) => { const t = svg("text", attrs); t.textContent = content; return t; };
  const byNode = new Map(g.nodes.map((v) => [v.id, v]));
  const lines = [], labels = [], dots = [];
  for (const e of g.edges) {
    const a = at(e.a), b = at(e.b), width = 1.5 + 6.5 * Math.sqrt(e.bytes_per_second / top);
    const group = svg("g", { class: "edge", "data-edge": `${e.a} ${e.b}` });
    let mx = (a.x + b.x) / 2, my = (a.y + b.y) / 2;
    if (e.a === e.b) {  // jobs of one workload talking among themselves: a loop above it
      group.append(svg("circle", { cx: a.x, cy: a.y - 16, r: 16, "stroke-width": width, fill: "none" }));
      my = a.y - 38;
    } else {
      group.append(svg("line", { x1: a.x, y1: a.y, x2: b.x, y2: b.y, "stroke-width": width }));
    }
    const tip = svg("title", {});
    tip.textContent = `${nodeName(byNode.get(e.a))} ↔ ${nodeName(byNode.get(e.b))}: ` +
      `${fmtRate(e.bytes_per_second)} since ${fmtTime(e.since)}`;
    group.append(tip);
    lines.push(group);
    labels.push(text({ x: mx, y: my + 4, "text-anchor": "middle", class: "edge-label",
      "data-edge": `${e.a} ${e.b}` }, fmtRate(e.bytes_per_second)));
  }
  for (const v of g.nodes) {
    const p = at(v.id);
    const node = svg("g", { class: "graph-node", "data-node": v.id, "data-user": v.user });
    node.append(svg("circle", { cx: p.x, cy: p.y, r: 9, fill: userColour(g.users, v.user) }));
    node.append(text({ x: p.x, y: p.y + 24, "text-anchor": "middle", class: "node-label" }, nodeName(v)));
    const tip = svg("title", {});
    tip.textContent = v.identity
      ? `job ${v.label} (${v.name}) of ${v.user}, ${v.state} in partition ${v.partition}` +
        `${v.nodes.length ? " on " + v.nodes.join(",") : ""}\nworkload ${v.identity}`
      : v.user ? `workload ${v.label} of ${v.user}` : `job ${v.label} (ended)`;
    node.append(tip);
    dots.push(node);
  }
  chart.replaceChildren(...lines, ...dots, ...labels);  // rates on top, so they stay readable
  for (const t of labels) {  // on a card of their own, over the lines they cross
    const b = t.getBBox();
    t.before(svg("rect", { x: b.x - 3, y: b.y - 1, width: b.width + 6, height: b.height + 2,
      rx: 3, class: "edge-label-card" }));
  }
  const users = [...new Set(g.nodes.map((v) => v.user).filter(Boolean))].sort(byId);
  $("#traffic-legend").replaceChildren(...users.map((u) => {
    const s = el("span", { "data-user": u }, u);
    s.style.setProperty("--colour", userColour(g.users, u));
    return s;
  }));
}

// -- data plane -----------------------------------------------------------------------
const STAGE_MEANING = {
  staged: "every input key is in the node's leaf cache",
  partial: "some input keys are in no cache, so there was nothing to pull",
  failed: "the leaf cache or the control plane did not answer; tried again after 30 s",
  no_cache: "the node reads through no cache instance ([data.node_cache])",
};

async function renderData() {
  let d;
  try {
    d = await api("/v1/data/status");
  } catch (err) {
    if (err.code !== "not_configured") throw err;
    $("#data-off").hidden = false; $("#data-on").hidden = true;
    $("#data-off-reason").textContent = `The server says: ${err.message}.`;
    return;
  }
  $("#data-off").hidden = true; $("#data-on").hidden = false;
  cards("#data-cards", [
    ["Data view", d.stale ? "stale" : "fresh", `${fmtSeconds(d.view_age_seconds)} old`],
    ["Cache instances", d.instances, ""],
    ["Keys tracked", d.keys, ""],
    ["Nodes with a cache", d.nodes_with_cache, ""],
    ["Bytes staged", fmtBytes(d.bytes_staged), ""],
    ["Staging queued", d.staging_queued, ""],
    ...cacheTotals(d.caches),
  ]);
  $("#data-cards [data-card='Data view']").classList.toggle("bad", d.stale);
  renderCacheNodes(d.caches);
  const results = Object.entries(d.prestage).sort((a, b) => a[0].localeCompare(b[0]));
  $("#data-prestage tbody").replaceChildren(...results.map(([k, n]) =>
    el("tr", { "data-result": k }, el("td", {}, k), el("td", {}, n), el("td", {}, STAGE_MEANING[k] || ""))));
  const fields = [["Control plane", d.cache_url], ["View refreshes", d.refreshes],
    ["Last error", d.last_error || "—"]];
  $("#data-fields").replaceChildren(...fields.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}

function fmtRatio(r) { return r === null || r === undefined ? "—" : `${(100 * r).toFixed(1)} %`; }

function cacheTotals(caches) {
  const sum = (f) => caches.reduce((n, c) => n + f(c), 0);
  const hits = sum((c) => c.hits), misses = sum((c) => c.misses);
  const moved = sum((c) => Object.values(c.bytes_moved).reduce((a, b) => a + b, 0));
  return [
    ["Cache hit ratio", fmtRatio(hits + misses ? hits / (hits + misses) : null), `(${hits} hits, ${misses} misses)`],
    ["Bytes moved", fmtBytes(moved), "between caches"],
  ];
}

function renderCacheNodes(caches) {
  const num = (v) => el("td", { class: "num" }, v);
  const rows = caches.map((c) => el("tr", { "data-instance": c.instance },
    el("td", {}, c.instance), el("td", {}, c.tier || "—"), el("td", {}, c.status),
    num(c.hits), num(c.misses), num(fmtRatio(c.hit_ratio)), num(fmtBytes(c.bytes_served)),
    num(fmtBytes(c.bytes_moved.parent || 0)), num(fmtBytes(c.bytes_moved.peer || 0)), num(c.evictions)));
  $("#data-caches tbody").replaceChildren(...rowsOrEmpty(rows, 10,
    "no cache node has reported yet (HAL cache nodes send their counters with each heartbeat)"));
}

// -- cloud: the node groups and the nodes made for waiting jobs --------------------------
async function renderCloud() {
  const c = await api("/v1/cloud");
  $("#cloud-off").hidden = c.groups.length > 0;
  $("#cloud-on").hidden = c.groups.length === 0;
  if (!c.groups.length) return;
  const spend = await api("/v1/cloud/costs");  // this month's, and each cloud_budget
  const now = Date.now() / 1000;
  const nodes = c.groups.flatMap((g) => g.instances.map((i) => ({ ...i, group: g })));
  const count = (st) => nodes.filter((n) => n.state === st).length;
  const live = nodes.filter((n) => n.state !== "stopping");
  const cost = live.reduce((sum, n) => sum + n.group.price_per_hour, 0);
  cards("#cloud-cards", [
    ["Cloud nodes", live.length, `of ${c.groups.reduce((n, g) => n + g.nodes.length, 0)} names`],
    ["Booting", count("booting"), ""],
    ["Running a job", count("joined"), ""],
    ["Idle", count("idle"), ""],
    ["Cost", `$${cost.toFixed(2)}`, "an hour"],
    ["Spent", fmtCost(spend.total), "this month"],
  ]);
  const num = (v) => el("td", { class: "num" }, v);
  $("#cloud-budgets").hidden = spend.budgets.length === 0;
  $("#cloud-budgets tbody").replaceChildren(...spend.budgets.map((b) => {
    const tr = el("tr", { "data-budget": b.holder }, el("td", {}, b.holder),
      num(fmtCost(b.limit)), el("td", {}, b.period), num(fmtCost(b.spent)),
      num(fmtCost(b.committed)), num(b.waiting));
    tr.classList.toggle("bad", b.spent + b.committed >= b.limit);
    return tr;
  }));
  $("#cloud-groups tbody").replaceChildren(...c.groups.map((g) => {
    const status = g.retiring ? "taken out of [cloud]: its nodes go as their jobs end"
      : g.resting_until ? `resting ${fmtSeconds(g.resting_until - now)}: ${g.last_error}`
        : g.last_error ? `last error: ${g.last_error}` : "ready";
    const tr = el("tr", { "data-group": g.name }, el("td", {}, g.name), el("td", {}, g.provider),
      num(`${g.instances.length} / ${g.nodes.length}`), num(g.cpus), num(fmtBytes(g.memory_bytes)),
      num(g.gpus), num(g.price_per_hour.toFixed(3)), num(g.created), num(g.removed),
      num(g.boot_failures), el("td", {}, status));
    tr.classList.toggle("bad", Boolean(g.resting_until || g.last_error));
    return tr;
  }));
  const rows = nodes.sort((a, b) => a.node.localeCompare(b.node)).map((n) =>
    el("tr", { "data-node": n.node, "data-state": n.state }, el("td", {}, n.node),
      el("td", {}, n.group.name), el("td", {}, n.state), el("td", {}, fmtSeconds(now - n.created_at)),
      el("td", {}, n.idle_since ? fmtSeconds(now - n.idle_since) : "—"), el("td", {}, n.instance)));
  $("#cloud-nodes tbody").replaceChildren(...rowsOrEmpty(rows, 6,
    "no node made: the groups make nodes for jobs that wait (pending_seconds)"));
}

// -- software: the artifact registry ----------------------------------------------------
async function renderSoftware() {
  const list = (await api("/v1/artifacts")).artifacts;
  const sizes = new Map(list.map((a) => [a.sha256, a.size]));
  cards("#software-cards", [
    ["Artifacts", new Set(list.map((a) => a.name)).size, "names"],
    ["Versions", list.length, ""],
    ["Stored", fmtBytes([...sizes.values()].reduce((a, b) => a + b, 0)), "in the state store"],
  ]);
  const rows = list.map((a) => el("tr", { "data-artifact": `${a.name}@${a.version}` },
    el("td", {}, a.name), el("td", {}, a.version), el("td", {}, a.kind),
    el("td", { class: "num" }, fmtBytes(a.size)), el("td", {}, fmtTime(a.created)),
    el("td", {}, a.owner), el("td", { title: a.sha256 }, el("code", {}, a.sha256.slice(0, 12)))));
  $("#software-artifacts tbody").replaceChildren(...rowsOrEmpty(rows, 7,
    "nothing published yet: hal artifact push NAME@VERSION FILE (docs/user/artifacts.md)"));
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
  $("#traffic-filters").addEventListener("change", () => refresh());
  $("#prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - PAGE); refresh(); });
  $("#next").addEventListener("click", () => { state.offset += PAGE; refresh(); });
  $("#close-detail").addEventListener("click", () => { state.detail = null; $("#job-detail").hidden = true; });
  if (!state.token) { showLogin(""); return; }
  selectTab((location.hash || "#overview").slice(1));
}

start();

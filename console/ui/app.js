// The console: one page per hash (#cluster, #topics, #groups, #mirrors),
// each drawn from its JSON endpoint and redrawn every two seconds. Every
// value goes in with textContent: names come from clients.
"use strict";

const POLL_MS = 2000;
const pages = { cluster: drawCluster, topics: drawTopics, groups: drawGroups, mirrors: drawMirrors };
let timer = null;
let generation = 0; // of the polling loop: a page change starts a new one

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

const unknown = (n) => n === undefined || n === null || n < 0;
// Unknown reads "-", as in tandem's tables, never 0.
const num = (n) => (unknown(n) ? "-" : n.toLocaleString("en-US"));

function duration(ms) {
  if (unknown(ms)) return "-";
  if (ms < 1000) return ms + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
  if (ms < 3600000) return (ms / 60000).toFixed(1) + " min";
  return (ms / 3600000).toFixed(1) + " h";
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

const time = (ms) => (ms ? new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "-");

// lagText is a partition's lag as tandem mirrors --describe prints it:
// "-" while unknown, and "≥ N" when the source end behind it is stale
// (the source unreachable or silent): a lower bound, never a made-up 0.
function lagText(v, stale, fmt) {
  if (unknown(v)) return "-";
  return (stale ? "≥ " : "") + fmt(v);
}

// ageText is how long ago the source end behind a partition's lag was
// learned, as SOURCE-AGE is.
const ageText = (at) => (at > 0 ? duration(Math.max(0, Date.now() - at)) : "-");

function stateBadge(s) {
  let cls = "badge";
  if (s === "MIRRORING" || s === "Stable") cls += " ok";
  else if (s === "FAILED" || s === "UNKNOWN") cls += " bad";
  else if (s) cls += " warn";
  return el("span", { class: cls, "data-state": s }, s || "unknown");
}

// partBadge is a mirror partition's state as a badge that agrees with its
// mirror: green only while the partition is copied now and held safely
// here. A MIRRORING partition whose source is unreachable, silent or
// leaderless, or whose copy here has no leader or too few in-sync
// replicas, is red, saying which.
function partBadge(p, m) {
  let problem = "";
  if (p.destinationIssue) problem = "destination degraded";
  else if ((p.state === "MIRRORING" || p.state === "FAILED") && m.state === "FAILED") problem = "source unreachable";
  else if (p.state === "MIRRORING" && p.reason) problem = "not copying";
  else if (p.state === "MIRRORING" && p.sourceStale) problem = "source silent";
  if (!problem) return stateBadge(p.state);
  return el("span", { class: "badge bad", "data-state": p.state, "data-problem": problem }, p.state + " · " + problem);
}

// rpoText is what a failover now would give up: exact while every source
// end offset is current, "at least" with their age when one is not.
function rpoText(r) {
  if (r.known) return [duration(r.ms), num(r.records) + " records"];
  const atLeast = (s) => (s === "-" ? s : "at least " + s);
  const seen = r.asOf ? " · source end last learned " + duration(Date.now() - r.asOf) + " ago" : "";
  return [atLeast(duration(r.ms)), atLeast(num(r.records)) + " records" + seen];
}

function table(headers, rows, numeric) {
  const head = el("tr", {}, ...headers.map((h, i) => el("th", numeric && numeric[i] ? { class: "num" } : {}, h)));
  return el("table", {}, el("thead", {}, head), el("tbody", {}, ...rows));
}

function cells(values, numeric, attrs) {
  return el("tr", attrs || {}, ...values.map((v, i) => el("td", numeric && numeric[i] ? { class: "num" } : {}, v)));
}

function tile(label, value) {
  return el("div", { class: "tile" }, el("div", { class: "label" }, label), el("div", { class: "value" }, value));
}

function drawCluster(c) {
  const out = [el("h1", {}, "Cluster ", el("span", { class: "muted" }, c.clusterId))];
  for (const a of c.alarms) out.push(el("div", { class: "alarm", "data-alarm": "" }, a));
  out.push(el("div", { class: "tiles" },
    tile("This broker", c.nodeId), tile("Controller", c.controllerId), tile("Brokers", c.brokers.length),
    tile("Topics", c.topics), tile("Partitions", c.partitions), tile("Offline partitions", c.offlinePartitions),
    tile("Under-replicated", c.underReplicatedPartitions), tile("Partitions here", c.localPartitions),
    tile("Disk used here", bytes(c.diskUsageBytes)), tile("Disk free here", c.diskFreeBytes ? bytes(c.diskFreeBytes) : "unknown"),
    tile("Mirrors", c.mirrors)));
  const rows = c.brokers.map((b) => cells([b.id, b.host + ":" + b.port, b.rack || "", b.id === c.controllerId ? "controller" : ""]));
  out.push(el("div", { class: "card" }, el("h2", {}, "Brokers"), table(["ID", "Address", "Rack", "Role"], rows)));
  return out;
}

function drawTopics(ts) {
  const out = [el("h1", {}, "Topics")];
  if (!ts.length) out.push(el("p", { class: "muted" }, "No topics."));
  for (const t of ts) {
    const rows = t.partitions.map((p) => cells([p.partition, p.leader < 0 ? "none" : p.leader, p.leaderEpoch,
      p.replicas.join(", "), p.isr.join(", "), num(p.logStart), num(p.highWatermark), num(p.logEnd)],
      [1, 1, 1, 0, 0, 1, 1, 1]));
    out.push(el("div", { class: "card", "data-topic": t.name },
      el("div", { class: "card-head" }, el("h2", {}, t.name),
        t.internal ? el("span", { class: "badge" }, "internal") : null,
        t.mirror ? el("span", { class: "badge warn" }, "mirrored by " + t.mirror + " (read-only)") : null,
        el("span", { class: "kv" }, "ID ", el("b", {}, t.id))),
      table(["Partition", "Leader", "Epoch", "Replicas", "ISR", "Log start", "High watermark", "Log end"], rows,
        [1, 1, 1, 0, 0, 1, 1, 1])));
  }
  return out;
}

function drawGroups(gs) {
  const out = [el("h1", {}, "Consumer groups")];
  if (!gs.length) out.push(el("p", { class: "muted" }, "No consumer groups coordinated on this broker."));
  for (const g of gs) {
    const members = g.members.map((m) => cells([m.memberId, m.instanceId, m.clientId, m.clientHost]));
    const parts = g.partitions.map((p) => cells([p.topic, p.partition, num(p.committed), num(p.end), num(p.lag)], [0, 1, 1, 1, 1]));
    out.push(el("div", { class: "card", "data-group": g.name },
      el("div", { class: "card-head" }, el("h2", {}, g.name), stateBadge(g.state),
        el("span", { class: "kv" }, "protocol ", el("b", {}, (g.protocolType || "-") + (g.protocol ? " / " + g.protocol : "")),
          " · generation ", el("b", {}, g.generation), " · lag ", el("b", {}, num(g.lag)))),
      el("h3", {}, "Members"), members.length ? table(["Member", "Instance", "Client ID", "Host"], members) : el("p", { class: "muted" }, "None."),
      el("h3", {}, "Lag per partition"),
      parts.length ? table(["Topic", "Partition", "Committed", "End", "Lag"], parts, [0, 1, 1, 1, 1]) : el("p", { class: "muted" }, "No committed offsets.")));
  }
  return out;
}

// chart draws one series of the lag history as an inline SVG line over
// the last hour; unknown samples leave a gap.
// niceTop is the chart's upper bound: 1, 2 or 5 times a power of ten, at
// least min, so that the axis reads well.
function niceTop(v, min) {
  v = Math.max(v, min);
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

// chart draws one series of the lag history as an inline SVG line over
// the last hour; unknown samples leave a gap.
function chart(title, history, field, cls, min, fmt) {
  const W = 600, H = 120, L = 52, B = 16, hour = 3600000;
  const now = Date.now();
  const top = niceTop(Math.max(0, ...history.map((p) => p[field])), min);
  const x = (t) => L + ((t - (now - hour)) / hour) * (W - L - 4);
  const y = (v) => 6 + (1 - v / top) * (H - B - 10);
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", "aria-label": title });
  for (const v of [0, top / 2, top]) {
    s.append(svg("line", { class: "grid", x1: L, x2: W, y1: y(v), y2: y(v) }));
    const t = svg("text", { x: L - 6, y: y(v) + 3, "text-anchor": "end" });
    t.textContent = fmt(v);
    s.append(t);
  }
  for (const [label, at, anchor] of [["-60 min", now - hour, "start"], ["-30 min", now - hour / 2, "middle"], ["now", now, "end"]]) {
    const t = svg("text", { x: x(at), y: H - 2, "text-anchor": anchor });
    t.textContent = label;
    s.append(t);
  }
  let run = [];
  const flush = () => {
    if (run.length === 1) run.unshift([run[0][0] - 3, run[0][1]]); // a lone sample shows as a dash
    if (run.length) s.append(svg("polyline", { class: cls, fill: "none", "stroke-width": 2, points: run.map((p) => p.join(",")).join(" ") }));
    run = [];
  };
  for (const p of history) {
    if (p.t < now - hour) continue;
    if (p[field] < 0) { flush(); continue; }
    run.push([x(p.t).toFixed(1), y(p[field]).toFixed(1)]);
  }
  flush();
  return el("div", { class: "chart" }, el("div", { class: "title" }, title), s);
}

function drawMirrors(ms) {
  const out = [el("h1", {}, "Mirrors")];
  if (!ms.length) out.push(el("p", { class: "muted" }, "No mirrors. Create one with tandem mirrors --create."));
  for (const m of ms) {
    const parts = m.partitions.map((p) => el("tr", { "data-partition": p.topic + "/" + p.partition, "data-state": p.state, "data-lag": p.lag },
      el("td", {}, p.topic + (p.sourceTopic ? " (source: " + p.sourceTopic + ")" : "")), el("td", { class: "num" }, p.partition), el("td", {}, partBadge(p, m)),
      el("td", { class: "num" }, num(p.sourceOffset)), el("td", { class: "num" }, num(p.destinationOffset)),
      el("td", { class: "num", "data-lag-records": "" }, lagText(p.lag, p.sourceStale, num)),
      el("td", { class: "num", "data-lag-time": "" }, lagText(p.lagMs, p.sourceStale, duration)),
      el("td", { class: "num", "data-source-age": "" }, ageText(p.sourceOffsetTime)),
      el("td", { class: "reason" }, [p.destinationIssue, p.reason].filter(Boolean).join("; "))));
    const diverged = m.diverged.map((d) => cells([d.topic + "/" + d.partition + (d.sourceTopic ? " (source: " + d.sourceTopic + ")" : ""), d.firstOffset + "–" + d.lastOffset, num(d.records),
      time(d.truncatedAt), d.cause, d.topic + ".diverged/" + d.partition + " @ " + d.copyStart + "–" + d.copyEnd]));
    out.push(el("div", { class: "card", "data-mirror": m.name },
      el("div", { class: "card-head" }, el("h2", {}, m.name), stateBadge(m.state),
        el("span", { class: "kv" }, "source ", el("b", {}, m.source || "unknown")),
        m.aclSync ? el("span", { class: "badge warn" }, "ACL sync: " + m.aclSync) : null,
        el("div", { class: "rpo", "data-rpo-ms": m.rpo.ms, "data-rpo-records": m.rpo.records, "data-rpo-known": m.rpo.known },
          el("div", { class: "label muted" }, "RPO of a failover now"),
          el("div", { class: "value" }, rpoText(m.rpo)[0]),
          el("div", { class: "muted" }, rpoText(m.rpo)[1]))),
      m.error ? el("div", { class: "alarm" }, m.error) : null,
      el("div", { class: "charts" },
        chart("Lag in record time, last hour", m.history, "ms", "line-ms", 1000, duration),
        chart("Lag in records, last hour", m.history, "records", "line-records", 10, (v) => v.toLocaleString("en-US"))),
      el("h3", {}, "Partitions"),
      parts.length ? table(["Topic", "Partition", "State", "Source end", "Destination end", "Lag (records)", "Lag (time)", "Source age", "Reason"], parts,
        [0, 1, 0, 1, 1, 1, 1, 1, 0]) : el("p", { class: "muted" }, "No topics mirrored yet."),
      el("h3", {}, "Divergence manifest"),
      diverged.length ? table(["Partition", "Offsets removed", "Records", "Truncated at", "Cause", "Copied to"], diverged)
        : el("p", { class: "muted", "data-manifest-empty": "" }, "Nothing diverged: no truncation removed records.")));
  }
  return out;
}

async function refresh() {
  const name = pages[location.hash.slice(1)] ? location.hash.slice(1) : "cluster";
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.page === name);
  const status = document.getElementById("status");
  try {
    const resp = await fetch("api/" + name, { cache: "no-store" });
    if (!resp.ok) throw new Error(resp.status + " " + (await resp.text()).trim());
    const data = await resp.json();
    const main = document.getElementById("page");
    main.replaceChildren(...pages[name](data));
    main.dataset.page = name;
    main.dataset.loaded = "true";
    status.textContent = "updated " + new Date().toLocaleTimeString();
    status.classList.remove("error");
  } catch (e) {
    status.textContent = "not updated: " + e.message;
    status.classList.add("error");
  }
}

function schedule() {
  const g = ++generation;
  clearTimeout(timer);
  refresh().finally(() => {
    if (g === generation) timer = setTimeout(schedule, POLL_MS);
  });
}

window.addEventListener("hashchange", schedule);
schedule();

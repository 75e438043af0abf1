// The tidings web view: reads one update a second from /events (Server-Sent Events) and draws
// the network as SVG and this broker's panel. Charts keep the last KEEP seconds in the page
// only; the broker keeps no history for viewers. Elements carry data- attributes (name, up,
// rates) so a test in a headless browser reads what is drawn, not what was received.
"use strict";

const KEEP = 300;
const SVG = "http://www.w3.org/2000/svg";
const history = { t: [], inRate: [], outRate: [], cpu: [], rss: [] };
const charts = {};
let last = null;
let lastAt = 0;

function el(name, attrs, text) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function fmt(n, digits) {
  if (n === undefined || n === null) return "–";
  if (typeof n !== "number") return String(n);
  return n.toLocaleString("en", { maximumFractionDigits: digits === undefined ? 1 : digits });
}

function bytes(n) {
  if (n === undefined || n === null) return "–";
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return fmt(n) + " " + units[i];
}

// Cells on a circle, each cell's brokers on a small circle around its place: stable for a
// given set of names (sorted), so nothing jumps between updates.
function layout(brokers) {
  const cells = new Map();
  for (const b of brokers) {
    if (!cells.has(b.cell)) cells.set(b.cell, []);
    cells.get(b.cell).push(b.name);
  }
  const names = [...cells.keys()].sort();
  const size = Math.max(600, 90 * Math.sqrt(brokers.length) * 2.2);
  const centre = size / 2;
  const ring = names.length > 1 ? size / 2 - 70 : 0;
  const where = new Map();
  const boxes = [];
  names.forEach((cell, i) => {
    const angle = (2 * Math.PI * i) / names.length - Math.PI / 2;
    const cx = centre + ring * Math.cos(angle);
    const cy = centre + ring * Math.sin(angle);
    const members = cells.get(cell).sort();
    const r = members.length > 1 ? 16 + 8 * members.length : 0;
    members.forEach((name, j) => {
      const a = (2 * Math.PI * j) / members.length - Math.PI / 2;
      where.set(name, { x: cx + r * Math.cos(a), y: cy + r * Math.sin(a) });
    });
    if (members.length > 1 || members[0] !== cell) boxes.push({ cell, x: cx, y: cy, r: r + 24 });
  });
  return { where, boxes, size };
}

function routeLinks(update, pubend) {
  const chosen = (update.guaranteed.pubends || []).find((p) => p.pubend === pubend);
  if (!chosen) return new Set();
  return new Set([...chosen.upstream, ...chosen.children].map((peer) => [update.broker, peer].sort().join("\u0000")));
}

function drawNetwork(update) {
  const svg = document.getElementById("network");
  const { where, boxes, size } = layout(update.brokers);
  svg.setAttribute("viewBox", `0 0 ${size} ${size}`);
  const route = routeLinks(update, document.getElementById("pubend").value);
  const parts = [];
  for (const box of boxes) {
    const g = el("g", { class: "cell", "data-cell": box.cell });
    g.append(el("circle", { class: "cell-box", cx: box.x, cy: box.y, r: box.r }));
    g.append(el("text", { class: "cell-name", x: box.x - box.r, y: box.y - box.r + 4 }, "cell " + box.cell));
    parts.push(g);
  }
  for (const link of update.links) {
    const a = where.get(link.a), b = where.get(link.b);
    if (!a || !b) continue;
    const own = link.own, seen = link.seen;
    const onRoute = route.has([link.a, link.b].sort().join("\u0000"));
    const cls = ["link", link.up ? "up" : "down", own ? "own" : "", seen ? "seen" : "",
      seen && seen.stale ? "stale" : "", onRoute ? "route" : ""].join(" ");
    const attrs = { class: cls, x1: a.x, y1: a.y, x2: b.x, y2: b.y, "data-a": link.a, "data-b": link.b,
      "data-up": link.up };
    if (own) {
      // Rates as seen from this broker: out is towards the peer.
      attrs["data-out-per-s"] = own.out_per_s;
      attrs["data-in-per-s"] = own.in_per_s;
      attrs["data-queued"] = own.queued_messages;
    }
    if (seen) {
      // Rates as the link's ends reported them: a to b, and back.
      attrs["data-ab-per-s"] = seen.a_to_b_per_s;
      attrs["data-ba-per-s"] = seen.b_to_a_per_s;
      attrs["data-age-ms"] = seen.age_ms;
      attrs["data-stale"] = seen.stale;
    }
    parts.push(el("line", attrs));
    if (seen) parts.push(seenLabel(link, seen, a, b));
    if (own) {
      const peer = link.a === update.broker ? link.b : link.a;
      const text = `▸${fmt(own.out_per_s, 0)} ◂${fmt(own.in_per_s, 0)}/s q${own.queued_messages}`;
      const label = el("text", { class: "rate", x: (a.x + b.x) / 2, y: (a.y + b.y) / 2, "text-anchor": "middle",
        "data-peer": peer }, text);
      label.append(el("title", {}, `to ${peer}: ${fmt(own.out_per_s)} msg/s out, ${fmt(own.in_per_s)} in; ` +
        `queue ${own.queued_messages} (${bytes(own.queued_bytes)}); ${own.drops} dropped`));
      parts.push(label);
    }
  }
  for (const b of update.brokers) {
    const p = where.get(b.name);
    const g = el("g", { class: `broker ${b.up ? "up" : "down"}${b.name === update.broker ? " me" : ""}`,
      "data-name": b.name, "data-cell": b.cell, "data-up": b.up });
    g.append(el("circle", { cx: p.x, cy: p.y, r: 11 }));
    g.append(el("text", { x: p.x + 14, y: p.y + 4 }, b.name + (b.pubends ? ` (${b.pubends} pubend)` : "")));
    g.append(el("title", {}, `${b.name}, cell ${b.cell}: ${b.up ? "up" : "down (not reachable from here)"}`));
    parts.push(g);
  }
  svg.replaceChildren(...parts);
}

// A link between two other brokers: both ways' rates together and each end's queue, the
// details (and how old the report is) in its tooltip; greyed when stale.
function seenLabel(link, seen, a, b) {
  const q = (n) => (n === null || n === undefined ? "–" : n);
  const text = `${fmt(seen.a_to_b_per_s + seen.b_to_a_per_s, 0)}/s q${q(seen.queued_at_a)}/${q(seen.queued_at_b)}`;
  const label = el("text", { class: "rate seen" + (seen.stale ? " stale" : ""), x: (a.x + b.x) / 2,
    y: (a.y + b.y) / 2, "text-anchor": "middle", "data-a": link.a, "data-b": link.b }, text);
  label.append(el("title", {}, `${link.a} → ${link.b}: ${fmt(seen.a_to_b_per_s)} msg/s, ${link.b} → ${link.a}: ` +
    `${fmt(seen.b_to_a_per_s)}; queued at ${link.a}: ${q(seen.queued_at_a)}, at ${link.b}: ${q(seen.queued_at_b)}; ` +
    `reported ${fmt(seen.age_ms / 1000)} s ago${seen.stale ? " (stale)" : ""}`));
  return label;
}

// One broker's nack ranges, shortest form: "e1: 12-40, 77 …".
function nackText(n) {
  const ranges = n.ranges.map(([first, last]) => (first === last ? `${first}` : `${first}-${last}`));
  return `${n.broker}: ${ranges.join(", ")}${n.more ? " …" : ""}`;
}

function table(id, head, rows) {
  const t = document.getElementById(id);
  const tr = (cells, tag) => "<tr>" + cells.map((c) => {
    const n = typeof c === "number";
    return `<${tag}${n ? ' class="n"' : ""}>${escape(n ? fmt(c) : c)}</${tag}>`;
  }).join("") + "</tr>";
  t.innerHTML = (head ? tr(head, "th") : "") + (rows.length ? rows.map((r) => tr(r, "td")).join("")
    : `<tr><td colspan="${head ? head.length : 2}">none</td></tr>`);
}

function escape(s) {
  return String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
}

function drawPanel(update) {
  const s = update.stats;
  document.getElementById("broker").textContent = `${update.broker} (cell ${update.cell})`;
  const up = update.brokers.filter((b) => b.up).length;
  const linksUp = update.links.filter((l) => l.up).length;
  document.getElementById("summary").textContent =
    `${up} of ${update.brokers.length} brokers up, ${linksUp} of ${update.links.length} links up`;
  table("stats", null, [
    ["connections", s.connections], ["subscriptions", s.subscriptions],
    ["messages in / s", s.in_per_s], ["messages out / s", s.out_per_s],
    ["messages in, total", s.messages_in], ["messages out, total", s.messages_out],
    ["CPU, % of a core", s.cpu_percent], ["resident memory", bytes(s.rss_bytes)],
  ]);
  table("drops", ["reason", "total"], Object.entries(s.drops));
  table("links", ["peer", "up", "out/s", "in/s", "queued", "bytes queued", "dropped"],
    update.links.filter((l) => l.a === update.broker || l.b === update.broker).map((l) => {
      const o = l.own || {};
      return [l.a === update.broker ? l.b : l.a, l.up ? "up" : "down", o.out_per_s, o.in_per_s,
        o.queued_messages, o.queued_bytes, o.drops];
    }).map((r) => r.map((c) => (c === undefined ? "–" : c))));
  const g = update.guaranteed;
  const publishRate = update.publish_per_s || {};
  table("pubends", ["pubend", "home", "publish/s", "log", "release", "horizon lag ms", "release lag ms",
    "subscriber lag ms", "upstream", "children", "nack ranges"], g.pubends.map((p) => [p.pubend,
    p.hosted ? "here" : "remote", p.pubend in publishRate ? publishRate[p.pubend] : "–",
    p.log_bytes === null ? "–" : bytes(p.log_bytes), p.release === null ? "–" : p.release, p.horizon_lag_ms,
    p.release_lag_ms === null ? "–" : p.release_lag_ms, p.subend_lag_ms_max, p.upstream.join(" ") || "–",
    p.children.join(" ") || "–", (p.nacks || []).map(nackText).join("; ") || "none"]));
  table("durables", ["name", "pattern", "held", "pubend", "behind ms", "pins the log"],
    g.durables.flatMap((d) => (d.pubends.length ? d.pubends : [{}]).map((p) => [d.name, d.pattern,
      d.held ? "yes" : "no", p.pubend || "–", p.behind_ms === undefined ? "–" : p.behind_ms,
      p.pins ? "yes" : "no"])));
  const select = document.getElementById("pubend");
  const known = [...select.options].map((o) => o.value);
  for (const p of g.pubends) {
    if (!known.includes(p.pubend)) select.append(new Option(p.pubend, p.pubend));
  }
}

function chart(id, title, series) {
  const box = document.getElementById(id);
  const opts = { title, width: Math.max(300, box.clientWidth || 400), height: 140,
    series: [{}, ...series.map(([label, stroke]) => ({ label, stroke, width: 1.5 }))],
    axes: [{}, { size: 60 }] };
  return new uPlot(opts, [[], ...series.map(() => [])], box);
}

function drawCharts(update) {
  const s = update.stats;
  history.t.push(update.unix_ms / 1000);
  history.inRate.push(s.in_per_s);
  history.outRate.push(s.out_per_s);
  history.cpu.push(s.cpu_percent);
  history.rss.push(s.rss_bytes / 1048576);
  for (const k of Object.keys(history)) if (history[k].length > KEEP) history[k].shift();
  if (typeof uPlot === "undefined") return;
  if (!charts.rates) {
    charts.rates = chart("chart-rates", "messages / s", [["in", "#2e7d32"], ["out", "#1565c0"]]);
    charts.cpu = chart("chart-cpu", "CPU, % of a core", [["cpu", "#b26a00"]]);
    charts.rss = chart("chart-rss", "resident memory, MiB", [["rss", "#6a1b9a"]]);
  }
  charts.rates.setData([history.t, history.inRate, history.outRate]);
  charts.cpu.setData([history.t, history.cpu]);
  charts.rss.setData([history.t, history.rss]);
}

function setStatus(cls, text) {
  const s = document.getElementById("status");
  s.className = "status " + cls;
  s.textContent = text;
}

function connect() {
  const source = new EventSource("/events");
  source.onmessage = (e) => {
    last = JSON.parse(e.data);
    lastAt = Date.now();
    drawNetwork(last);
    drawPanel(last);
    drawCharts(last);
    window.tidingsUpdates = (window.tidingsUpdates || 0) + 1;
    setStatus("live", "live");
  };
  // EventSource reconnects by itself (the admin listener ends every connection after a
  // minute); a 503 (too many viewers) closes it for good, so retry that by hand.
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED) {
      setStatus("off", "refused (too many viewers?); retrying");
      setTimeout(connect, 5000);
    }
  };
}

setInterval(() => {
  if (lastAt && Date.now() - lastAt > 3000) setStatus("wait", "no update for " + Math.round((Date.now() - lastAt) / 1000) + " s");
}, 1000);
document.getElementById("pubend").addEventListener("change", () => last && drawNetwork(last));
connect();

// prexid live dashboard: polls the JSON API, draws the heatmap, the alerts and a drill-down.
// Plain DOM and SVG; no framework, no build step, nothing fetched from outside this service.
"use strict";

const REFRESH_MS = 2000;
const SVG_NS = "http://www.w3.org/2000/svg";
let selected = null; // {node, gpu} (gpu null for the node's own signals)

function scoreColor(score) {
  if (score === null) return "#2a2f37";
  const hue = score >= 0.5 ? 0 : 120 - 160 * score; // green at 0, amber near 0.5, red when firing
  return `hsl(${hue}, 70%, ${score >= 0.5 ? 55 : 45}%)`;
}

function el(tag, attrs = {}, text = "") {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text) node.textContent = text;
  return node;
}

async function getJSON(url) {
  const res = await fetch(url, { cache: "no-store" });
  if (!res.ok) throw new Error(`${url}: HTTP ${res.status}`);
  return res.json();
}

function cell(node, gpu, score, threshold) {
  const td = el("td", { class: "cell", "data-node": node, "data-gpu": gpu === null ? "node" : String(gpu) });
  td.dataset.score = score === null ? "" : String(score);
  td.style.background = scoreColor(score);
  td.textContent = score === null ? "–" : score.toFixed(2);
  td.title = `${node} ${gpu === null ? "(node)" : "GPU " + gpu}: ${score === null ? "no score yet" : score}`;
  if (score !== null && score >= threshold) td.classList.add("firing");
  if (selected && selected.node === node && selected.gpu === gpu) td.classList.add("selected");
  td.addEventListener("click", () => select(node, gpu));
  return td;
}

function renderHeatmap(scores) {
  const table = document.getElementById("heatmap");
  const maxGpu = Math.max(-1, ...scores.nodes.flatMap((n) => n.gpus.map((g) => g.gpu)));
  const head = el("tr");
  head.append(el("th"), el("th", {}, "node"));
  for (let g = 0; g <= maxGpu; g++) head.append(el("th", {}, `GPU ${g}`));
  const rows = [head];
  for (const n of scores.nodes) {
    const tr = el("tr");
    tr.append(el("th", { scope: "row" }, n.node), cell(n.node, null, n.score, scores.threshold));
    const byGpu = new Map(n.gpus.map((g) => [g.gpu, g.score]));
    for (let g = 0; g <= maxGpu; g++) {
      tr.append(byGpu.has(g) ? cell(n.node, g, byGpu.get(g), scores.threshold) : el("td", { class: "cell empty" }));
    }
    rows.push(tr);
  }
  table.replaceChildren(...rows);
  document.getElementById("cluster").textContent = `cluster ${scores.cluster}`;
  document.getElementById("tick").textContent = scores.tick ? `event time ${scores.tick}` : "no tick yet";
}

function renderAlerts(alerts) {
  document.getElementById("alert-count").textContent = String(alerts.length);
  const items = alerts.map((a) => {
    const li = el("li", { class: a.severity, "data-fingerprint": a.fingerprint, "data-kind": a.kind });
    li.append(el("span", { class: "kind" }, a.kind), document.createTextNode(a.summary + " "));
    const link = el("a", { href: a.runbook_url, target: "_blank", rel: "noopener" }, "runbook");
    li.append(link, el("div", { class: "muted" }, `since ${a.starts_at} · score ${a.score.toFixed(2)}`));
    li.addEventListener("click", (ev) => { if (ev.target !== link) select(a.node, a.gpu); });
    return li;
  });
  document.getElementById("alerts").replaceChildren(...items);
}

// Charts keep their text upright: a fixed viewBox with margins for the axes, scaled as a whole.
const AXIS = { left: 40, right: 8, top: 16, bottom: 22 };

function svgEl(tag, attrs, text = "") {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text) node.textContent = text;
  return node;
}

function clock(iso) {
  return iso ? iso.slice(11, 16) : "";  // HH:MM of an RFC 3339 event time (UTC)
}

// A line chart of `values` over `ticks` with a y axis from 0 to yMax (labelled at `yTicks`), an x axis
// of event times (UTC), optional dashed threshold, and the axis titles.
function chart(svg, { width, height, ticks, values, yMax, yTicks, yTitle, threshold = null }) {
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const x0 = AXIS.left, x1 = width - AXIS.right, y0 = height - AXIS.bottom, y1 = AXIS.top;
  const x = (i) => x0 + (i / Math.max(1, values.length - 1)) * (x1 - x0);
  const y = (v) => y0 - (Math.min(v, yMax) / yMax) * (y0 - y1);
  svg.append(svgEl("line", { x1: x0, x2: x1, y1: y0, y2: y0, class: "axis" }));
  svg.append(svgEl("line", { x1: x0, x2: x0, y1: y0, y2: y1, class: "axis" }));
  for (const v of yTicks) {
    svg.append(svgEl("line", { x1: x0 - 3, x2: x0, y1: y(v), y2: y(v), class: "axis" }));
    svg.append(svgEl("text", { x: x0 - 5, y: y(v) + 3, class: "tick-label", "text-anchor": "end" }, String(v)));
  }
  svg.append(svgEl("text", { x: x0 + 4, y: 11, class: "axis-title" }, yTitle));
  const marks = ticks.length > 1 ? [0, Math.floor((ticks.length - 1) / 2), ticks.length - 1] : [0];
  const anchor = (i) => (i === 0 ? "start" : i === ticks.length - 1 ? "end" : "middle");
  for (const i of ticks.length ? marks : []) {
    svg.append(svgEl("text", { x: x(i), y: height - 6, class: "tick-label", "text-anchor": anchor(i) }, clock(ticks[i])));
  }
  if (threshold !== null) {
    svg.append(svgEl("line", { x1: x0, x2: x1, y1: y(threshold), y2: y(threshold), class: "threshold" }));
  }
  const pts = values.map((v, i) => (v === null ? null : `${x(i)},${y(v)}`)).filter((pt) => pt !== null);
  svg.append(svgEl("polyline", { class: "line", points: pts.join(" ") }));
}

function renderDetail(hist) {
  const what = hist.gpu === null ? `node ${hist.node} (host signals)` : `GPU ${hist.gpu} on ${hist.node}`;
  document.getElementById("detail-title").textContent = `Drill-down: ${what}`;
  const span = hist.ticks.length ? `${hist.ticks[0]} → ${hist.ticks[hist.ticks.length - 1]}` : "no ticks yet";
  document.getElementById("detail-summary").textContent = `${hist.ticks.length} ticks, ${span} (event time, UTC)`;
  chart(document.getElementById("detail-score"), {
    width: 600, height: 170, ticks: hist.ticks, values: hist.scores, yMax: 1, yTicks: [0, 0.5, 1],
    yTitle: "score", threshold: 0.5,
  });
  const fams = hist.families.map((f) => {
    const box = el("div", { class: "family", "data-family": f.family });
    const peak = Math.max(1, ...f.surprise.filter((v) => v !== null));
    box.append(el("div", {}, `${f.family} (peak surprise ${peak.toFixed(1)})`));
    const spark = document.createElementNS(SVG_NS, "svg");
    spark.setAttribute("class", "spark");
    chart(spark, {
      width: 300, height: 90, ticks: hist.ticks, values: f.surprise, yMax: peak,
      yTicks: [0, Math.round(peak)], yTitle: "-log10 p",
    });
    box.append(spark);
    return box;
  });
  if (!fams.length) fams.push(el("p", { class: "muted" }, "no signal family has voted in this window"));
  document.getElementById("detail-families").replaceChildren(...fams);
  document.getElementById("detail").hidden = false;
}

function fmt(v) {
  return v === null || v === undefined ? "–" : String(Math.round(v * 1000) / 1000);
}

function renderEvidence(ev) {
  const rows = ev.families.map((f) => {
    const tr = el("tr", { "data-family": f.family, class: f.common_mode ? "common-mode" : "" });
    const labels = Object.entries(f.labels).map(([k, v]) => `${k}="${v}"`).join(", ");
    for (const text of [f.family, fmt(f.surprise), f.votes ? "yes" : "no", f.metric ? `${f.metric}{${labels}}` : "–", fmt(f.value), fmt(f.baseline)]) {
      tr.append(el("td", {}, text));
    }
    return tr;
  });
  if (!rows.length) rows.push(el("tr", {}, "no family holds evidence now"));
  document.querySelector("#evidence tbody").replaceChildren(...rows);
}

async function refreshDetail() {
  if (!selected) return;
  const node = encodeURIComponent(selected.node);
  const q = selected.gpu === null ? "" : `?gpu=${selected.gpu}`;
  const evidenceUrl = selected.gpu === null ? `/api/v1/entities/${node}` : `/api/v1/entities/${node}/gpus/${selected.gpu}`;
  const [hist, evidence] = await Promise.all([getJSON(`/api/v1/history/${node}${q}`), getJSON(evidenceUrl)]);
  renderDetail(hist);
  renderEvidence(Array.isArray(evidence) ? evidence.find((e) => e.gpu === null) || evidence[0] : evidence);
}

function select(node, gpu) {
  selected = { node, gpu };
  location.hash = gpu === null ? `node=${node}` : `node=${node}&gpu=${gpu}`;
  refresh();
}

function selectionFromHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  if (!params.get("node")) return null;
  return { node: params.get("node"), gpu: params.has("gpu") ? Number(params.get("gpu")) : null };
}

function renderView(view) {
  // Which slice of the fleet this address shows: a replica's own partitions, or all of them.
  const parts = view.partitions.join(", ");
  let text = view.view === "fleet"
    ? `fleet view: ${view.partitions.length} partitions`
    : view.partitions.length ? `replica-local view: partitions ${parts}` : "replica-local view";
  if (view.missing && view.missing.length) text += ` (behind: ${view.missing.join(", ")})`;
  const span = document.getElementById("view");
  span.textContent = text;
  span.dataset.view = view.view;
}

async function refresh() {
  const status = document.getElementById("status");
  try {
    const [scores, alerts, view] = await Promise.all([
      getJSON("/api/v1/scores"), getJSON("/api/v1/alerts"), getJSON("/api/v1/view"),
    ]);
    renderHeatmap(scores);
    renderAlerts(alerts);
    renderView(view);
    if (view.view !== "fleet") await refreshDetail();  // drill-down lives in the owning replica
    status.textContent = `updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.loaded = "true";
  } catch (err) {
    status.textContent = `error: ${err.message}`;
  }
}

selected = selectionFromHash();
refresh();
setInterval(refresh, REFRESH_MS);

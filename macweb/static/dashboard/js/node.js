// The node page: draw each chart from /nodes/<id>/charts/<name>.json with uPlot, redraw
// on range, size or theme change, say why a chart is empty, and keep the status badge live.
/* global uPlot */
import { connectLive, readJson, refreshTimes } from "./live.js";
import { formatValue, tickLabels, yScale } from "./units.js";

const node = readJson("mac-node");
const vocab = readJson("mac-vocabulary");
const figures = [...document.querySelectorAll("figure.chart")];
const plots = new Map();
const lastData = new Map();
let range = document.querySelector("button.range.active")?.dataset.range || "1h";

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

function palette() {
  return [1, 2, 3, 4, 5, 6, 7, 8].map((i) => cssVar(`--series-${i}`));
}

function showEmpty(figure, reason) {
  const empty = figure.querySelector(".chart-empty");
  empty.textContent = reason;
  empty.hidden = false;
  figure.classList.add("is-empty");
}

function lastFilledIndex(data) {
  for (let i = data.timestamps.length - 1; i >= 0; i--) {
    if (data.series.some((s) => s.values[i] !== null)) return i;
  }
  return data.timestamps.length - 1;
}

function draw(figure, data) {
  const body = figure.querySelector(".chart-body");
  plots.get(figure)?.destroy();
  plots.delete(figure);
  body.replaceChildren();
  figure.querySelector(".chart-empty").hidden = true;
  figure.classList.remove("is-empty");
  if (data.empty_reason || !data.series.length) {
    showEmpty(figure, data.empty_reason || "No data.");
    return;
  }
  const colors = palette();
  const lastIndex = lastFilledIndex(data);
  const axis = { stroke: cssVar("--muted"), grid: { stroke: cssVar("--grid") }, ticks: { stroke: cssVar("--grid") } };
  const opts = {
    width: Math.max(240, body.clientWidth),
    height: 200,
    legend: { show: true, live: true },
    cursor: { drag: { x: true, y: false } },
    scales: { x: { time: true }, y: yScale(data.unit) },
    axes: [axis, { ...axis, size: 56, values: (u, ticks) => tickLabels(ticks, data.unit) }],
    hooks: {
      // With no cursor on the chart, the legend shows the latest values.
      setCursor: [(u) => { if (u.cursor.idx == null) u.setLegend({ idx: lastIndex }); }],
    },
    series: [
      { label: "Time", value: "{YYYY}-{MM}-{DD} {HH}:{mm}" },
      ...data.series.map((s, i) => ({
        label: s.label,
        stroke: colors[i % colors.length],
        width: 1.5,
        points: { show: false },
        spanGaps: false,
        value: (u, v) => formatValue(v, data.unit),
      })),
    ],
  };
  const plot = new uPlot(opts, [data.timestamps, ...data.series.map((s) => s.values)], body);
  plot.setLegend({ idx: lastIndex });
  plots.set(figure, plot);
}

async function load(figure) {
  figure.classList.add("loading");
  try {
    const response = await fetch(`${figure.dataset.url}?range=${encodeURIComponent(range)}`, { credentials: "same-origin" });
    const data = await response.json();
    if (response.status === 503 && data.empty_reason) {
      // Prometheus could not be asked in time: say why; the next refresh asks again.
      showEmpty(figure, data.empty_reason);
      return;
    }
    if (!response.ok) {
      showEmpty(figure, `The chart endpoint answered ${response.status}: ${JSON.stringify(data)}`);
      return;
    }
    lastData.set(figure, data);
    draw(figure, data);
  } catch (e) {
    showEmpty(figure, "The master did not answer; retrying when the live feed is back.");
  } finally {
    figure.classList.remove("loading");
  }
}

function loadAll() {
  figures.forEach(load);
}

function redrawAll() {
  for (const [figure, data] of lastData) draw(figure, data);
}

for (const button of document.querySelectorAll("button.range")) {
  button.addEventListener("click", () => {
    range = button.dataset.range;
    for (const other of document.querySelectorAll("button.range")) {
      const on = other === button;
      other.classList.toggle("active", on);
      other.setAttribute("aria-pressed", on ? "true" : "false");
    }
    loadAll();
  });
}

let resizeTimer = null;
new ResizeObserver(() => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => {
    for (const [figure, plot] of plots) plot.setSize({ width: Math.max(240, figure.querySelector(".chart-body").clientWidth), height: 200 });
  }, 100);
}).observe(document.querySelector(".charts"));
window.addEventListener("mac-theme", redrawAll);
window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", redrawAll);

const PROBE_WORDS = { up: "answered the last probe", down: "did not answer the last probe" };

// The exporters table follows each push: last probe per service, and whether it is
// a Prometheus target (the rule of healthcheck/targets.py: sys-exporter while the node
// is Online, any other exporter while its own probe answers).
function applyExporters(change) {
  for (const row of document.querySelectorAll("table.exporters tr[data-service]")) {
    const name = row.dataset.service;
    const healthy = change.exporter_health?.[name];
    if (healthy === undefined) continue;
    const state = healthy ? "up" : "down";
    row.className = `exp-${state}`;
    const probe = row.querySelector(".exp-probe");
    probe.className = `badge badge-exp-${state} exp-probe`;
    probe.textContent = state;
    probe.title = PROBE_WORDS[state];
    const target = row.querySelector(".exp-target");
    if (!target) continue;
    const scraped = name === "sys-exporter" ? change.status === "online" : healthy;
    target.className = `badge badge-exp-${scraped ? "up" : "down"} exp-target`;
    target.textContent = scraped ? "scraped" : "missing";
    target.title = `${scraped ? "listed in" : "left out of"} ${name}.json`;
  }
}

function applyChanges(changes, removed = []) {
  if (removed.some((id) => Number(id) === Number(node.id))) {
    const badge = document.getElementById("node-status");
    badge.className = "badge badge-offline";
    badge.textContent = "Deregistered";
    document.getElementById("node-status-text").textContent = "Deregistered: this node left the inventory.";
    return;
  }
  const mine = changes.find((c) => Number(c.id) === Number(node.id));
  if (!mine) return;
  const badge = document.getElementById("node-status");
  badge.className = `badge badge-${mine.status}`;
  badge.textContent = vocab.status[mine.status] || mine.status;
  document.getElementById("node-status-text").textContent = badge.textContent;
  const detail = mine.status_detail ? `: ${mine.status_detail}` : "";
  document.getElementById("node-reason").textContent = `${vocab.reason[mine.status_reason] || "-"}${detail}`;
  const diagnosis = vocab.diagnosis[mine.diagnosis];
  document.getElementById("node-diagnosis").textContent = diagnosis
    ? `${diagnosis.text}${diagnosis.fix ? ` Fix: ${diagnosis.fix}` : ""}`
    : mine.status === "online" ? "Nothing to diagnose: the sys-exporter answered the last probe." : "";
  applyExporters(mine);
}

refreshTimes();
loadAll();
connectLive({ path: "/ws/fleet/", onChanges: applyChanges, onOpen: () => {}, authUrl: "/fleet.json?page=1" });
setInterval(loadAll, 60000);

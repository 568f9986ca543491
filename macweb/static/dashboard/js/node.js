// The node page: draw each chart from /nodes/<id>/charts/<name>.json with uPlot, redraw
// on range, size or theme change, say why a chart is empty, and keep the status badge live.
/* global uPlot */
import { connectLive, readJson, refreshTimes } from "./live.js";

const node = readJson("mac-node");
const vocab = readJson("mac-vocabulary");
const figures = [...document.querySelectorAll("figure.chart")];
const plots = new Map();
const lastData = new Map();
let range = document.querySelector("button.range.active")?.dataset.range || "1h";

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

const SI = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];

function formatValue(value, unit) {
  if (value === null || value === undefined) return "–";
  if (unit === "B/s") {
    for (const [size, prefix] of SI) if (Math.abs(value) >= size) return `${(value / size).toFixed(1)} ${prefix}B/s`;
    return `${value.toFixed(0)} B/s`;
  }
  const digits = Math.abs(value) >= 100 ? 0 : 1;
  return `${value.toFixed(digits)} ${unit}`;
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
  const axis = { stroke: cssVar("--muted"), grid: { stroke: cssVar("--grid") }, ticks: { stroke: cssVar("--grid") } };
  const opts = {
    width: Math.max(240, body.clientWidth),
    height: 200,
    legend: { show: true, live: true },
    cursor: { drag: { x: true, y: false } },
    scales: { x: { time: true }, y: data.unit === "%" ? { range: [0, 100] } : { auto: true } },
    axes: [axis, { ...axis, size: 64, values: (u, ticks) => ticks.map((v) => formatValue(v, data.unit)) }],
    series: [
      {},
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
  plots.set(figure, new uPlot(opts, [data.timestamps, ...data.series.map((s) => s.values)], body));
}

async function load(figure) {
  figure.classList.add("loading");
  try {
    const response = await fetch(`${figure.dataset.url}?range=${encodeURIComponent(range)}`, { credentials: "same-origin" });
    const data = await response.json();
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

function applyChanges(changes) {
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
}

refreshTimes();
loadAll();
connectLive({ path: "/ws/fleet/", onChanges: applyChanges, onOpen: () => {} });
setInterval(loadAll, 60000);

// The job page: each chart of the job's GPUs over its life, drawn with uPlot from the
// report the server rendered into the page (mac-job-charts), so no second request.
/* global uPlot */
import { readJson } from "./live.js";
import { axes, lineSeries } from "./chartstyle.js";
import { yScale } from "./units.js";

const charts = readJson("mac-job-charts") || [];

function draw(figure, data) {
  const body = figure.querySelector(".chart-body");
  body.replaceChildren();
  if (!data.series.length) return;
  const opts = {
    width: Math.max(240, body.clientWidth),
    height: 200,
    legend: { show: data.series.length <= 16, live: true },
    scales: { x: { time: true }, y: yScale(data.unit) },
    axes: axes(data.unit),
    series: lineSeries(data),
  };
  new uPlot(opts, [data.timestamps, ...data.series.map((s) => s.values)], body);
}

function drawAll() {
  for (const figure of document.querySelectorAll("figure.chart[data-chart]")) {
    const data = charts.find((c) => c.chart === figure.dataset.chart);
    if (data) draw(figure, data);
  }
}

drawAll();
window.addEventListener("mac-theme", drawAll);

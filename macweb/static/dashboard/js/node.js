// The node page: draw each chart from /nodes/<id>/charts/<name>.json with uPlot, redraw
// on range, size or theme change, say why a chart is empty, and keep the status badge live.
/* global uPlot */
import { connectLive, el, readJson, refreshTimes } from "./live.js";
import { axes, lineSeries } from "./chartstyle.js";
import { yScale } from "./units.js";

const node = readJson("mac-node");
const vocab = readJson("mac-vocabulary");
const figures = [...document.querySelectorAll("figure.chart")];
const plots = new Map();
const lastData = new Map();
let range = document.querySelector("button.range.active")?.dataset.range || "1h";

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

// The y axis as wide as its longest label ("828Gi" needs more than "80"): uPlot asks
// again after laying the labels out, and a fixed width clipped the long ones.
function axisWidth(u, values, axisIdx, cycleNum) {
  const axis = u.axes[axisIdx];
  if (cycleNum > 1) return axis._size;
  const longest = (values || []).reduce((a, b) => (String(b).length > a.length ? String(b) : a), "");
  u.ctx.font = axis.font[0];
  const text = longest ? u.ctx.measureText(longest).width / devicePixelRatio : 0;
  return Math.ceil(axis.ticks.size + axis.gap + text + 8);
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
  const lastIndex = lastFilledIndex(data);
  const opts = {
    width: Math.max(240, body.clientWidth),
    height: 200,
    legend: { show: true, live: true },
    cursor: { drag: { x: true, y: false } },
    scales: { x: { time: true }, y: yScale(data.unit) },
    axes: axes(data.unit, { size: axisWidth }),
    hooks: {
      // With no cursor on the chart, the legend shows the latest values.
      setCursor: [(u) => { if (u.cursor.idx == null) u.setLegend({ idx: lastIndex }); }],
    },
    series: lineSeries(data),
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
// a Prometheus target (the rule of scraping/targets.py: sys-exporter while the node
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

// Prometheus' own health of each target (scrapes.json, asked after the page is drawn):
// "up", or "down" with its last scrape error; "-" for a service it does not scrape.
function showScrapes(data) {
  const table = document.querySelector("table.exporters");
  for (const row of table.querySelectorAll("tr[data-service]")) {
    const cell = row.querySelector(".exp-scrape");
    const job = data.jobs?.[row.dataset.service];
    if (!job) {
      const none = document.createElement("span");
      none.className = "muted";
      none.textContent = data.error ? "?" : "-";
      cell.replaceChildren(none);
      continue;
    }
    const badge = document.createElement("span");
    badge.className = `badge badge-exp-${job.health}`;
    badge.title = "Prometheus' last scrape";
    badge.textContent = job.health;
    const parts = [badge];
    if (job.error) {
      const error = document.createElement("span");
      error.className = "scrape-error mono";
      error.textContent = job.error;
      parts.push(" ", error);
    }
    cell.replaceChildren(...parts);
  }
  const note = document.getElementById("scrape-error");
  note.textContent = data.error ? `Scrape health unknown: ${data.error}` : "";
  note.hidden = !data.error;
}

async function loadScrapes() {
  const url = document.querySelector("table.exporters").dataset.scrapesUrl;
  try {
    const response = await fetch(url, { credentials: "same-origin" });
    showScrapes(await response.json());
  } catch (e) {
    showScrapes({ jobs: {}, error: "the master did not answer; asking again shortly." });
  }
}

// The GPU rows (each GPU's verdict, evidence and the job on it) are reread in place, as
// the server renders them: after each push for this node, and every 30 s, since Slurm's
// jobs move without a push. One read at a time; a push during a read asks for one more
// (the read may have left before the change). A failed read waits for the next.
let gpusLoading = false;
let gpusAgain = false;
async function loadGpus() {
  const rows = document.getElementById("gpu-rows");
  if (!rows) return;
  if (gpusLoading) {
    gpusAgain = true;
    return;
  }
  gpusLoading = true;
  try {
    const response = await fetch(rows.dataset.url, { credentials: "same-origin" });
    if (response.ok) {
      rows.innerHTML = await response.text();
      refreshTimes(rows);
      showFirstVerdict(rows.querySelector("tr") !== null);
    }
  } catch (e) {
    // the master did not answer: the next push or tick asks again
  } finally {
    gpusLoading = false;
    if (gpusAgain) {
      gpusAgain = false;
      loadGpus();
    }
  }
}

// A node whose first verdict came after the page was drawn: its table, and for a healthy
// one the line that says so in place of "No verdict read yet".
function showFirstVerdict(haveRows) {
  document.getElementById("gpu-table").hidden = !haveRows;
  const evidence = document.getElementById("node-health-evidence");
  if (haveRows && evidence && evidence.hasAttribute("data-waiting")) {
    evidence.removeAttribute("data-waiting");
    if (evidence.textContent.startsWith("No verdict read yet")) {
      evidence.textContent = ALL_HEALTHY;
    }
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
  document.getElementById("node-diagnosis").textContent = diagnosis ? diagnosis.text : NO_DIAGNOSIS[mine.status] || "";
  showFix("node-diagnosis-fix", diagnosis ? diagnosis.fix : "");
  applyExporters(mine);
  applyHealth(mine);
  applySlurm(mine);
  loadGpus();
}

// Who holds the node out of service in Slurm (drained by MAC, with its reason, or by an
// administrator), as the last drain pass read it.
function applySlurm(change) {
  if (change.slurm_hold === undefined) return;
  const words = vocab.slurm_hold[change.slurm_hold] || change.slurm_hold;
  const badge = document.getElementById("node-slurm-badge");
  if (badge) {
    badge.className = `badge badge-slurm-${change.slurm_hold || "none"}`;
    badge.textContent = change.slurm_hold ? words : "";
    badge.title = `${change.slurm_state}: ${change.slurm_reason}`;
    badge.hidden = !change.slurm_hold;
  }
  const line = document.getElementById("node-slurm");
  if (!line) return;
  const state = el("span", null, "");
  state.id = "node-slurm-state";
  if (change.slurm_hold) state.textContent = `${words} (${change.slurm_state})`;
  else if (change.slurm_state) state.textContent = `${change.slurm_state}, in service`;
  else state.textContent = "not a Slurm node";
  line.replaceChildren("In Slurm: ", state);
  if (change.slurm_hold) {
    const reason = el("q", "mono", change.slurm_reason);
    reason.id = "node-slurm-reason";
    line.append(", reason ", reason);
  }
}

// What the page says of a node without a diagnosis, by status (the template's words).
const NO_DIAGNOSIS = {
  offline: "The probes could not tell why. Run mac doctor on the node.",
  online: "Nothing to diagnose: the sys-exporter answered the last probe.",
  unknown: "Not probed yet; the first sweep runs within the probe interval.",
};
const ALL_HEALTHY = "Every GPU answers healthy: no XID, ECC, remap, NVLink or slowdown evidence.";

// A "Fix" block follows the push too: the commands of the case now, hidden when none.
function showFix(id, words) {
  const block = document.getElementById(id);
  if (!block) return;
  block.textContent = words || "";
  document.getElementById(`${id}-box`).hidden = !words;
}

// The GPU verdict follows each push: its state, action, evidence line and fix (the table
// of each GPU follows through loadGpus).
function applyHealth(change) {
  if (change.health_state === undefined) return;
  const words = vocab.health[change.health_state] || change.health_state;
  for (const [id, text] of [["node-health", words], ["node-health-badge", `GPU ${words.toLowerCase()}`]]) {
    const badge = document.getElementById(id);
    if (!badge) continue;
    badge.className = `badge badge-health-${change.health_state}`;
    badge.textContent = text;
  }
  const action = document.getElementById("node-health-action");
  if (action) {
    action.replaceChildren();
    if (change.health_action && change.health_action !== "none") {
      const strong = document.createElement("strong");
      strong.textContent = vocab.action[change.health_action] || change.health_action;
      action.append("Action: ", strong);
    }
  }
  const evidence = document.getElementById("node-health-evidence");
  if (evidence && change.health_evidence) evidence.textContent = change.health_evidence;
  // A verdict that cleared: the line says so (while no verdict was read yet, loadGpus does).
  else if (evidence && !evidence.hasAttribute("data-waiting")) evidence.textContent = ALL_HEALTHY;
  // A fix that names GPUs (reset_gpu) comes with the change, naming those that need it;
  // the vocabulary's words serve every other action.
  showFix("node-health-fix", change.health_fix ?? vocab.fixes[change.health_action]);
}

// After a reconnect (a restart of the master, Redis away), the pushes missed meanwhile are
// read back as one row of the fleet list: the page shows the node as it is now.
let liveOpened = false;
async function resync() {
  if (!liveOpened) {
    liveOpened = true;  // the first open: the page was rendered just now
    return;
  }
  try {
    const response = await fetch(`/fleet.json?search=${encodeURIComponent(node.hostname)}`, {
      credentials: "same-origin",
    });
    if (!response.ok) return;
    const body = await response.json();
    const row = (body.nodes || []).find((n) => Number(n.id) === Number(node.id));
    if (row) applyChanges([row], []);
    else applyChanges([], [node.id]);
  } catch (e) {
    // the next push, or the next reconnect, brings it
  }
}

refreshTimes();
loadAll();
loadScrapes();
connectLive({ path: "/ws/fleet/", onChanges: applyChanges, onOpen: resync, authUrl: "/fleet.json?page=1" });
setInterval(loadAll, 60000);
setInterval(loadScrapes, 30000);
setInterval(loadGpus, 30000);

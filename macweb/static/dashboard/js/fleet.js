// The fleet page: apply pushed changes to the visible rows at once, then resync the
// counts and the page from the JSON endpoint (debounced), so filters and counts stay
// right for nodes that are not on this page. Data goes in with textContent only.
import { connectLive, el, openDetails, readJson, refreshTimes, reopenDetails, setIndicator } from "./live.js";

const vocab = readJson("mac-vocabulary");
const cfg = readJson("mac-live-config");
const tbody = document.getElementById("node-rows");
// Rows change at once from the push; the resync that fixes counts and filter membership
// waits a little, spread out so that a wall of open dashboards does not ask all at once.
const RESYNC_DELAY_MS = 300;
const RESYNC_SPREAD_MS = 1500;
let resyncTimer = null;

function vendorWord(vendor) {
  if (vendor === "nvidia") return "NVIDIA";
  if (vendor === "amd") return "AMD";
  return "GPU";
}

// A live push carries Node.summary() codes; the words come from the vocabulary.
function withWords(node) {
  return {
    ...node,
    status_text: node.status_text || vocab.status[node.status] || node.status,
    status_reason_text: node.status_reason_text ?? (vocab.reason[node.status_reason] || ""),
    diagnosis_info: node.diagnosis_info || vocab.diagnosis[node.diagnosis] || { label: "", text: "", fix: "" },
    agent_network_text:
      node.agent_network_text ?? (vocab.network[node.agent_network || ""] || "unknown"),
    health_state_text: node.health_state_text || vocab.health[node.health_state] || node.health_state,
    health_action_text: node.health_action_text || vocab.action[node.health_action] || node.health_action,
    needs_action: node.needs_action ?? vocab.operator_actions.includes(node.health_action),
    slurm_hold_text: node.slurm_hold_text ?? (node.slurm_hold ? vocab.slurm_hold[node.slurm_hold] : ""),
  };
}

function buildRow(raw) {
  const node = withWords(raw);
  const tr = el("tr", `node-row status-${node.status}`);
  tr.dataset.nodeId = String(node.id);

  const host = el("td", "host");
  const link = el("a", null, node.hostname);
  link.href = cfg.node_url.replace("{id}", encodeURIComponent(node.id));
  host.append(link);
  if (cfg.admin_url) {
    const admin = el("a", "admin-link", "admin");
    admin.href = cfg.admin_url.replace("{id}", encodeURIComponent(node.id));
    admin.title = "Edit in the Django admin";
    host.append(" ", admin);
  }

  const status = el("td", "status");
  status.append(el("span", `badge badge-${node.status}`, node.status_text));
  if (node.maintenance) status.append(" ", el("span", "badge badge-maintenance", "Maintenance"));
  if (node.slurm_hold) {
    const drained = el("span", `badge badge-slurm-${node.slurm_hold}`, node.slurm_hold_text);
    drained.title = `${node.slurm_state}: ${node.slurm_reason}`;
    status.append(" ", drained);
  }

  const gpus = el("td", "gpus");
  if (node.gpu_count) gpus.textContent = `${node.gpu_count} × ${vendorWord(node.gpu_vendor)}`;
  else gpus.append(el("span", "muted", "none"));

  // The GPU verdict: its state, and the action when there is one; the evidence on hover.
  const health = el("td", "health");
  if (!node.gpu_count && node.health_state === "healthy") {
    const none = el("span", "muted", "-");
    none.title = "No GPU registered";
    health.append(none);
  } else if (!node.health_streak && !node.health_evidence) {
    const unread = el("span", "muted", "not read yet");
    unread.title = "No GPU verdict read yet";
    health.append(unread);
  } else {
    const verdict = el("span", `badge badge-health-${node.health_state}`, node.health_state_text);
    if (node.health_evidence) verdict.title = node.health_evidence;
    health.append(verdict);
    if (node.health_action && node.health_action !== "none") {
      health.append(" ", el("span", `health-action${node.needs_action ? " needs-action" : ""}`, node.health_action_text));
    }
  }

  const seen = el("td", "seen");
  if (node.last_seen) {
    const time = el("time", null, node.last_seen);
    time.setAttribute("datetime", node.last_seen);
    seen.append(time);
  } else {
    seen.append(el("span", "muted", "never"));
  }

  // One line (the reason, and the diagnosis in a few words); the paragraph and the
  // fix a click away, so an Offline row stays as tall as the others.
  const why = el("td", "why");
  if (node.status === "offline") {
    const detail = node.status_detail ? `: ${node.status_detail}` : "";
    const more = el("details", "why-more");
    const line = el("summary");
    line.title = "Click for the diagnosis and the fix";
    line.append(el("span", "reason", `${node.status_reason_text}${detail}`));
    const diag = node.diagnosis_info;
    if (diag && diag.label) line.append(" ", el("span", "diagnosis-label", `· ${diag.label}`));
    more.append(line);
    if (diag && diag.text) {
      more.append(el("div", "diagnosis", diag.text));
      if (diag.fix) {
        const fix = el("details", "fix");
        fix.append(el("summary", null, "How to fix"), el("pre", null, diag.fix));
        more.append(fix);
      }
    }
    why.append(more);
  } else if (node.status === "unknown") {
    why.append(el("span", "muted", node.status_reason_text));
  }

  const ip = el("td", "ip mono", node.ip);
  ip.title = `Agent network: ${node.agent_network_text}`;
  tr.append(host, status, ip, gpus, health, seen, why);
  refreshTimes(tr);
  return tr;
}

// A row's open diagnosis and fix stay open when the row is rebuilt by a push or a resync.
const detailsKey = (box) => `${box.closest("tr")?.dataset.nodeId}/${box.className}`;

const FLASH_MS = 2500;
const flashedAt = new Map();  // node id -> when its row last changed (kept across resyncs)

function applyChanges(changes, removed = []) {
  for (const id of removed) {
    tbody.querySelector(`tr[data-node-id="${Number(id)}"]`)?.remove();
  }
  const now = Date.now();
  for (const node of changes) {
    flashedAt.set(Number(node.id), now);
    const old = tbody.querySelector(`tr[data-node-id="${Number(node.id)}"]`);
    if (!old) continue;
    const fresh = buildRow(node);
    fresh.classList.add("changed");
    reopenDetails(fresh, openDetails(old, detailsKey), detailsKey);
    old.replaceWith(fresh);
  }
  scheduleResync();
}

function renderCounts(counts) {
  for (const box of document.querySelectorAll("[data-count]")) {
    const value = box.dataset.count.split(".").reduce((acc, key) => (acc ? acc[key] : undefined), counts);
    if (value !== undefined) box.textContent = String(value);
  }
  for (const seg of document.querySelectorAll("[data-seg]")) {
    seg.style.flexGrow = String(counts.status[seg.dataset.seg] || 0);
  }
}

function renderPage(data) {
  renderCounts(data.counts);
  const now = Date.now();
  const rows = data.nodes.map((node) => {
    const tr = buildRow(node);
    if (now - (flashedAt.get(Number(node.id)) || 0) < FLASH_MS) tr.classList.add("changed");
    return tr;
  });
  if (rows.length) {
    const opened = openDetails(tbody, detailsKey);
    tbody.replaceChildren(...rows);
    reopenDetails(tbody, opened, detailsKey);
  } else {
    const tr = el("tr", "empty-row");
    const td = el("td", null, "No node matches these filters.");
    td.colSpan = 7;
    tr.append(td);
    tbody.replaceChildren(tr);
  }
  const pages = data.num_pages > 1 ? ` · page ${data.page} of ${data.num_pages}` : "";
  document.getElementById("matching").textContent = `${data.matching} matching${pages}`;
}

async function resync() {
  resyncTimer = null;
  let response;
  try {
    response = await fetch(cfg.json_url + location.search, { credentials: "same-origin" });
  } catch (e) {
    return;  // the socket's own reconnect loop reports the outage
  }
  if (response.status === 401) {
    setIndicator("down", "logged out: reload to log in");
    return;
  }
  if (response.ok) renderPage(await response.json());
}

function scheduleResync() {
  if (resyncTimer === null) {
    resyncTimer = setTimeout(resync, RESYNC_DELAY_MS + Math.random() * RESYNC_SPREAD_MS);
  }
}

refreshTimes();
setInterval(() => refreshTimes(tbody), 15000);
connectLive({ path: cfg.ws_path, onChanges: applyChanges, onOpen: scheduleResync, authUrl: cfg.json_url });

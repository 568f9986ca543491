// The alerts panel of the fleet and node pages: firing alerts from Alertmanager through
// the master (alerts.json), updated live by "alerts.changed" pushes on the page's one
// WebSocket (live.js re-emits them as "mac:live" events). When Alertmanager is down the
// panel says "alerts unavailable: <why>" and the rest of the page is untouched.
// The fleet page shows the alerts grouped by alertname and severity: one line per
// group (count, the first few hosts), its nodes a click away, and past a handful of
// groups the rest folded under one line, so the node table stays in view.
// Data goes in with textContent only.
import { el, openDetails, refreshTimes, reopenDetails } from "./live.js";

const panel = document.getElementById("alerts-panel");
const cfg = {
  json_url: panel.dataset.jsonUrl,
  node_url: panel.dataset.nodeUrl || "",
  node_id: panel.dataset.nodeId || "",
};
const list = document.getElementById("alerts-list");
const HOSTS_SHOWN = 3;  // hosts named on a group's line
const HANDFUL = 5;  // groups shown before the rest fold under one line
const silences = document.getElementById("silences-list");

function nodeLink(alert) {
  if (!alert.node || !cfg.node_url) return el("span", "mono", alert.hostname || "");
  const link = el("a", "mono", alert.hostname || `node ${alert.node}`);
  link.href = cfg.node_url.replace("{id}", encodeURIComponent(alert.node));
  return link;
}

function alertItem(alert) {
  const li = el("li", alert.silenced ? "silenced" : null);
  li.dataset.fingerprint = alert.fingerprint;
  li.append(el("span", `sev sev-${alert.severity}`, alert.severity || "?"));
  li.append(el("span", "alert-name", alert.alertname));
  if (alert.hostname && !cfg.node_id) li.append(nodeLink(alert));
  li.append(el("span", "alert-summary", alert.summary));
  if (alert.starts_at) {
    const since = el("time", "muted", alert.starts_at);
    since.setAttribute("datetime", alert.starts_at);
    li.append(since);
  }
  if (alert.silenced) li.append(el("span", "muted", "(silenced)"));
  return li;
}

function filterUrl(alertname) {
  const query = new URLSearchParams({ alert: alertname });
  return `${window.location.pathname}?${query}`;
}

function groupItem(group) {
  const li = el("li", "alert-group");
  li.dataset.alertname = group.alertname;
  li.dataset.severity = group.severity;
  const box = el("details");
  const line = el("summary");
  line.append(el("span", `sev sev-${group.severity}`, group.severity || "?"));
  line.append(el("span", "alert-name", group.alertname));
  line.append(el("span", "group-count", `× ${group.count}`));
  const hosts = group.nodes.slice(0, HOSTS_SHOWN).map((n) => n.hostname || `node ${n.node}`);
  const nodeCount = group.node_count ?? group.count;
  const rest = nodeCount - hosts.length;
  line.append(el("span", "group-hosts mono", hosts.join(", ") + (rest > 0 ? ` and ${rest} more` : "")));
  box.append(line);
  const nodes = el("ul", "group-nodes");
  for (const n of group.nodes) {
    const item = el("li");
    item.append(nodeLink(n), el("span", "alert-summary", n.summary));
    nodes.append(item);
  }
  box.append(nodes);
  const show = el("a", "group-filter", `show ${nodeCount === 1 ? "this node" : `all ${nodeCount} nodes`} in the table`);
  show.href = filterUrl(group.alertname);
  box.append(show);
  li.append(box);
  return li;
}

function groupItems(groups) {
  const items = groups.slice(0, HANDFUL).map(groupItem);
  if (groups.length > HANDFUL) {
    const rest = groups.slice(HANDFUL);
    const li = el("li", "alert-groups-more");
    const box = el("details");
    const alerts = rest.reduce((sum, g) => sum + g.count, 0);
    box.append(el("summary", "muted", `${rest.length} more groups (${alerts} alerts)`));
    const more = el("ul", "alerts-list");
    more.append(...rest.map(groupItem));
    box.append(more);
    li.append(box);
    items.push(li);
  }
  return items;
}

// A group opened by the reader stays open when the panel is redrawn (pushes, polls).
function detailsKey(box) {
  const group = box.closest("li.alert-group");
  if (group) return `group/${group.dataset.alertname}/${group.dataset.severity}`;
  return box.closest("li.alert-groups-more") ? "more" : null;
}

function silenceItem(silence) {
  const li = el("li");
  li.append(el("span", "sev", silence.state));
  li.append(el("span", "alert-name", silence.by_mac ? "maintenance (MAC)" : `by ${silence.created_by}`));
  li.append(el("span", "mono", silence.matchers.join(", ")));
  li.append(el("span", "muted", silence.comment));
  return li;
}

export function render(data) {
  const count = document.getElementById("alerts-count");
  const state = document.getElementById("alerts-state");
  if (!data.available) {
    panel.dataset.state = "unavailable";
    count.textContent = "?";
    state.textContent = `alerts unavailable: ${data.error}`;
    list.replaceChildren();
    if (silences) silences.replaceChildren();
    return;
  }
  const firing = data.alerts.filter((a) => !a.silenced).length;
  const total = data.count ?? firing;
  panel.dataset.state = total ? "firing" : "quiet";
  count.textContent = String(total);
  state.textContent = total ? `${total} firing` : "no alert firing";
  if (!cfg.node_id && data.groups) {
    const opened = openDetails(list, detailsKey);
    list.replaceChildren(...groupItems(data.groups));
    reopenDetails(list, opened, detailsKey);
  } else {
    list.replaceChildren(...data.alerts.map(alertItem));
    if (data.count > data.alerts.length) {
      list.append(el("li", "muted", `… and ${data.count - data.alerts.length} more`));
    }
  }
  if (silences) {
    const items = (data.silences || []).map(silenceItem);
    silences.replaceChildren(...(items.length ? items : [el("li", "muted", "none")]));
  }
  refreshTimes(panel);
}

async function load() {
  try {
    const response = await fetch(cfg.json_url, { credentials: "same-origin" });
    // 503: Alertmanager could not be asked in time; the answer says why.
    if (response.ok || response.status === 503) render(await response.json());
  } catch (e) {
    // The master itself is unreachable: live.js's indicator already says so.
  }
}

document.addEventListener("mac:live", (event) => {
  const msg = event.detail;
  if (msg.type !== "alerts.changed") return;
  // The fleet page shows the push as it is; a node page asks for its own alerts again.
  if (cfg.node_id) load();
  else render(msg.alerts);
});
document.addEventListener("mac:live-open", load);
load();

"""The Prometheus file-SD targets the sweep writes: one JSON file per exporter job.

Layout: `<MAC_SD_DIR>/<service>.json` for every service Prometheus scrapes
(SCRAPED_SERVICES), e.g. `sys-exporter.json`, `dcgm-exporter.json`. Each file is
a list of target groups, one per node on which the service is a target
(node_targets()):

    [{"targets": ["10.0.0.7:29101"],
      "labels": {"cluster_name": "mac", "node": "42", "hostname": "gpu-07",
                 "gpu_vendor": "nvidia", "maintenance": "false"}}]

`cluster_name` (MAC_CLUSTER_NAME) is the label AMD's dashboards start every
variable from; MAC puts it, like `hostname`, on the target, so every exporter's
series carry it and no exporter has to be configured with it.

One file per job keeps the Prometheus configuration plain (one scrape job per
file, the job label is the service name) and means a change of, say, the GPU
nodes rewrites only the files that changed. The http_sd endpoint for sharded
Prometheus servers (scraping.httpsd) serves the same groups (target_groups()).

Each exporter is listed on its own evidence. sys-exporter, the heartbeat, is a
target while its node is Online; every other exporter the node reported is a
target while its own last probe answered, whatever the node's status. So under
`ip_forward=0` (bridge exporters time out, host-network nic-exporter answers) the
node is Offline, sys-exporter and the other bridge exporters leave their files,
and nic-exporter stays in nic-exporter.json: the NIC bandwidth chart keeps
working. What left the files is still visible on the master's own /metrics
(mac_node_up, mac_node_exporter_up), where alert rules can fire on it.

Writes are atomic: the new content goes to a temporary file in the same
directory, is fsynced, renamed over the old file with os.replace, and the
directory is fsynced, so Prometheus (which watches the directory) only ever
reads a whole old file or a whole new one. A file is rewritten only when its
content changes, holds `[]` when there are no targets, and is never deleted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from contract.atomicfile import write_atomically
from contract.services import BY_NAME, SYS_EXPORTER
from inventory.choices import NodeStatus

# The cluster_name label when MAC_CLUSTER_NAME is not set.
DEFAULT_CLUSTER_NAME = "mac"

# mango-sdk-agent is an HTTP API, not an exporter: it has no /metrics to scrape.
SCRAPED_SERVICES: tuple[str, ...] = tuple(name for name in BY_NAME if name != "mango-sdk-agent")


def target_file(sd_dir: Path, service: str) -> Path:
    return Path(sd_dir) / f"{service}.json"


def _address(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def node_targets(node: Mapping) -> list[str]:
    """The jobs (service names) in whose files the node is listed now.

    The mapping needs status, exporters (what the node reported) and exporter_health
    (the sweep's last {service: answered}). A service the node did not report is
    never listed, even if it answers: the agent says what it runs.
    """
    health = node.get("exporter_health") or {}
    reported = node.get("exporters") or ()
    names = []
    for name in SCRAPED_SERVICES:
        if name == SYS_EXPORTER.name:
            # Always scraped while the node is Online, reported or not: every agent runs it.
            listed = node["status"] == NodeStatus.ONLINE
        else:
            listed = name in reported and health.get(name) is True
        if listed:
            names.append(name)
    return names


def target_groups(
    nodes: Iterable[Mapping],
    services: Iterable[str] = SCRAPED_SERVICES,
    *,
    cluster_name: str = DEFAULT_CLUSTER_NAME,
) -> dict[str, list[str]]:
    """{service: [one target group per node, as a JSON object]} (see node_targets()).

    The one place that decides which targets exist and with which labels: the
    file-SD files (render_targets) and the http_sd endpoint (scraping.httpsd)
    both serve these groups. Each node mapping needs id, hostname, ip, gpu_vendor,
    maintenance, status, exporters and exporter_health; groups come in node-id order.
    """
    lines: dict[str, list[str]] = {name: [] for name in services}
    for node in sorted(nodes, key=lambda row: row["id"]):
        wanted = [name for name in node_targets(node) if name in lines]
        if not wanted:
            continue
        labels = {
            "cluster_name": cluster_name,
            "gpu_vendor": node["gpu_vendor"],
            "hostname": node["hostname"],
            "maintenance": "true" if node["maintenance"] else "false",
            "node": str(node["id"]),
        }
        # Serialised once per node, shared by its jobs: at 10,000 nodes this
        # rendering runs every sweep, before we know whether anything changed.
        labels_json = json.dumps(labels, sort_keys=True, separators=(",", ":"))
        for name in wanted:
            address = json.dumps(_address(node["ip"], BY_NAME[name].port))
            lines[name].append(f'{{"labels":{labels_json},"targets":[{address}]}}')
    return lines


def render_targets(
    nodes: Iterable[Mapping], *, cluster_name: str = DEFAULT_CLUSTER_NAME
) -> dict[str, bytes]:
    """{service: file content} for every scraped service (see target_groups())."""
    groups = target_groups(nodes, cluster_name=cluster_name)
    return {name: dump_groups(items) for name, items in groups.items()}


def dump_groups(lines: list[str]) -> bytes:
    """Target groups as one JSON list: the file-SD file, and the http_sd answer."""
    if not lines:
        return b"[]\n"
    # One target group per line: diffable, and still one JSON document.
    return ("[\n" + ",\n".join(lines) + "\n]\n").encode()


def write_targets(
    nodes: Iterable[Mapping], sd_dir: Path, *, cluster_name: str = DEFAULT_CLUSTER_NAME
) -> list[str]:
    """Write every job's file whose content changed; returns the services rewritten."""
    sd_dir = Path(sd_dir)
    sd_dir.mkdir(parents=True, exist_ok=True)
    changed = []
    for service, content in render_targets(nodes, cluster_name=cluster_name).items():
        path = target_file(sd_dir, service)
        try:
            if path.read_bytes() == content:
                continue
        except FileNotFoundError:
            pass
        write_atomically(path, content)
        changed.append(service)
    return changed


def ensure_target_files(sd_dir: Path) -> list[str]:
    """Create the missing job files as `[]` (Prometheus starts cleanly); keep existing ones."""
    sd_dir = Path(sd_dir)
    sd_dir.mkdir(parents=True, exist_ok=True)
    created = []
    for service in SCRAPED_SERVICES:
        path = target_file(sd_dir, service)
        if not path.exists():
            write_atomically(path, b"[]\n")
            created.append(service)
    return created

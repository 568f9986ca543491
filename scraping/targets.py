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

In scale-out mode (MAC_SCRAPE_SHARDS=N) the sweep also writes each scraper's share,
`<MAC_SD_DIR>/shard-K-of-N/<service>.json` for K in 0..N-1: the same groups, each node
in shard shard_of(node id, N) only, the split the http_sd endpoint makes. The scrapers
run beside the master and read these files, so they keep learning their targets while
the API is down (a node back online is scraped again at once, which is what lets the
backstop alert's hold let go: docs/alerts.md); http_sd serves Prometheus servers on
other hosts.

Writes are atomic: the new content goes to a temporary file in the same
directory, is fsynced, renamed over the old file with os.replace, and the
directory is fsynced, so Prometheus (which watches the directory) only ever
reads a whole old file or a whole new one. A file is rewritten only when its
content changes, holds `[]` when there are no targets, and is never deleted.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from contract.atomicfile import write_atomically
from contract.services import BY_NAME, SYS_EXPORTER
from inventory.choices import NodeStatus

# The cluster_name label when MAC_CLUSTER_NAME is not set.
DEFAULT_CLUSTER_NAME = "mac"

# The inventory's columns a node's targets are made from (node_targets, target_groups).
TARGET_FIELDS = (
    "id",
    "hostname",
    "ip",
    "gpu_vendor",
    "maintenance",
    "status",
    "exporters",
    "exporter_health",
)
# mango-sdk-agent is an HTTP API, not an exporter: it has no /metrics to scrape.
SCRAPED_SERVICES: tuple[str, ...] = tuple(name for name in BY_NAME if name != "mango-sdk-agent")


# The folders of the scrapers' shares: shard-K-of-N.
SHARD_FOLDER = re.compile(r"shard-(\d+)-of-(\d+)")


def target_file(sd_dir: Path, service: str) -> Path:
    return Path(sd_dir) / f"{service}.json"


def shard_folder(sd_dir: Path | str, shard: int, of: int) -> Path:
    """Where scraper `shard` of `of` finds its targets files."""
    return Path(sd_dir) / f"shard-{shard}-of-{of}"


def shard_of(node_id: int, of: int) -> int:
    """The shard (0..of-1) of a node: the low 64 bits of the MD5 of its id in decimal,
    big-endian, modulo `of`, as Prometheus's `hashmod` relabelling computes it over the
    `node` label. The id never changes while the node is registered, even when its IP
    does, so a node keeps its shard when others join or leave, and all of one node's
    jobs land on one scraper. Changing `of` moves nodes, as with any hashmod."""
    digest = hashlib.md5(str(node_id).encode(), usedforsecurity=False).digest()
    return int.from_bytes(digest[8:], "big") % of


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
    both serve these groups. Each node mapping needs TARGET_FIELDS; groups come in
    node-id order.
    """
    groups = _node_groups(nodes, services, cluster_name)
    return {name: [line for _, line in lines] for name, lines in groups.items()}


def _node_groups(
    nodes: Iterable[Mapping], services: Iterable[str], cluster_name: str
) -> dict[str, list[tuple[int, str]]]:
    """target_groups' lines, each with its node's id (the shares split them by it)."""
    lines: dict[str, list[tuple[int, str]]] = {name: [] for name in services}
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
            lines[name].append((node["id"], f'{{"labels":{labels_json},"targets":[{address}]}}'))
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
    nodes: Iterable[Mapping],
    sd_dir: Path,
    *,
    cluster_name: str = DEFAULT_CLUSTER_NAME,
    shards: int = 0,
) -> list[str]:
    """Write every job's file whose content changed, and with `shards` >= 1 each shard's
    (module docstring); returns the files rewritten, as paths under `sd_dir`
    (`dcgm-exporter`, `shard-1-of-2/dcgm-exporter`)."""
    sd_dir = Path(sd_dir)
    groups = _node_groups(nodes, SCRAPED_SERVICES, cluster_name)  # rendered once for all
    whole = {name: dump_groups([line for _, line in lines]) for name, lines in groups.items()}
    changed = _write_changed(sd_dir, whole)
    if shards < 1:
        return changed
    shard_by_node: dict[int, int] = {}
    shares = [{name: [] for name in groups} for _ in range(shards)]
    for name, lines in groups.items():
        for node_id, line in lines:
            if node_id not in shard_by_node:
                shard_by_node[node_id] = shard_of(node_id, shards)
            shares[shard_by_node[node_id]][name].append(line)
    for shard, mine in enumerate(shares):
        folder = shard_folder(sd_dir, shard, shards)
        rendered = {name: dump_groups(lines) for name, lines in mine.items()}
        changed += [f"{folder.name}/{name}" for name in _write_changed(folder, rendered)]
    return changed


def _write_changed(folder: Path, rendered: dict[str, bytes]) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    changed = []
    for service, content in rendered.items():
        path = target_file(folder, service)
        try:
            if path.read_bytes() == content:
                continue
        except FileNotFoundError:
            pass
        write_atomically(path, content)
        changed.append(service)
    return changed


def ensure_target_files(sd_dir: Path, shards: int = 0) -> list[str]:
    """Create the missing job files as `[]` (Prometheus and the scrapers start cleanly),
    those of each of `shards` shards too; keep existing ones. The shares of another
    number of scrapers (MAC_SCRAPE_SHARDS changed) are removed: no scraper reads them,
    and their nodes are in the new shares. Returns the files created."""
    sd_dir = Path(sd_dir)
    folders = [sd_dir, *(shard_folder(sd_dir, k, shards) for k in range(shards))]
    created = []
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        for service in SCRAPED_SERVICES:
            path = target_file(folder, service)
            if not path.exists():
                write_atomically(path, b"[]\n")
                created.append(str(path.relative_to(sd_dir).with_suffix("")))
    for old in sd_dir.iterdir():
        match = SHARD_FOLDER.fullmatch(old.name)
        if match and old.is_dir() and int(match.group(2)) != shards:
            shutil.rmtree(old, ignore_errors=True)
    return created

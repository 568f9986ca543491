"""The Prometheus file-SD targets the sweep writes: one JSON file per exporter job.

Layout: `<MAC_SD_DIR>/<service>.json` for every service Prometheus scrapes
(SCRAPED_SERVICES), e.g. `sys-exporter.json`, `dcgm-exporter.json`. Each file is
a list of target groups, one per Online node that runs the service:

    [{"targets": ["10.0.0.7:29101"],
      "labels": {"node": "42", "hostname": "gpu-07", "gpu_vendor": "nvidia",
                 "maintenance": "false"}}]

One file per job keeps the Prometheus configuration plain (one scrape job per
file, the job label is the service name) and means a change of, say, the GPU
nodes rewrites only the files that changed. Offline nodes are left out, which
is why the master also serves its own /metrics (an Offline node is still
visible there).

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

# mango-sdk-agent is an HTTP API, not an exporter: it has no /metrics to scrape.
SCRAPED_SERVICES: tuple[str, ...] = tuple(name for name in BY_NAME if name != "mango-sdk-agent")


def target_file(sd_dir: Path, service: str) -> Path:
    return Path(sd_dir) / f"{service}.json"


def _address(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def render_targets(nodes: Iterable[Mapping]) -> dict[str, bytes]:
    """{service: file content} for Online nodes.

    Each node mapping needs id, hostname, ip, gpu_vendor, maintenance and
    exporters (the services it reported). sys-exporter is always included: it
    is the heartbeat every agent runs.
    """
    lines: dict[str, list[str]] = {name: [] for name in SCRAPED_SERVICES}
    for node in sorted(nodes, key=lambda row: row["id"]):
        labels = {
            "gpu_vendor": node["gpu_vendor"],
            "hostname": node["hostname"],
            "maintenance": "true" if node["maintenance"] else "false",
            "node": str(node["id"]),
        }
        # Serialised once per node, shared by its jobs: at 10,000 nodes this
        # rendering runs every sweep, before we know whether anything changed.
        labels_json = json.dumps(labels, sort_keys=True, separators=(",", ":"))
        services = set(node.get("exporters") or ()) | {SYS_EXPORTER.name}
        for name in SCRAPED_SERVICES:
            if name in services:
                address = json.dumps(_address(node["ip"], BY_NAME[name].port))
                lines[name].append(f'{{"labels":{labels_json},"targets":[{address}]}}')
    return {name: _dump(items) for name, items in lines.items()}


def _dump(lines: list[str]) -> bytes:
    if not lines:
        return b"[]\n"
    # One target group per line: diffable, and still one JSON document.
    return ("[\n" + ",\n".join(lines) + "\n]\n").encode()


def write_targets(nodes: Iterable[Mapping], sd_dir: Path) -> list[str]:
    """Write every job's file whose content changed; returns the services rewritten."""
    sd_dir = Path(sd_dir)
    sd_dir.mkdir(parents=True, exist_ok=True)
    changed = []
    for service, content in render_targets(nodes).items():
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

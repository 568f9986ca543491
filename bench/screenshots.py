"""Screenshots of the dashboard for the docs: `python -m bench.screenshots [--out docs/img]`.

Stands up the real pieces on loopback: a throwaway PostgreSQL database with a
simulated fleet (some nodes offline, each with its diagnosis), Debian's
Prometheus holding 26 hours of one node's history, uvicorn serving macweb.asgi,
and headless Chromium that logs in and takes the pictures. The history is
synthetic hardware readings (CPU, memory, eight GPUs, two RDMA NICs) written
with `promtool tsdb create-blocks-from openmetrics`, under the exporters' own
metric names and the `node` label the targets file gives, so the charts go
through exactly the same queries as a live node's.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchdb import bench_database  # noqa: E402
from bench.webfleet import OPERATOR, make_operator, populate  # noqa: E402
from testkit import dashboard_servers as servers  # noqa: E402
from testkit.browser import log_in  # noqa: E402
from testkit.processes import stop_process  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
PROMTOOL = "/usr/bin/promtool"
HOURS = 26
STEP = 60
MAX_PNG_BYTES = 300 * 1024


def _busy(t: float, seed: float) -> float:
    """0..1: a training job from 20 h ago to 6 h ago, lighter work around it."""
    age_h = (time.time() - t) / 3600
    job = 0.88 if 6 < age_h < 20 else 0.18 + 0.12 * math.sin(t / 2400 + seed)
    return max(0.02, min(0.99, job + 0.04 * math.sin(t / 1500 + seed * 3)))


def history(node_id: int, host: str, hours: int = HOURS, step: int = STEP) -> str:
    """OpenMetrics text: the node's CPU, memory, GPU and RDMA series over `hours`."""
    rng = random.Random(node_id)
    end = int(time.time()) - 30
    times = list(range(end - hours * 3600, end, step))
    base = f'job="{{job}}",node="{node_id}",hostname="{{host}}",gpu_vendor="nvidia"'
    lines: list[str] = []

    def family(name: str, kind: str, series: dict[str, list[float]]) -> None:
        lines.append(f"# TYPE {name} {kind}")
        sample = f"{name}_total" if kind == "counter" else name
        for labels, values in series.items():
            for t, v in zip(times, values, strict=True):
                lines.append(f"{sample}{{{labels}}} {v:.3f} {t}")

    sys_labels = base.format(job="sys-exporter", host=host)
    cpu: dict[str, list[float]] = {}
    for n in range(8):
        idle, values = 1e6, []
        for t in times:
            idle += step * (1 - _busy(t, n * 0.1) * rng.uniform(0.9, 1.0))
            values.append(idle)
        cpu[f'{sys_labels},cpu="{n}",mode="idle"'] = values
    family("node_cpu_seconds", "counter", cpu)
    total = 512 * 2**30
    family("node_memory_MemTotal_bytes", "gauge", {sys_labels: [total] * len(times)})
    available = [total * (0.9 - 0.6 * _busy(t, 5)) for t in times]
    family("node_memory_MemAvailable_bytes", "gauge", {sys_labels: available})

    gpu_labels = base.format(job="dcgm-exporter", host=host)

    def per_gpu(fn) -> dict[str, list[float]]:
        return {
            f'{gpu_labels},gpu="{g}",UUID="GPU-{g:04d}",device="nvidia{g}",modelName="H100"': [
                fn(_busy(t, g * 0.37)) for t in times
            ]
            for g in range(8)
        }

    family("DCGM_FI_DEV_GPU_UTIL", "gauge", per_gpu(lambda b: round(100 * b)))
    family("DCGM_FI_DEV_FB_USED", "gauge", per_gpu(lambda b: 2000 + 76000 * min(1, b * 1.1)))
    family("DCGM_FI_DEV_GPU_TEMP", "gauge", per_gpu(lambda b: 34 + 42 * b))
    family("DCGM_FI_DEV_POWER_USAGE", "gauge", per_gpu(lambda b: 90 + 580 * b))

    nic_labels = base.format(job="nic-exporter", host=host)
    for direction, scale in (("rx", 38e9), ("tx", 31e9)):
        series = {}
        for n in range(2):
            counter, values = 0.0, []
            for t in times:
                counter += step * scale * _busy(t, 9 + n) * rng.uniform(0.85, 1.0)
                values.append(counter)
            labels = f'{nic_labels},device="mlx5_{n}",port="1",vendor="mellanox"'
            series[labels] = values
        family(f"rdma_{direction}_bytes", "counter", series)
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def prometheus_with_history(node_id: int, host: str, work: Path) -> servers.PrometheusServer:
    work.mkdir(parents=True, exist_ok=True)
    source = work / "history.om"
    source.write_text(history(node_id, host))
    subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(source), str(work / "data")],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return servers.start_prometheus([], work)


def story(node) -> None:
    """A past ip_forward outage in the node's history, as the sweep records one."""
    from datetime import timedelta

    from django.utils import timezone

    from inventory.models import NodeEvent

    now = timezone.now()
    for kind, message, hours in [
        ("offline", "sys-exporter timed out: IPv4 forwarding is off on the agent", 50),
        ("online", "sys-exporter answered", 49.6),
        ("maintenance_on", "driver update", 30),
        ("maintenance_off", "", 29.2),
    ]:
        NodeEvent.objects.create(
            node=node,
            hostname=node.hostname,
            kind=kind,
            message=message,
            actor="admin" if kind.startswith("maintenance") else "",
            created_at=now - timedelta(hours=hours),
        )


def take(out: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, bench_database("mac_screens") as db_url:
        populate(220, offline_every=9)
        make_operator()
        from inventory.models import Node

        node = Node.objects.get(hostname="node-a00-03")
        story(node)
        prometheus = prometheus_with_history(node.pk, node.hostname, Path(tmp) / "prometheus")
        env = {"DATABASE_URL": db_url, "MAC_PROMETHEUS_URL": prometheus.url}
        server, url = servers.start_uvicorn(env)
        shots = []
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(
                    executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
                )
                light = browser.new_context(viewport={"width": 1440, "height": 980})
                page = light.new_page()
                log_in(page, url, *OPERATOR)
                page.wait_for_selector('#live[data-state="live"]')
                shots.append(out / "fleet.png")
                page.screenshot(path=shots[-1])

                dark = browser.new_context(
                    viewport={"width": 1360, "height": 900},
                    color_scheme="dark",
                    storage_state=light.storage_state(),
                )
                page = dark.new_page()
                page.goto(f"{url}/nodes/{node.pk}/")
                page.click('button[data-range="24h"]')
                page.wait_for_function(
                    "document.querySelectorAll('figure.chart canvas').length === 7"
                )
                page.wait_for_timeout(500)
                shots.append(out / "node.png")
                page.screenshot(path=shots[-1], full_page=True)
                browser.close()
        finally:
            stop_process(server)
            prometheus.stop()
    return shots


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = ap.parse_args(argv)
    for tool in (CHROMIUM, PROMTOOL, servers.PROMETHEUS):
        if not os.path.exists(tool):
            print(f"Error: {tool} is missing; run scripts/bootstrap.", file=sys.stderr)
            return 1
    args.out.mkdir(parents=True, exist_ok=True)
    for shot in take(args.out):
        size = shot.stat().st_size
        print(f"{shot} {size // 1024} KiB")
        if size > MAX_PNG_BYTES:
            print(f"Warning: {shot} is over {MAX_PNG_BYTES // 1024} KiB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Screenshots of the dashboard for the docs: `python -m bench.screenshots [--out docs/img]`.

Stands up what `MAC_SIMULATED_FLEET=200 scripts/run` shows, on loopback: a simulated
fleet of 200 nodes with hardware profiles (testkit.simfleet: NVIDIA, AMD, MangoBoost
and CPU nodes, a few failing as scripts/run makes them) registered over HTTP with
uvicorn serving macweb.asgi on a throwaway PostgreSQL database, one sweep, Debian's
Prometheus scraping the fleet through the sweep's targets files, and headless
Chromium that logs in and takes the pictures. So that the charts show a day, the
Prometheus starts with 26 hours of an NVIDIA and an AMD node's past, written with
`promtool tsdb create-blocks-from openmetrics` from the same simulated nodes' pages
at past times, under the labels the targets files give them: the live scrapes
continue the same series.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchdb import bench_database  # noqa: E402
from bench.webfleet import OPERATOR, make_operator  # noqa: E402
from testkit import dashboard_servers as servers  # noqa: E402
from testkit.browser import log_in  # noqa: E402
from testkit.ports import free_port  # noqa: E402
from testkit.processes import stop_process  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
PROMTOOL = "/usr/bin/promtool"
HOURS = 26
STEP = 60
MAX_PNG_BYTES = 300 * 1024
NODES = 200
BASE = "127.31.0.0"
# What the dashboard's charts read (macweb.dashboard.charts), per exporter.
CHARTED = {
    "sys-exporter": ("node_cpu_seconds", "node_memory_MemTotal_bytes",
                     "node_memory_MemAvailable_bytes"),
    "dcgm-exporter": ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_TEMP",
                      "DCGM_FI_DEV_POWER_USAGE"),
    "rocm-exporter": ("gpu_gfx_activity", "gpu_used_vram", "gpu_junction_temperature",
                      "gpu_power_usage"),
    "nic-exporter": ("rdma_rx_bytes", "rdma_tx_bytes"),
}  # fmt: skip


def target_labels(sd_dir: Path, service: str, ip: str) -> dict[str, str]:
    """The labels Prometheus gives the node's target of `service` (job and instance too)."""
    for group in json.loads((sd_dir / f"{service}.json").read_text()):
        for target in group["targets"]:
            if target.startswith(f"{ip}:"):
                return {**group["labels"], "job": service, "instance": target}
    raise LookupError(f"{ip} has no {service} target in {sd_dir}")


def _charted(line: str, wanted: tuple[str, ...]) -> bool:
    name = line.split(" ")[2] if line.startswith("# ") else line
    return name.startswith(wanted)


def history(node, sd_dir: Path, sim_now: float, hours: int = HOURS, step: int = STEP) -> str:
    """OpenMetrics text: the simulated node's charted families over the last `hours`."""
    from prometheus_client.parser import text_string_to_metric_families

    from testkit.simfleet.profiles import SimHardware

    clock = [0.0]
    past = SimHardware(node.hardware.profile, node.hardware.seed, node.ip, lambda: clock[0])
    wall_end = int(time.time()) - 2 * step
    families: dict[str, tuple[str, list[tuple[str, str, str]]]] = {}
    services = {
        service: (wanted, target_labels(sd_dir, service, node.ip))
        for service, wanted in CHARTED.items()
        if service in node.ports
    }
    for wall in range(wall_end - hours * 3600, wall_end, step):
        clock[0] = sim_now - (time.time() - wall)
        for service, (wanted, extra) in services.items():
            page = past.page(service, node.hostname).decode()
            # Parse only the charted families' lines: a page holds ten times more.
            kept = "".join(line + "\n" for line in page.splitlines() if _charted(line, wanted))
            for family in text_string_to_metric_families(kept):
                kind, lines = families.setdefault(family.name, (family.type, []))
                for sample in family.samples:
                    labels = {
                        (f"exported_{k}" if k in extra else k): v for k, v in sample.labels.items()
                    }
                    labels.update(extra)
                    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
                    lines.append((inner, sample.name, f"{sample.value} {wall}"))
    out = []
    for name, (kind, lines) in families.items():
        out.append(f"# TYPE {name} {kind}")
        # OpenMetrics wants each series' samples together, in time order.
        for inner, sample, value in sorted(lines, key=lambda line: line[0]):
            out.append(f"{sample}{{{inner}}} {value}")
    out.append("# EOF")
    node.history_state = past.state  # what its faults left behind, for the live node
    return "\n".join(out) + "\n"


def register(fleet, url: str) -> None:
    from testkit.simfleet import register_fleet

    _, errors = asyncio.run_coroutine_threadsafe(
        register_fleet(fleet.fleet, url), fleet.loop
    ).result(300)
    if errors:
        raise RuntimeError(f"{len(errors)} nodes did not register, e.g. {errors[0]}")


def fail_some(fleet) -> None:
    """The faults scripts/run gives its simulated fleet: 4 % black-holed, 4 % refused, 2 % hung."""
    from testkit.simfleet import Mode, pick

    count = len(fleet.nodes)
    for mode, fraction, offset in ((Mode.BLACKHOLE, 0.04, 0), (Mode.HANG, 0.02, 1 / 3),
                                   (Mode.REFUSE, 0.04, 2 / 3)):  # fmt: skip
        for index in pick(count, fraction, offset):
            fleet.set_mode(index, "sys-exporter", mode)


def prometheus_with_history(
    nodes, sd_dir: Path, sim_now: float, port: int, work: Path, alertmanager: str
):
    """Prometheus with the nodes' simulated past, scraping the fleet, evaluating MAC's rules."""
    from scraping.promconfig import ALERT_RULES, render_prometheus_config

    work.mkdir(parents=True, exist_ok=True)
    for node in nodes:
        source = work / f"history-{node.ip}.om"
        source.write_text(history(node, sd_dir, sim_now))
        subprocess.run(
            [
                PROMTOOL,
                "tsdb",
                "create-blocks-from",
                "openmetrics",
                str(source),
                str(work / "data"),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    config = render_prometheus_config(
        str(sd_dir),
        [],
        scrape_interval="15s",
        rule_files=[str(ALERT_RULES)],
        alertmanagers=[alertmanager],
    )
    return servers.start_prometheus_config(config, work, port=port)


def alertmanager(work: Path, port: int):
    """Debian's Alertmanager with one silent receiver: the dashboard lists what fires."""
    from testkit.alerting import AlertmanagerServer

    work.mkdir(parents=True, exist_ok=True)
    config = work / "alertmanager.yml"
    config.write_text("route:\n  receiver: dashboard\nreceivers:\n  - name: dashboard\n")
    return AlertmanagerServer(config, work / "data", port=port).start()


def inject_faults(fleet, shown: dict, online: set[str]) -> None:
    """What the alerts panel and the GPU verdicts show: an XID 79 (fallen off the bus), an
    uncorrectable ECC error, a GPU lost from the bus."""
    nvidia = [n for n in fleet.nodes if n.hardware.profile.name == "nvidia" and n.ip in online]
    lost = next(n for n in nvidia if n is not shown["nvidia"])
    fleet.inject(shown["nvidia"].ip, "xid", 3, 79)
    fleet.inject(shown["amd"].ip, "ecc", 6)
    fleet.inject(lost.ip, "gpu_lost", 1)


def take(out: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    from testkit.simfleet import FleetThread
    from testkit.simfleet.profiles import DEFAULT_MIX

    with (
        tempfile.TemporaryDirectory() as tmp,
        bench_database("mac_screens") as db_url,
        FleetThread(NODES, base=BASE, profiles=DEFAULT_MIX, seed=1) as fleet,
    ):
        from healthcheck.sweep import run_sweep
        from inventory.models import Node

        make_operator()
        prometheus_port, alertmanager_port = free_port(), free_port()
        env = {
            "DATABASE_URL": db_url,
            "MAC_PROMETHEUS_URL": f"http://127.0.0.1:{prometheus_port}",
            "MAC_ALERTMANAGER_URL": f"http://127.0.0.1:{alertmanager_port}",
        }
        server, url = servers.start_uvicorn(env)
        prometheus = manager = None
        shots = []
        try:
            register(fleet, url)
            fail_some(fleet)
            sd_dir = Path(tmp) / "targets"
            run_sweep(sd_dir=sd_dir)
            online = set(Node.objects.filter(status="online").values_list("ip", flat=True))
            shown = {}
            for node in fleet.nodes:
                vendor = node.hardware.profile.name
                if vendor in ("nvidia", "amd") and node.ip in online and not node.hardware.idle:
                    shown.setdefault(vendor, node)
            manager = alertmanager(Path(tmp) / "alertmanager", alertmanager_port)
            prometheus = prometheus_with_history(
                shown.values(),
                sd_dir,
                fleet.fleet.clock(),
                prometheus_port,
                Path(tmp) / "prom",
                manager.url,
            )
            for node in shown.values():  # the live node goes on from its simulated past
                fleet.loop_call(setattr, node.hardware, "state", node.history_state)
            ids = {v: Node.objects.get(ip=n.ip).pk for v, n in shown.items()}
            prometheus.wait_for(f'rate(rdma_rx_bytes_total{{node="{ids["amd"]}"}}[1m])', 90)
            inject_faults(fleet, shown, online)
            wanted = {"GpuXidError", "GpuEccUncorrectableErrors", "GpuFellOffTheBus"}
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                firing = {a["labels"]["alertname"] for a in manager.get("/api/v2/alerts")}
                if wanted <= firing:
                    break
                time.sleep(2)
            run_sweep(sd_dir=sd_dir)  # "last seen" just now, and the GPU verdicts read
            from alerting.client import Alertmanager
            from alerting.nodealerts import post_node_alerts

            post_node_alerts(Alertmanager(manager.url, 5))  # the master's own GPU alerts
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

                # 1500 px: where the Exporters card once cut its Scrape column.
                dark = browser.new_context(
                    viewport={"width": 1500, "height": 900},
                    color_scheme="dark",
                    storage_state=light.storage_state(),
                )
                page = dark.new_page()
                for vendor, name in (("nvidia", "node.png"), ("amd", "node-amd.png")):
                    page.goto(f"{url}/nodes/{ids[vendor]}/")
                    page.click('button[data-range="24h"]')
                    page.wait_for_timeout(300)  # the charts start loading the day
                    page.wait_for_function(
                        "document.querySelectorAll('figure.chart canvas').length === 8"
                        " && !document.querySelector('figure.chart.loading')",
                        timeout=120_000,
                    )
                    page.wait_for_timeout(500)
                    shots.append(out / name)
                    page.screenshot(path=shots[-1], full_page=True)
                browser.close()
        finally:
            stop_process(server)
            if prometheus is not None:
                prometheus.stop()
            if manager is not None:
                manager.stop()
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

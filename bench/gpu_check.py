"""Check dcgm-exporter against nvidia-smi on a machine with real NVIDIA GPUs.

Starts ``python -m exporters dcgm-exporter`` on a free loopback port, scrapes it,
asks ``nvidia-smi`` the same questions and compares GPU by GPU: identity (UUID,
model, PCI bus id, driver version) must match exactly, live readings within a
tolerance (they are sampled a few milliseconds apart). Prints a table and exits
non-zero on any mismatch; with ``$OUT`` set, also writes ``$OUT/gpu_check.txt``.

Run: ``.venv/bin/python -m bench.gpu_check`` (about 10 s).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from testkit.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
QUERY = (
    "index,uuid,pci.bus_id,name,driver_version,temperature.gpu,memory.used,memory.free,"
    "power.draw,clocks.sm,clocks.mem,utilization.gpu"
)
# metric -> (nvidia-smi column, absolute tolerance)
LIVE = {
    "DCGM_FI_DEV_GPU_TEMP": ("temperature.gpu", 3.0),
    "DCGM_FI_DEV_FB_USED": ("memory.used", 512.0),
    "DCGM_FI_DEV_FB_FREE": ("memory.free", 512.0),
    "DCGM_FI_DEV_POWER_USAGE": ("power.draw", 60.0),
    "DCGM_FI_DEV_SM_CLOCK": ("clocks.sm", 300.0),
    "DCGM_FI_DEV_MEM_CLOCK": ("clocks.mem", 300.0),
}


def nvidia_smi() -> dict[str, dict[str, str]]:
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout  # fmt: skip
    columns = QUERY.split(",")
    rows = [dict(zip(columns, (v.strip() for v in line.split(",")), strict=True))
            for line in out.strip().splitlines()]  # fmt: skip
    return {row["index"]: row for row in rows}


def scrape(port: int) -> dict[str, dict[str, tuple[dict, float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    found: dict[str, dict[str, tuple[dict, float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "gpu" in sample.labels and sample.name.startswith("DCGM_"):
                found.setdefault(sample.labels["gpu"], {})[sample.name] = (
                    sample.labels,
                    sample.value,
                )
    return found


def main() -> int:
    if shutil.which("nvidia-smi") is None:
        print("Error: nvidia-smi not found: run this on a machine with NVIDIA GPUs and driver.")
        return 2
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporters", "dcgm-exporter", "--bind", "127.0.0.1",
         "--port", str(port)], cwd=ROOT,
    )  # fmt: skip
    lines: list[str] = []
    failures = 0
    try:
        deadline = time.monotonic() + 30
        metrics = {}
        while time.monotonic() < deadline and not metrics:
            try:
                metrics = scrape(port)
            except OSError:
                time.sleep(0.5)
        smi = nvidia_smi()
        lines.append(f"GPUs: nvidia-smi {len(smi)}, dcgm-exporter {len(metrics)}")
        failures += len(smi) != len(metrics)
        for index, row in sorted(smi.items()):
            got = metrics.get(index, {})
            labels = next(iter(got.values()), ({}, 0))[0]
            identity = {
                "UUID": row["uuid"],
                "modelName": row["name"],
                "DCGM_FI_DRIVER_VERSION": row["driver_version"],
            }
            for key, want in identity.items():
                ok = labels.get(key) == want
                failures += not ok
                verdict = "ok" if ok else "MISMATCH"
                lines.append(f"gpu {index} {key}: {labels.get(key)!r} vs {want!r} {verdict}")
            bus_ok = labels.get("pci_bus_id", "").lower() == row["pci.bus_id"].lower()
            failures += not bus_ok
            lines.append(
                f"gpu {index} pci_bus_id: {labels.get('pci_bus_id')} vs {row['pci.bus_id']}"
            )
            for metric, (column, tolerance) in LIVE.items():
                if metric not in got or row[column] in ("[N/A]", "N/A", ""):
                    lines.append(f"gpu {index} {metric}: absent (nvidia-smi {row[column]})")
                    continue
                value, want = got[metric][1], float(row[column])
                ok = abs(value - want) <= tolerance
                failures += not ok
                lines.append(
                    f"gpu {index} {metric}: {value:g} vs {want:g} {'ok' if ok else 'MISMATCH'}"
                )
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    lines.append(f"exporter exit code {proc.returncode}; {failures} mismatch(es)")
    report = "\n".join(lines)
    print(report)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "gpu_check.txt").write_text(report + "\n")
    return 1 if failures or proc.returncode != 0 else 0


if __name__ == "__main__":
    sys.exit(main())

"""dcgm-exporter's names, types, help and units checked against NVIDIA's own counter lists.

``etc/default-counters.csv`` and ``etc/dcp-metrics-included.csv`` are NVIDIA
dcgm-exporter's, read from the captures folder (tests/fixtures/captured/MANIFEST.md
names the commit, licence and sha256; without them the tests skip). Each line is
``FIELD, prometheus type, help``; a line commented out is a field NVIDIA knows but
leaves off by default. MAC's dcgm-exporter runs here on the recorded H200s of
testkit/fakes/nvml.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from exporters.nvidia import LABELS
from testkit.fakes.nvml import two_h200s
from tests.exporters.captures import capture
from tests.exporters.test_nvidia import GPU0, Clock, exporter_for

CAPTURE = "NVIDIA/dcgm-exporter/etc"

# What MAC serves that NVIDIA's current lists do not say the same way, and why.
KNOWN_DEVIATIONS = {
    # In default-counters.csv until NVIDIA PR #357 (July 2024) swapped them for
    # DCGM_FI_PROF_PCIE_{TX,RX}_BYTES, typed "counter" there although NVML returns KB/s.
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": "gauge",
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": "gauge",
    # DCGM's older name of DCGM_FI_DEV_CLOCKS_EVENT_REASONS, which NVIDIA uses since 4.0.
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "gauge",
    # NVIDIA: "reported XIDs during last window" (a count over a sliding window);
    # MAC counts since the exporter started, so increase() works on it.
    "DCGM_EXP_XID_ERRORS_COUNT": "counter",
}


@dataclass(frozen=True)
class Line:
    field: str
    kind: str
    help: str
    enabled: bool


def nvidia_fields(name: str) -> dict[str, Line]:
    """FIELD -> its line in one of NVIDIA's CSV files, enabled or commented out."""
    found = {}
    for raw in capture(f"{CAPTURE}/{name}").read_text().splitlines():
        text = raw.strip()
        enabled = not text.startswith("#")
        text = text.lstrip("#").strip()
        parts = [part.strip() for part in text.split(",", 2)]
        if len(parts) == 3 and parts[0].startswith(("DCGM_FI_", "DCGM_EXP_")):
            found[parts[0]] = Line(parts[0], parts[1], parts[2], enabled)
    return found


@pytest.fixture(scope="module")
def served() -> dict:
    """MAC's DCGM families on two H200s, from the second scrape on (GPM needs two samples)."""
    nvml, clock = two_h200s(), Clock()
    exporter = exporter_for(nvml, clock)
    list(exporter.registry.collect())
    clock.now += 15
    return {f.name: f for f in exporter.registry.collect() if f.name.startswith("DCGM_")}


def test_the_csv_files_read_as_nvidia_wrote_them():
    default = nvidia_fields("default-counters.csv")
    # Read by hand: "DCGM_FI_DEV_DEC_UTIL ,     gauge, Decoder utilization (in %)."
    assert default["DCGM_FI_DEV_DEC_UTIL"] == Line(
        "DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", True
    )
    assert default["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"].enabled is False
    assert sum(line.enabled for line in default.values()) == 26  # 25 metrics and one label


def test_every_field_nvidia_enables_by_default_is_served_with_its_type_and_help(served):
    for line in nvidia_fields("default-counters.csv").values():
        if not line.enabled:
            continue
        if line.kind == "label":
            assert line.field in LABELS, line.field
            continue
        family = served.get(line.field)
        assert family is not None, f"{line.field} is in NVIDIA's defaults, MAC does not serve it"
        assert (family.type, family.documentation) == (line.kind, line.help), line.field
        assert {s.name for s in family.samples} == {line.field}  # no _total added


def test_every_other_dcgm_family_mac_serves_is_one_nvidia_lists_the_same_way(served):
    known = {**nvidia_fields("dcp-metrics-included.csv"), **nvidia_fields("default-counters.csv")}
    for name, family in served.items():
        if name in KNOWN_DEVIATIONS:
            assert name not in known or (known[name].kind, known[name].help) != (
                family.type,
                family.documentation,
            ), f"{name} now matches NVIDIA's list: drop it from KNOWN_DEVIATIONS"
            assert family.type == KNOWN_DEVIATIONS[name], name
            continue
        assert name in known, f"{name} is not a field NVIDIA lists"
        assert (family.type, family.documentation) == (known[name].kind, known[name].help), name


def test_the_units_nvidia_states_are_the_units_mac_serves(served):
    def value(name: str) -> float:
        return next(s.value for s in served[name].samples if s.labels == GPU0)

    # "Power draw (in W).": NVML says 512345 mW on GPU 0 -> 512345 / 1000 W.
    assert value("DCGM_FI_DEV_POWER_USAGE") == 512345 / 1000
    # "Framebuffer memory used (in MiB).": 81604378624 bytes // 1048576 = 77824 MiB.
    assert value("DCGM_FI_DEV_FB_USED") == 81604378624 // 1048576 == 77824
    # "Total energy consumption since boot (in mJ).": NVML's mJ, unchanged.
    assert value("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") == 9876543210
    # "Ratio of time the graphics engine is active.": GPM's 93.5 % as a ratio.
    assert value("DCGM_FI_PROF_GR_ENGINE_ACTIVE") == 0.935
    # "GPU temperature (in C).", "GPU utilization (in %).": as NVML gives them.
    assert (value("DCGM_FI_DEV_GPU_TEMP"), value("DCGM_FI_DEV_GPU_UTIL")) == (54, 87)


def test_every_gpu_sample_carries_dcgm_exporters_labels(served):
    # dcgm-exporter's render template (internal/pkg/rendermetrics/render_metrics.go)
    # writes gpu, UUID, pci_bus_id, device, modelName, then the host name and the
    # "label" fields of the CSV (DCGM_FI_DRIVER_VERSION). NVIDIA renamed Hostname to
    # hostname in d5e5f51 (May 2026); MAC keeps Hostname, because its targets carry
    # their own hostname (exporters/README.md, "Label collisions").
    labels = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}
    labels |= {
        line.field
        for line in nvidia_fields("default-counters.csv").values()
        if line.enabled and line.kind == "label"
    }
    for name, family in served.items():
        for sample in family.samples:
            assert set(sample.labels) - {"xid"} == labels, name

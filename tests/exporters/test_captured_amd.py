"""rocm-exporter against two AMD captures: a real amdsmi run, and AMD's own list of metrics.

Both are read from the captures folder (tests/fixtures/captured/MANIFEST.md names the
repositories, commits, licences and sha256 sums; without them the tests skip):

* amdsmi's ``tests/python_unittest/README.md``, whose "Unittest: verbose" block is
  AMD's run of amdsmi's Python integration tests on a Radeon RX 6900-class card
  (Navi 21), printed verbosely. ``ReplayAmdSmi`` answers each amdsmi call MAC makes
  with what that run printed (the first answer, where a call ran twice), and raises
  where the run raised or never asked.
* device-metrics-exporter's ``docs/configuration/metricslist.md``: its list of metrics,
  their units and the labels of its array fields.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from prometheus_client.core import Metric

from exporters.amd import LABELS, AmdGpuSource
from exporters.runtime import Exporter
from node.host import Roots
from testkit.fakes.amdsmi import FakeAmdSmi
from tests.exporters.captures import capture
from tests.exporters.test_amd import AMD_ROOTS

AMDSMI_README = "ROCm/amdsmi/tests/python_unittest/README.md"
METRICS_LIST = "ROCm/device-metrics-exporter/docs/configuration/metricslist.md"
VERBOSE_HEADING = "### Unittest: verbose (with print statements)"
# The families whose example lines in metricslist.md carry the full per-GPU label set.
ARRAY_EXAMPLES = ("gpu_clock", "gpu_xgmi_link_rx", "gpu_xgmi_link_tx")

SECTION = re.compile(r"^###Test (amdsmi_\w+)")
BDF = re.compile(r"^###Test Processor \d+, bdf: (\S+)")
# "  asic_info['market_name'] is: NAVI21", "  pcie_info['pcie_metric']['pcie_speed'] is: 16000 MT/s"
KEYED = re.compile(r"^\s+\w+((?:\['\w+'\])+) is: (.*)$")
# "  Current clock for domain GFX is: 500", "  Current temperature for HOTSPOT is: 35"
SENTENCE = re.compile(r"^\s+(Current|Max|Min) (clock|temperature) for (?:domain )?(\w+) is: (\S+)")
UUID = re.compile(r"^\s+uuid is: (\S+)")


def verbose_run() -> str:
    """The ``~~~shell`` block under the "Unittest: verbose" heading of amdsmi's README."""
    lines = capture(AMDSMI_README).read_text().splitlines()
    start = lines.index("~~~shell", lines.index(VERBOSE_HEADING)) + 1
    return "\n".join(lines[start : lines.index("~~~", start)]) + "\n"


def metrics_list() -> str:
    return capture(METRICS_LIST).read_text()


def _value(text: str):
    """What amdsmi returned, from what the run printed: ints, or the text ("N/A", "0x...")."""
    number = text.split()[0]  # the test appends units: "9 %", "16000 MT/s"
    return int(number) if number.isdigit() else text


class ReplayAmdSmi:
    """amdsmi for one GPU, answering from the captured run."""

    class AmdSmiException(Exception):
        pass

    AmdSmiTemperatureType = SimpleNamespace(EDGE="EDGE", HOTSPOT="HOTSPOT", VRAM="VRAM")
    AmdSmiTemperatureMetric = SimpleNamespace(CURRENT="Current")
    AmdSmiClkType = SimpleNamespace(GFX="GFX", MEM="MEM")
    AmdSmiGpuBlock = SimpleNamespace(UMC="UMC", SDMA="SDMA", GFX="GFX", MMHUB="MMHUB")

    def __init__(self, text: str):
        self.answers: dict[str, dict] = {}
        self.failed: dict[str, str] = {}
        self.bdf = ""
        section, error_in = "", ""
        for line in text.splitlines():
            if error_in:  # the error code and its text follow on the next line
                self.failed.setdefault(error_in, line.strip())
                error_in = ""
            if match := BDF.match(line):
                self.bdf = self.bdf or match.group(1)
            elif match := SECTION.match(line):
                section = match.group(1)
            elif "[ERROR]" in line and section:
                error_in = section
            elif section and (match := KEYED.match(line)):
                keys = re.findall(r"\['(\w+)'\]", match.group(1))
                node = self.answers.setdefault(section, {})
                for key in keys[:-1]:
                    node = node.setdefault(key, {})
                node.setdefault(keys[-1], _value(match.group(2)))
            elif section and (match := SENTENCE.match(line)):
                which, _, domain, value = match.groups()
                self.answers.setdefault(section, {}).setdefault((which, domain), _value(value))
            elif section and (match := UUID.match(line)):
                self.answers.setdefault("amdsmi_get_gpu_device_uuid", {"uuid": match.group(1)})

    def _answer(self, call: str) -> dict:
        """What ``call`` answered in the run; its error where it only ever failed."""
        if call in self.answers:
            return self.answers[call]
        if call in self.failed:
            raise self.AmdSmiException(self.failed[call])
        raise self.AmdSmiException(f"{call} was not called in the captured run")

    def amdsmi_init(self):
        pass

    def amdsmi_get_processor_handles(self):
        return ["processor 0"]

    def amdsmi_get_gpu_device_bdf(self, handle):
        return self.bdf

    def amdsmi_get_gpu_device_uuid(self, handle):
        return self._answer("amdsmi_get_gpu_device_uuid")["uuid"]

    def amdsmi_get_gpu_asic_info(self, handle):
        return self._answer("amdsmi_get_gpu_asic_info")

    def amdsmi_get_gpu_kfd_info(self, handle):
        return self._answer("amdsmi_get_gpu_kfd_info")

    def amdsmi_get_gpu_activity(self, handle):
        return self._answer("amdsmi_get_gpu_activity")

    def amdsmi_get_gpu_vram_usage(self, handle):
        return self._answer("amdsmi_get_gpu_vram_usage")

    def amdsmi_get_power_info(self, handle):
        return self._answer("amdsmi_get_power_info")

    def amdsmi_get_energy_count(self, handle):
        return self._answer("amdsmi_get_energy_count")

    def amdsmi_get_gpu_ecc_count(self, handle, block):
        return self._answer("amdsmi_get_gpu_ecc_count")

    def amdsmi_get_pcie_info(self, handle):
        return self._answer("amdsmi_get_pcie_info")

    def amdsmi_get_gpu_metrics_info(self, handle):
        return self._answer("amdsmi_get_gpu_metrics_info")

    def amdsmi_get_temp_metric(self, handle, kind, metric):
        found = self._answer("amdsmi_get_temp_metric").get((metric, kind))
        if found is None:
            raise self.AmdSmiException(f"no {metric} {kind} temperature in the captured run")
        return found

    def amdsmi_get_clock_info(self, handle, domain):
        clocks = self._answer("amdsmi_get_clock_info")
        if ("Current", domain) not in clocks:
            raise self.AmdSmiException(f"no {domain} clock in the captured run")
        return {
            "clk": clocks[("Current", domain)],
            "min_clk": clocks[("Min", domain)],
            "max_clk": clocks[("Max", domain)],
        }


@pytest.fixture(scope="module")
def navi21():
    """rocm-exporter's registry over the replayed run (no sysfs: amdsmi only)."""
    source = AmdGpuSource(Roots(sys_root="/nonexistent"), amdsmi=ReplayAmdSmi(verbose_run()))
    return Exporter("rocm-exporter", [source]).registry


NAVI21 = {
    "gpu_id": "0",
    # "uuid is: f8ff73bf-0000-1000-80ff-eb47a027de4d"
    "gpu_uuid": "f8ff73bf-0000-1000-80ff-eb47a027de4d",
    # kfd_info has no current_partition_id on this card: an unpartitioned GPU, 0.
    "gpu_partition_id": "0",
    # "asic_info['asic_serial'] is: 0xF8FFEB47A027DE4D", "asic_info['market_name'] is: NAVI21"
    "serial_number": "0xF8FFEB47A027DE4D",
    "card_model": "NAVI21",
    "card_vendor": "AMD",
}


def test_the_replay_reads_the_run_as_printed():
    run = verbose_run()
    # README lines 79 to 608: the command AMD ran, then what each test printed.
    assert run.startswith("/opt/rocm/share/amd_smi/tests/python_unittest/integration_test.py -v\n")
    assert len(run.splitlines()) == 530
    replay = ReplayAmdSmi(run)
    assert replay.bdf == "0000:43:00.0"
    # test_power_info printed average 39 W; the later walkthrough printed 31: first wins.
    assert replay.amdsmi_get_power_info("h")["average_socket_power"] == 39
    assert replay.amdsmi_get_power_info("h")["current_socket_power"] == "N/A"
    assert replay.amdsmi_get_pcie_info("h")["pcie_metric"]["pcie_speed"] == 16000
    with pytest.raises(ReplayAmdSmi.AmdSmiException, match="NOT_SUPPORTED"):
        replay.amdsmi_get_gpu_ecc_count("h", "UMC")


def test_a_real_amdsmi_run_reads_as_amds_names_and_units(navi21):
    registry, gpu = navi21, NAVI21
    # "engine_usage['gfx_activity'] is: 9 %", "engine_usage['umc_activity'] is: 0 %"
    assert registry.get_sample_value("gpu_gfx_activity", gpu) == 9
    assert registry.get_sample_value("gpu_umc_activity", gpu) == 0
    # "Current temperature for EDGE is: 31", "... HOTSPOT is: 35", "... VRAM is: 32"
    assert registry.get_sample_value("gpu_edge_temperature", gpu) == 31
    assert registry.get_sample_value("gpu_junction_temperature", gpu) == 35
    assert registry.get_sample_value("gpu_memory_temperature", gpu) == 32
    # "power_info['average_socket_power'] is: 39", current "N/A": power is the average.
    assert registry.get_sample_value("gpu_average_package_power", gpu) == 39
    assert registry.get_sample_value("gpu_power_usage", gpu) == 39
    assert registry.get_sample_value("gpu_package_power", gpu) is None
    # "pcie_info['pcie_metric']['pcie_speed'] is: 16000 MT/s": 16000 / 1000 = 16 GT/s.
    assert registry.get_sample_value("pcie_speed", gpu) == 16000 / 1000
    assert registry.get_sample_value("pcie_max_speed", gpu) == 16
    # "pcie_replay_count is: N/A": absent, never 0.
    assert registry.get_sample_value("pcie_replay_count", gpu) is None


def test_clocks_from_the_run_carry_amds_clock_types(navi21):
    registry, gpu = navi21, NAVI21
    # GFX: "Current ... is: 500", "Max ... is: 2575", "Min ... is: 500" -> sclk, "system".
    system = {**gpu, "clock_index": "0", "clock_type": "system"}
    assert registry.get_sample_value("gpu_clock", system) == 500
    assert registry.get_sample_value("gpu_max_clock", system) == 2575
    # MEM: current 96, max 1000, min 96 -> mclk, "memory".
    memory = {**gpu, "clock_index": "1", "clock_type": "memory"}
    assert registry.get_sample_value("gpu_clock", memory) == 96
    assert registry.get_sample_value("gpu_max_clock", memory) == 1000
    assert registry.get_sample_value("gpu_min_clock", memory) == 96


def test_what_the_card_refused_is_absent_and_the_gpu_still_healthy(navi21):
    registry, gpu = navi21, NAVI21
    # amdsmi_get_gpu_ecc_count: "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported".
    assert registry.get_sample_value("gpu_ecc_correct_total", gpu) is None
    assert registry.get_sample_value("gpu_health", gpu) == 1
    # The run never asked for VRAM usage or energy: no numbers are made up for them.
    assert registry.get_sample_value("gpu_used_vram", gpu) is None
    assert registry.get_sample_value("gpu_energy_consumed", gpu) is None
    assert registry.get_sample_value("gpu_nodes_total") == 1


# --- AMD's list of metrics ---------------------------------------------------------


def amd_metrics() -> dict[str, str]:
    """NAME -> description, from the tables of metricslist.md."""
    found = {}
    for line in metrics_list().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        for index, cell in enumerate(cells):
            match = re.match(r"^((?:GPU|PCIE)_[A-Z0-9_]+)\b", cell)
            if match and index + 1 < len(cells):
                found[match.group(1)] = cells[index + 1]
    return found


def amd_examples() -> dict[str, list[dict[str, str]]]:
    """family -> the label sets of its example lines (``gpu_clock{...} 22``) in the doc."""
    found: dict[str, list[dict[str, str]]] = {}
    for line in metrics_list().splitlines():
        match = re.match(r"^(gpu_\w+)\{(.*)\}\s+\S+$", line.strip())
        if match:
            pairs = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
            found.setdefault(match.group(1), []).append(pairs)
    return found


@pytest.fixture(scope="module")
def mac_families(navi21) -> dict[str, Metric]:
    """Every AMD family MAC serves, over sysfs, the recorded MI300X and the Navi 21 run."""
    replayed = navi21
    families = {}
    for registry in (
        Exporter("rocm-exporter", [AmdGpuSource(AMD_ROOTS, amdsmi=False)]).registry,
        Exporter("rocm-exporter", [AmdGpuSource(AMD_ROOTS, amdsmi=FakeAmdSmi())]).registry,
        replayed,
    ):
        for family in registry.collect():
            if family.name.startswith("mac_") or not family.samples:
                continue
            if family.name in families:
                families[family.name].samples.extend(family.samples)
            else:
                families[family.name] = family
    return families


def test_metricslist_is_read_as_amd_wrote_it():
    metrics = amd_metrics()
    # "| &check; | &check; | GPU_TOTAL_VRAM `[MI2xx, MI3xx]` | Total VRAM available in MB |"
    assert metrics["GPU_TOTAL_VRAM"] == "Total VRAM available in MB"
    assert amd_examples()["gpu_clock"][1]["clock_type"] == "system"


def test_every_family_mac_serves_is_one_amd_lists(mac_families):
    listed = amd_metrics()
    for name in mac_families:
        assert name.upper() in listed, f"{name} is not in device-metrics-exporter's list"


@pytest.mark.parametrize(
    ("family", "amd_says", "mac_says"),
    [
        ("gpu_total_vram", "in MB", "in MB"),
        ("gpu_used_vram", "in MB", "in MB"),
        ("gpu_power_usage", "in Watts", "in Watts"),
        ("gpu_average_package_power", "in Watts", "in Watts"),
        ("gpu_energy_consumed", "(uJ)", "micro Joules"),
        ("pcie_speed", "in GT/s", "in GT/s"),
        ("pcie_bandwidth", "in Mb/s", "in Mb/s"),
        ("gpu_clock", "in Mhz", "in MHz"),
        ("gpu_xgmi_link_rx", "in KB", "KB"),
        ("gpu_junction_temperature", "in Celsius", "in Celsius"),
        ("gpu_gfx_activity", "percentage (0 - 100)", "percentage (0 - 100)"),
    ],
)
def test_amds_units_are_the_units_mac_serves(family, amd_says, mac_says, mac_families):
    assert amd_says in amd_metrics()[family.upper()]
    assert mac_says in mac_families[family].documentation


def test_array_fields_have_amds_extra_labels_and_clock_types(mac_families):
    examples = amd_examples()
    for family in ARRAY_EXAMPLES:
        extra = {name for labels in examples[family] for name in labels} - _common(examples)
        served = {name for sample in mac_families[family].samples for name in sample.labels}
        assert extra <= served, family
    amd_types = {labels["clock_type"] for labels in examples["gpu_clock"]}
    served_types = {s.labels["clock_type"] for s in mac_families["gpu_clock"].samples}
    assert served_types <= amd_types == {"data", "system", "memory", "video", "soc"}


def test_the_per_gpu_labels_are_amds_but_the_ones_mac_leaves_to_its_targets(mac_families):
    common = _common(amd_examples())
    # hostname comes from MAC's scrape targets (exporters/README.md, "Label
    # collisions"); MAC does not read the compute partition type (spx, cpx...).
    assert common - set(LABELS) == {"hostname", "gpu_compute_partition_type"}
    for name, family in mac_families.items():
        for sample in family.samples:
            assert set(LABELS) <= set(sample.labels) or name == "gpu_nodes_total", name


def _common(examples: dict[str, list[dict[str, str]]]) -> set[str]:
    """The labels every full example line carries (the clock and XGMI ones): AMD's per-GPU set."""
    sets = [set(labels) for family in ARRAY_EXAMPLES for labels in examples[family]]
    return set.intersection(*sets)

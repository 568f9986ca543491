"""Simulated hardware: pages match the real exporters, values move, faults show, seeds repeat."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testkit.simfleet import FleetThread, loopback_base
from testkit.simfleet.hardware import BNXT_RE, MLX5, TOKEN, amd_gpus, nics, nvidia_gpus
from testkit.simfleet.model import Fault
from testkit.simfleet.profiles import PROFILES, SimHardware, assign, parse_mix


class Clock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def shape(text: str) -> set[tuple]:
    """(family, type, sample name, label names) of every sample: what must not drift."""
    return {
        (family.name, family.type, sample.name, tuple(sorted(sample.labels)))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def samples(text: str) -> dict[tuple, float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(text: str, name: str, **labels: str) -> float | None:
    for (sample, got), number in samples(text).items():
        # The parser names dcgm-exporter's suffix-less counters <name>_total.
        if sample in (name, name + "_total") and all(
            dict(got).get(k) == v for k, v in labels.items()
        ):
            return number
    return None


def node(profile: str, clock: Clock, seed: int = 7, key: str = "127.9.0.1") -> SimHardware:
    return SimHardware(PROFILES[profile], seed, key, clock)


@pytest.mark.parametrize(
    ("profile", "service", "real"),
    [
        ("nvidia", "dcgm-exporter", lambda: nvidia_gpus(8)),
        ("nvidia", "nic-exporter", lambda: nics(MLX5, 8)),
        ("amd", "rocm-exporter", lambda: amd_gpus(8)),
        ("amd", "nic-exporter", lambda: nics(BNXT_RE, 8)),
    ],
)
def test_simulated_pages_have_the_real_exporters_names_types_and_labels(profile, service, real):
    hardware = node(profile, Clock())
    page = hardware.page(service, "sim-node").decode()
    expected = real().replace("simfleet-template-host", "sim-node").replace(TOKEN, hardware.token)
    # XID counts and the verdict's evidence appear once a GPU had a fault: compare the rest.
    assert {s for s in shape(page)} == {
        s for s in shape(expected)
        if s[0] not in ("DCGM_EXP_XID_ERRORS_COUNT", "mac_gpu_health_evidence")
    }  # fmt: skip

    # Every series as the real exporter labels it (the boot is the simulated node's own, and
    # the template's GPUs had every XID: only the verdict's identity labels compare).
    def labels(text: str) -> set:
        return {
            tuple(item for item in k[1] if item[0] not in ("state", "action"))
            for k in samples(text)
            if k[0] != "mac_node_boot_info"
        }

    assert labels(page) <= labels(expected)


def test_gpu_utilisation_moves_and_power_and_temperature_follow_it():
    clock = Clock()
    hardware = node("nvidia", clock, key="127.9.0.3")
    readings = []
    for step in range(40):
        clock.now = 100 + 60 * step
        page = hardware.page("dcgm-exporter", "n").decode()
        readings.append(
            tuple(
                value(page, name, gpu="0")
                for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE",
                             "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
            )
        )  # fmt: skip
    utils = [r[0] for r in readings]
    assert max(utils) - min(utils) > 5
    busiest, calmest = max(readings), min(readings)
    assert busiest[1] > calmest[1] and busiest[2] > calmest[2]
    energy = [r[3] for r in readings]
    assert energy == sorted(energy)


def test_rdma_counters_rise_at_a_rate_a_400g_link_can_carry():
    clock = Clock(1000)
    hardware = node("amd", clock)
    first = value(hardware.page("nic-exporter", "n").decode(), "rdma_rx_bytes_total",
                  device="bnxt_re3")  # fmt: skip
    clock.now += 30
    second = value(hardware.page("nic-exporter", "n").decode(), "rdma_rx_bytes_total",
                   device="bnxt_re3")  # fmt: skip
    rate = (second - first) / 30
    assert 0 < rate <= 400e9 / 8


def test_a_lost_gpu_loses_its_readings_and_reports_xid_79():
    clock = Clock()
    hardware = node("nvidia", clock)
    hardware.inject(Fault.GPU_LOST, target=2)
    clock.now += 1
    page = hardware.page("dcgm-exporter", "n").decode()
    assert value(page, "mac_gpu_lost", gpu="2") == 1
    assert value(page, "DCGM_FI_DEV_XID_ERRORS", gpu="2") == 79
    assert value(page, "DCGM_FI_DEV_GPU_UTIL", gpu="2") is None
    assert value(page, "DCGM_FI_DEV_GPU_UTIL", gpu="1") is not None
    clock.now += 600
    page = hardware.page("dcgm-exporter", "n").decode()
    assert value(page, "mac_gpu_lost", gpu="2") == 0
    assert value(page, "DCGM_FI_DEV_GPU_UTIL", gpu="2") is not None
    # Back after a reset (a reboot): the exporter knows no XID, the count stays.
    assert value(page, "DCGM_FI_DEV_XID_ERRORS", gpu="2") == 0
    assert value(page, "DCGM_EXP_XID_ERRORS_COUNT", gpu="2", xid="79") == 1


def test_an_ecc_error_counts_on_both_vendors():
    for profile, service, name in (
        ("nvidia", "dcgm-exporter", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
        ("amd", "rocm-exporter", "gpu_ecc_uncorrect_total"),
    ):
        clock = Clock()
        hardware = node(profile, clock)
        label = "gpu" if profile == "nvidia" else "gpu_id"
        before = value(hardware.page(service, "n").decode(), name, **{label: "5"})
        hardware.inject(Fault.ECC, target=5)
        after = value(hardware.page(service, "n").decode(), name, **{label: "5"})
        assert after == before + 1


def test_a_link_flap_takes_the_port_down_and_stops_its_bytes():
    clock = Clock(500)
    hardware = node("nvidia", clock)
    hardware.inject(Fault.LINK_FLAP, target=1)
    clock.now += 10
    down = hardware.page("nic-exporter", "n").decode()
    assert value(down, "rdma_link_up", device="mlx5_1") == 0
    assert value(down, "node_infiniband_state_id", device="mlx5_1") == 1
    clock.now += 20
    still = hardware.page("nic-exporter", "n").decode()
    assert value(still, "rdma_rx_bytes_total", device="mlx5_1") == value(
        down, "rdma_rx_bytes_total", device="mlx5_1"
    )
    clock.now += 300
    up = hardware.page("nic-exporter", "n").decode()
    assert value(up, "rdma_link_up", device="mlx5_1") == 1
    assert value(up, "node_infiniband_link_downed_total", device="mlx5_1") == 1
    assert value(up, "rdma_rx_bytes_total", device="mlx5_1") > value(
        still, "rdma_rx_bytes_total", device="mlx5_1"
    )


def test_the_same_seed_gives_the_same_values_and_another_seed_others():
    pages = [
        "".join(
            line
            for line in node("nvidia", Clock(3600), seed=seed)
            .page("dcgm-exporter", "n")
            .decode()
            .splitlines(keepends=True)
            if "last_success_timestamp" not in line  # the wall clock, as the real exporter's
        )
        for seed in (1, 1, 2)
    ]
    assert pages[0] == pages[1]
    assert samples(pages[0]) != samples(pages[2])


def test_scheduled_faults_happen_over_a_day():
    clock = Clock(0)
    seen = set()
    for index in range(40):
        hardware = node("nvidia", clock, key=f"127.9.1.{index}")
        for step in range(0, 86400, 600):
            clock.now = step
            hardware.page("dcgm-exporter", "n")
        seen |= {event.fault for event in hardware.state.applied}
    assert seen == {Fault.XID, Fault.ECC, Fault.GPU_LOST, Fault.LINK_FLAP}


@pytest.mark.parametrize(
    ("mix", "error"),
    [
        ("nvidia=60,tpu=40", "unknown profile 'tpu'"),
        ("nvidia", "'nvidia' is not NAME=WEIGHT"),
        ("nvidia=a", "not a whole number"),
        ("nvidia=0,amd=0", "add up to 0"),
        ("amd=1,amd=2", "given twice"),
        ("amd=-1", "negative"),
    ],
)
def test_a_bad_mix_is_a_clear_error(mix, error):
    with pytest.raises(ValueError, match=error):
        parse_mix(mix)


def test_the_mix_is_kept_and_spread():
    profiles = [p.name for p in assign(100, parse_mix("nvidia=60,amd=30,cpu=10"))]
    assert profiles.count("nvidia") == 60 and profiles.count("amd") == 30
    assert {p for p in profiles[:10]} == {"nvidia", "amd", "cpu"}


def test_a_served_fleet_answers_each_profiles_exporters_over_real_sockets():
    with FleetThread(
        8, base=loopback_base(), profiles="nvidia=1,amd=1", seed=5, fault_rate=0
    ) as fleet:
        nvidia = next(n for n in fleet.nodes if n.hardware.profile.name == "nvidia")
        amd = next(n for n in fleet.nodes if n.hardware.profile.name == "amd")
        registration = nvidia.registration()
        assert {k: registration[k] for k in ("gpu_vendor", "gpu_model", "gpu_count")} == {
            "gpu_vendor": "nvidia", "gpu_model": "NVIDIA H200", "gpu_count": 8,
        }  # fmt: skip
        # The NICs as `mac start agent` reads them from the profile's sysfs tree.
        assert [(nic["ibdev"], nic["driver"]) for nic in registration["nics"]] == [
            (f"mlx5_{n}", "mlx5_core") for n in range(8)
        ]
        assert set(nvidia.exporters()) == {"sys-exporter", "sys-manager", "dcgm-exporter",
                                           "nic-exporter"}  # fmt: skip
        with urllib.request.urlopen(f"http://{nvidia.ip}:29150/metrics", timeout=5) as page:
            text = page.read().decode()
        assert value(text, "DCGM_FI_DEV_GPU_UTIL", gpu="7", Hostname=nvidia.hostname) is not None
        with urllib.request.urlopen(f"http://{amd.ip}:29200/metrics", timeout=5) as page:
            assert value(page.read().decode(), "gpu_gfx_activity", gpu_id="0") is not None
        fleet.inject(nvidia.ip, "gpu_lost", 3)
        with urllib.request.urlopen(f"http://{nvidia.ip}:29150/metrics", timeout=5) as page:
            assert value(page.read().decode(), "mac_gpu_lost", gpu="3") == 1


def test_a_bad_profiles_option_is_a_clear_command_line_error(capsys):
    from testkit.simfleet.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["--nodes", "3", "--profiles", "nvidia=60,tpu=40"])
    assert exited.value.code == 2
    assert "--profiles: unknown profile 'tpu'; known: nvidia, amd, mangoboost, cpu" in (
        capsys.readouterr().err
    )


def test_a_fleet_past_the_open_files_limit_is_split_over_processes(monkeypatch):
    from testkit.simfleet import cli

    monkeypatch.setattr(cli, "raise_nofile_limit", lambda: 1200)
    parts = cli.slices(1000, "127.40.0.0", 5)
    assert [count for _, count in parts] == [200] * 5
    assert parts[0][0] == "127.40.0.0"
    layout = cli.fleet_layout(1000, "127.40.0.0", "nvidia=1,cpu=1")
    addresses = [ip for ip, _ in layout]
    assert len(set(addresses)) == 1000 and addresses[200] == "127.40.0.201"
    # Each process serves the mix on its own slice, so the whole fleet keeps it.
    assert sum(profile.name == "nvidia" for _, profile in layout) == 500

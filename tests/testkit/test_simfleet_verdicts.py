"""The simulated fleet's GPU verdicts, and faults on demand through its control commands."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from contract.liveness import check_url
from contract.services import BY_NAME
from contract.verdicts import HealthAction, HealthState, parse_verdicts
from testkit.simfleet import FleetThread, loopback_base
from testkit.simfleet.model import Fault
from testkit.simfleet.profiles import PROFILES, SimHardware

ROOT = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def hardware(profile: str, clock: Clock, window: float = 60.0) -> SimHardware:
    return SimHardware(PROFILES[profile], 7, "127.9.0.1", clock, fault_rate=0, window=window)


def gpus(node: SimHardware) -> dict[str, tuple]:
    found = parse_verdicts(node.verdict_page("sim-node"))
    return {gpu.index: (gpu.state, gpu.action) for gpu in found.gpus}


def test_a_quiet_node_serves_eight_healthy_gpus_with_its_own_identities():
    node = hardware("nvidia", Clock())
    found = parse_verdicts(node.verdict_page("sim-node"))
    assert len(found.gpus) == 8 and {g.state for g in found.gpus} == {HealthState.HEALTHY}
    assert found.gpus[3].serial == f"1652{node.token}03"
    assert found.boot_id == node.boot_id and node.boot_id.startswith(node.token)
    other = SimHardware(PROFILES["nvidia"], 7, "127.9.0.2", Clock(), fault_rate=0)
    assert other.token != node.token


def test_xid_79_then_heal_then_the_window():
    clock = Clock()
    node = hardware("nvidia", clock, window=60)
    node.inject(Fault.XID, target=3, xid=79)
    clock.now += 1
    assert gpus(node)["3"] == (HealthState.UNHEALTHY, HealthAction.REBOOT)
    assert gpus(node)["2"] == (HealthState.HEALTHY, HealthAction.NONE)
    node.heal()  # an XID is an event: it stays for the window
    assert gpus(node)["3"][0] is HealthState.UNHEALTHY
    clock.now += 61
    assert gpus(node)["3"] == (HealthState.HEALTHY, HealthAction.NONE)


def test_a_lost_gpu_lasts_until_healed_when_injected_so():
    clock = Clock()
    node = hardware("nvidia", clock, window=10)
    node.inject(Fault.GPU_LOST, target=1, length=float("inf"))
    clock.now += 1000
    assert gpus(node)["1"] == (HealthState.UNHEALTHY, HealthAction.REBOOT)
    node.heal()
    clock.now += 1
    assert gpus(node)["1"] == (HealthState.HEALTHY, HealthAction.NONE)


@pytest.mark.parametrize(
    ("fault", "value", "verdict"),
    [
        (Fault.ECC, 0, (HealthState.UNHEALTHY, HealthAction.RESET_GPU)),
        (Fault.SBE, 0, (HealthState.DEGRADED, HealthAction.NONE)),
        (Fault.REMAP_PENDING, 0, (HealthState.DEGRADED, HealthAction.RESET_GPU)),
        (Fault.REMAP_FAILURE, 0, (HealthState.UNHEALTHY, HealthAction.INSPECT_HARDWARE)),
        (Fault.THERMAL, 0, (HealthState.DEGRADED, HealthAction.NONE)),
        (Fault.NVLINK, 0, (HealthState.DEGRADED, HealthAction.NONE)),
        (Fault.RECOVERY, 2, (HealthState.UNHEALTHY, HealthAction.REBOOT)),
    ],
)
def test_every_nvidia_fault_reaches_the_verdict(fault, value, verdict):
    clock = Clock()
    node = hardware("nvidia", clock)
    gpus(node)  # the counters' baseline
    node.inject(fault, target=5, xid=value)
    clock.now += 1
    assert gpus(node)["5"] == verdict


def test_amd_uncorrectable_ecc_the_health_flag_and_a_lost_gpu():
    clock = Clock()
    node = hardware("amd", clock)
    gpus(node)
    node.inject(Fault.ECC, target=2)
    node.inject(Fault.AMD_HEALTH, target=4)
    node.inject(Fault.GPU_LOST, target=6)
    clock.now += 1
    seen = gpus(node)
    assert seen["2"] == (HealthState.UNHEALTHY, HealthAction.REBOOT)
    assert seen["4"] == (HealthState.UNHEALTHY, HealthAction.REBOOT)
    assert "6" not in seen  # gone from amdsmi: the master counts it missing


def test_a_reboot_gives_a_new_boot_and_forgets_the_events():
    clock = Clock()
    node = hardware("nvidia", clock, window=3600)
    first = node.boot_id
    node.inject(Fault.XID, target=0, xid=48)
    clock.now += 1
    assert gpus(node)["0"][0] is HealthState.UNHEALTHY
    node.reboot()
    assert node.boot_id != first
    assert parse_verdicts(node.verdict_page("sim-node")).boot_id == node.boot_id
    assert gpus(node)["0"] == (HealthState.HEALTHY, HealthAction.NONE)


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    state = tmp_path_factory.mktemp("state")
    fleet = FleetThread(
        4, base=loopback_base(), profiles="nvidia=1,amd=1", fault_rate=0,
        evidence_window=30, control_dir=state / "simfleet",
    ).start()  # fmt: skip
    yield fleet, state
    fleet.stop()


def simfleet(state, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "testkit.simfleet", *args, "--state-dir", str(state)],
        capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
    )  # fmt: skip


def by_profile(fleet: FleetThread, name: str):
    return next(n for n in fleet.nodes if n.hardware and n.hardware.profile.name == name)


def test_the_probe_query_gets_the_verdict_lines_over_http(running):
    fleet, _ = running
    nvidia = by_profile(fleet, "nvidia")
    dcgm = BY_NAME["dcgm-exporter"]
    assert check_url(nvidia.ip, dcgm.port, dcgm.probe_target).ok
    url = f"http://{nvidia.ip}:{dcgm.port}{dcgm.probe_target}"
    with urllib.request.urlopen(url, timeout=5) as answer:
        page = answer.read()
    assert b"DCGM_FI_DEV_GPU_UTIL" not in page
    assert len(parse_verdicts(page).gpus) == 8


def test_inject_heal_and_reboot_from_the_command_line(running):
    fleet, state = running
    host = by_profile(fleet, "nvidia").hostname
    done = simfleet(state, "inject", host, "xid=79", "gpu=3")
    assert done.returncode == 0, done.stderr
    assert f"Injected XID 79 on GPU 3 of {host}" in done.stdout
    assert "GPU 3's verdict on the node is now unhealthy, action reboot." in done.stdout
    assert "An event: it counts for the evidence window" in done.stdout
    lost = simfleet(state, "inject", host, "gpu_lost", "gpu=1")
    assert "It lasts until healed: python -m testkit.simfleet heal " + host in lost.stdout
    healed = simfleet(state, "heal", host)
    assert healed.returncode == 0 and "ended gpu_lost on GPU 1" in healed.stdout
    assert "30 s after they happened" in healed.stdout
    rebooted = simfleet(state, "reboot", host)
    assert rebooted.returncode == 0 and "boot_id" in rebooted.stdout
    listed = simfleet(state, "nodes")
    assert host in listed.stdout and "healthy, none" in listed.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("inject", "sim-10-0-0-1", "xid=79"), "no simulated node is called 'sim-10-0-0-1'"),
        (("inject", "{nvidia}", "meteor"), "unknown fault 'meteor'. Faults: xid"),
        (("inject", "{nvidia}", "xid"), "xid needs a value"),
        (("inject", "{nvidia}", "xid=13", "gpu=9"), "has 8 GPUs (0 to 7); 9 is not one"),
        (("inject", "{amd}", "thermal"), "thermal is a fault of nvidia GPUs"),
    ],
)
def test_bad_commands_say_what_is_wrong(running, args, message):
    fleet, state = running
    names = {p: by_profile(fleet, p).hostname for p in ("nvidia", "amd")}
    done = simfleet(state, *(arg.format(**names) for arg in args))
    assert done.returncode != 0
    assert message in done.stderr


def test_without_a_running_fleet_the_command_says_how_to_start_one(tmp_path):
    done = simfleet(tmp_path, "heal", "sim-127-0-0-1")
    assert done.returncode == 1
    assert "no simulated fleet is running here" in done.stderr
    assert "python -m testkit.simfleet --nodes 20 --profiles" in done.stderr

"""`mac gpu reset`: MAC's GPU services stopped for the reset and back after, nothing else.

The agent runs for real under the process runtime (supervisord, the exporters); only the
vendors' tools are stand-ins, at the hardware boundary: a fake `nvidia-smi` / `amd-smi`
first on PATH answers the GPU query, and records each reset it is asked for with the
agent's ports that answered at that moment, so a test sees what ran while it reset.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from maccli import gpureset
from maccli.agent import sudo_owner
from maccli.agent.specs import ROLE, gpu_state_dir, runtime_and_specs
from maccli.main import main
from maccli.runtimes.base import ServiceSpec, ServiceState
from maccli.runtimes.docker import PROJECT_LABEL, SERVICE_LABEL, DockerRuntime
from maccli.runtimes.supervisor import Supervisor
from node import config
from node.checks import gpu_reset as records
from node.checks.base import CheckContext, CheckStatus
from node.config import NodeConfig
from node.gpu import evidence_state
from node.gpu.kernel_log import reset_line
from node.hardware import detect_gpus
from node.host import Roots
from node.runner import CommandResult
from testkit.ports import free_port
from tests.exporters.conftest import FIXTURES

SERVICES = ("dcgm-exporter", "rocm-exporter", "mango-sdk-agent", "sw-exporter")
UUIDS = ("GPU-5d2f0c1e-aaaa-bbbb-cccc-000000000000", "GPU-9a41e7b2-dddd-eeee-ffff-111111111111")
GPUS = f"0, 00000000:3B:00.0, {UUIDS[0]}\n1, 00000000:86:00.0, {UUIDS[1]}\n"
IN_USE = (
    "The following GPUs could not be reset:\n"
    "  GPU 00000000:86:00.0: In use by another client\n\n"
    "1 device is currently being used by one or more other processes.\n"
)
FAKE_SMI = '''#!{python}
"""nvidia-smi and amd-smi at the hardware boundary (tests/maccli/test_gpu_reset.py)."""
import json, os, socket, sys
from pathlib import Path

state = Path(os.environ["FAKE_SMI_STATE"])
args = sys.argv[1:]
if args[:1] == ["--query-gpu=index,pci.bus_id,uuid"]:
    sys.stdout.write((state / "gpus.csv").read_text())
    sys.exit(0)


def listening(port):
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


ports = json.loads(os.environ["FAKE_SMI_PORTS"])
record = {{
    "argv": [Path(sys.argv[0]).name, *args],
    "listening": sorted(name for name, port in ports.items() if listening(port)),
}}
with (state / "resets.jsonl").open("a") as log:
    log.write(json.dumps(record) + "\\n")
while (state / "hold").exists():  # a reset that takes its time: mac is killed meanwhile
    import time
    time.sleep(0.05)
if (state / "hang-up.json").exists():  # the operator's terminal closes mid-reset
    import signal, time
    os.kill(os.getppid(), signal.SIGTERM)
    time.sleep(30)
failure = state / "fail.json"
if failure.exists():
    said = json.loads(failure.read_text())
    sys.stdout.write(said.get("stdout", ""))
    sys.stderr.write(said.get("stderr", ""))
    sys.exit(said["code"])
if Path(sys.argv[0]).name == "amd-smi":
    print("GPU: " + args[-1] + "\\n    GPU_RESET: Successfully reset GPU")
else:
    print("GPU 00000000:86:00.0 was successfully reset.\\nAll done.")
'''


@dataclass
class Node:
    """An agent running under the process runtime, and the stand-ins' folders."""

    root: Path
    env: dict[str, str]
    specs: list[ServiceSpec]

    @property
    def kmsg(self) -> Path:
        return self.root / "dev" / "kmsg"

    @property
    def smi(self) -> Path:
        return self.root / "smi"

    def resets(self) -> list[dict]:
        log = self.smi / "resets.jsonl"
        lines = log.read_text().splitlines() if log.exists() else []
        return [json.loads(line) for line in lines]

    def pids(self) -> dict[str, int | None]:
        runtime, specs = runtime_and_specs(NodeConfig.load(self.env), "process")
        return {s.name: s.pid for s in runtime.status(ROLE, specs) if s.running}


def _agent(root: Path, **extra: str) -> Node:
    for folder in ("dev", "proc", "bin", "smi", "home"):
        (root / folder).mkdir()
    for name in ("nvidia0", "nvidia1"):  # what the node's discovery counts
        (root / "dev" / name).touch()
    (root / "dev" / "kmsg").write_bytes(b"")  # the kernel log: a plain file here
    (root / "proc" / "mounts").write_text("/dev/vda1 / ext4 rw,relatime 0 0\n")
    (root / "smi" / "gpus.csv").write_text(GPUS)
    for tool in ("nvidia-smi", "amd-smi"):
        program = root / "bin" / tool
        program.write_text(FAKE_SMI.format(python=sys.executable))
        program.chmod(0o755)
    env = {
        "HOME": str(root / "home"),
        "MAC_USER_ENV_FILE": str(root / "home" / "env"),
        "MAC_NODE_ENV_FILE": str(root / "node-env"),
        "MAC_STATE_DIR": str(root / "state"),
        "MAC_DEV_ROOT": str(root / "dev"),
        "MAC_PROC_ROOT": str(root / "proc"),
        "MAC_SYS_ROOT": str(FIXTURES / "sysfs-amd"),  # amdgpu cards, for the AMD test
        "MAC_BIND": "127.0.0.1",
        "MAC_SYSTEMD": "no",
        "MAC_RUNTIME": "process",
        "MAC_AGENT_SERVICES": ",".join(SERVICES),
        "NODE_NAME": "gpu-07.cluster",
        "NO_COLOR": "1",
        "FAKE_SMI_STATE": str(root / "smi"),
        **extra,
    }
    ports = {}
    for name in env["MAC_AGENT_SERVICES"].split(","):
        ports[name] = free_port()
        env[f"MAC_{name.upper().replace('-', '_')}_PORT"] = str(ports[name])
    env["FAKE_SMI_PORTS"] = json.dumps(ports)
    runtime, specs = runtime_and_specs(NodeConfig.load(env), "process")
    runtime.start(ROLE, specs)
    return Node(root, env, specs)


def _stop(node: Node) -> None:
    runtime, specs = runtime_and_specs(NodeConfig.load(node.env), "process")
    runtime.stop(ROLE, specs)
    for conf in Path(node.env["MAC_STATE_DIR"]).glob("*/supervisor/supervisord.conf"):
        Supervisor(conf.parent.parent).shutdown()


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """Each service its own process, so that a test sees which of them were stopped."""
    running = _agent(tmp_path_factory.mktemp("gpureset"), MAC_AGENT_BUNDLE="0")
    yield running
    _stop(running)


@pytest.fixture
def on(monkeypatch):
    """`mac` in this process sees the node's settings only, as root, with only the
    stand-ins on PATH (no Slurm, no real GPU tool)."""

    def use(node: Node, **extra: str) -> Node:
        for name in list(os.environ):
            if name.startswith("MAC_") or name in ("MASTER_IP", "SUDO_USER"):
                monkeypatch.delenv(name)
        for name, value in {**node.env, "PATH": str(node.root / "bin"), **extra}.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(gpureset, "geteuid", lambda: 0)
        return node

    return use


def _last_reset(node: Node) -> dict:
    return node.resets()[-1]


def _evidence(node: Node, gpus: dict[str, int]) -> Path:
    """A GPU exporter's evidence file (node.gpu.evidence_state) keeping {key: index}. Named
    for no service of the test's agent, which would write its own over it."""
    folder = Path(gpu_state_dir(NodeConfig.load(node.env)))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / evidence_state.state_file_name("gpu-exporter-under-test")
    kept = {"counters": {"dbe": {"last": 3.0, "rises": [[10.0, 1781000000.0, 1.0]]}}}
    document = {
        "version": evidence_state.VERSION,
        "boot_id": "boot-a",
        "gpus": {key: {**kept, "index": index} for key, index in gpus.items()},
    }
    path.write_text(json.dumps(document))
    return path


def _kept(path: Path) -> list[str]:
    return sorted(json.loads(path.read_text())["gpus"])


def test_it_stops_the_gpu_services_for_the_reset_and_starts_them_again(node, on, capsys):
    on(node)
    before = node.pids()
    assert sorted(before) == sorted(SERVICES)
    evidence = _evidence(node, {UUIDS[0]: 0, UUIDS[1]: 1, f"{UUIDS[1]} partition 2": 1})

    assert main(["gpu", "reset", "1"]) == 0
    said = capsys.readouterr()

    reset = _last_reset(node)
    assert reset["argv"] == ["nvidia-smi", "-r", "-i", "1"]
    # While it reset: the GPU's holders gone, every other service still answering.
    assert reset["listening"] == ["rocm-exporter", "sw-exporter"]
    after = node.pids()
    assert sorted(after) == sorted(SERVICES)  # all back
    for name in ("rocm-exporter", "sw-exporter"):
        assert after[name] == before[name], name  # never stopped
    for name in ("dcgm-exporter", "mango-sdk-agent"):
        assert after[name] != before[name], name
    assert reset_line((0, 0x86, 0), "nvidia-smi -r -i 1") in node.kmsg.read_bytes()
    assert "Resetting GPU 1 (00000000:86:00.0, GPU-9a41e7b2" in said.out
    assert "  | GPU 00000000:86:00.0 was successfully reset." in said.out
    assert f"Recorded the reset in the kernel log ({node.kmsg})" in said.out
    assert "dcgm-exporter    running  ok" in said.out
    assert "GPU 1 (00000000:86:00.0, GPU-9a41e7b2-dddd-eeee-ffff-111111111111) was reset" in (
        said.out
    )
    assert "scontrol" not in said.out  # not a Slurm node: nothing to resume
    assert not _record_file(node).exists()  # written before the stop, gone after the start
    # What its exporter kept of GPU 1 (by its UUID) is gone; GPU 0's stays.
    assert _kept(evidence) == [UUIDS[0]]
    assert "Cleared the evidence its exporter kept of GPU 1 (" in said.out
    assert str(evidence) in said.out


def test_a_failing_reset_starts_the_services_again_and_says_why(node, on, capsys):
    on(node)
    scontrol = node.root / "bin" / "scontrol"  # a Slurm node
    scontrol.write_text("#!/bin/sh\nexit 0\n")
    scontrol.chmod(0o755)
    failure = node.smi / "fail.json"
    failure.write_text(json.dumps({"code": 255, "stderr": IN_USE}))
    kernel_log = node.kmsg.read_bytes()
    evidence = _evidence(node, {UUIDS[0]: 0, UUIDS[1]: 1})
    kept = evidence.read_bytes()
    try:
        assert main(["gpu", "reset", "GPU-9A41E7B2-DDDD-EEEE-FFFF-111111111111"]) == 1
    finally:
        failure.unlink()
        scontrol.unlink()
    said = capsys.readouterr()

    assert _last_reset(node)["argv"] == ["nvidia-smi", "-r", "-i", "1"]
    assert (
        "Error: nvidia-smi -r -i 1 failed (exit code 255): The following GPUs could not be "
        "reset: GPU 00000000:86:00.0: In use by another client"
    ) in said.err
    assert "MAC's GPU services are running again. nvidia-smi refuses while" in said.err
    assert "  sudo fuser -v /dev/nvidia*\n" in said.err
    assert "  scontrol reboot ASAP nextstate=RESUME gpu-07\n" in said.err
    assert sorted(node.pids()) == sorted(SERVICES)  # the exporters are back all the same
    assert node.kmsg.read_bytes() == kernel_log  # no reset to record
    assert evidence.read_bytes() == kept  # nor evidence to clear
    assert "Cleared the evidence" not in said.out
    assert not _record_file(node).exists()


def test_a_command_killed_mid_reset_starts_the_services_again(node, on, capsys):
    """SIGTERM (or SIGHUP: the ssh session dropped) ends it through its cleanup, as Ctrl-C
    does: a node left without its GPU exporter keeps its last verdict on the master."""
    on(node)
    signal_file = node.smi / "hang-up.json"
    signal_file.write_text("{}")
    try:
        with pytest.raises(SystemExit) as ended:
            main(["gpu", "reset", "1"])
    finally:
        signal_file.unlink()
    said = capsys.readouterr()

    assert ended.value.code == 128 + 15
    assert "Starting dcgm-exporter, mango-sdk-agent again." in said.out
    assert sorted(node.pids()) == sorted(SERVICES)
    assert not _record_file(node).exists()


def _record_file(node: Node):
    return records.record_path(NodeConfig.load(node.env))


def _doctor(node: Node, roots: Roots | None = None):
    """The doctor's check of the record, reading processes from `roots` (the node's own,
    a prepared /proc, by default)."""
    cfg = NodeConfig.load(node.env)
    return records.check_gpu_reset(CheckContext(roots=roots or cfg.roots(), extra={"config": cfg}))


# A `mac gpu reset` in a process of its own, as root: what a SIGKILL can end.
RESET_IN_A_PROCESS = (
    "import sys\n"
    "from maccli import gpureset\n"
    "from maccli.main import main\n"
    "gpureset.geteuid = lambda: 0\n"
    "sys.exit(main(['gpu', 'reset', '1']))\n"
)


def _wait_for(what, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _reset_in_a_process(node: Node) -> subprocess.Popen:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MAC_")},
        **node.env,
        "PATH": f"{node.root / 'bin'}",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    return subprocess.Popen(
        [sys.executable, "-c", RESET_IN_A_PROCESS],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


@contextmanager
def _held_reset(node, on) -> Iterator[subprocess.Popen]:
    """`mac gpu reset 1` in a process of its own, held mid-reset (the fake nvidia-smi waits
    while its hold file is there): its services stopped, its record and lock in place.
    Leaving lets it finish (a process killed meanwhile stays so)."""
    on(node)
    hold = node.smi / "hold"
    hold.write_text("")
    resets = len(node.resets())
    mac = _reset_in_a_process(node)
    try:
        _wait_for(lambda: len(node.resets()) > resets)  # stopped, and resetting now
        yield mac
    finally:
        hold.unlink()


def test_a_reset_killed_hard_leaves_a_record_that_doctor_and_the_next_reset_act_on(
    node, on, capsys
):
    """SIGKILL skips every `finally`: the services stay stopped, and the record says so."""
    with _held_reset(node, on) as mac:
        recorded = json.loads(_record_file(node).read_text())
        assert recorded["services"] == ["dcgm-exporter", "mango-sdk-agent"]
        assert (recorded["runtime"], recorded["pid"]) == ("process", mac.pid)
        assert recorded["gpu"].startswith("GPU 1 (00000000:86:00.0, GPU-9a41e7b2")
        running = _doctor(node, Roots())  # the host's own /proc: the process is there
        assert running.status is CheckStatus.WARN
        assert f"`mac gpu reset` (pid {mac.pid}) is resetting GPU 1" in running.detail

        os.kill(mac.pid, signal.SIGKILL)
        assert mac.wait(timeout=10) == -signal.SIGKILL
    try:
        assert _record_file(node).exists()
        assert "dcgm-exporter" not in node.pids() and "mango-sdk-agent" not in node.pids()
        stale = _doctor(node, Roots())
        assert stale.status is CheckStatus.FAIL
        assert "`mac gpu reset` stopped dcgm-exporter, mango-sdk-agent at " in stale.detail
        assert "and did not start them again" in stale.detail
        assert stale.fix == "mac restart agent"

        assert main(["gpu", "reset", "1"]) == 0  # the next reset starts them first
        said = capsys.readouterr()
        assert "Warning: `mac gpu reset` stopped dcgm-exporter, mango-sdk-agent at " in said.err
        assert f"(pid {mac.pid} ended while resetting GPU 1 " in said.err
        assert "): starting them first." in said.err
        assert "GPU 1 (00000000:86:00.0, GPU-9a41e7b2-dddd-eeee-ffff-111111111111) was reset" in (
            said.out
        )
        assert sorted(node.pids()) == sorted(SERVICES)
        assert not _record_file(node).exists()
        assert _doctor(node).status is CheckStatus.PASS
    finally:
        runtime, specs = runtime_and_specs(NodeConfig.load(node.env), "process")
        runtime.start_services(ROLE, specs)
        _record_file(node).unlink(missing_ok=True)


def test_a_second_reset_while_one_runs_is_refused_before_anything_stops(node, on, capsys):
    """`for g in 0 1; do sudo mac gpu reset $g & done`: the second waits for nothing and
    starts nothing; it refuses, naming the first, which holds the lock until it ends."""
    with _held_reset(node, on) as first:
        resets = len(node.resets())
        stopped = node.pids()
        assert "dcgm-exporter" not in stopped

        assert main(["gpu", "reset", "0"]) == 1
        said = capsys.readouterr()
        assert (
            f"Error: another `mac gpu reset` (pid {first.pid}) is resetting GPU 1 "
            "(00000000:86:00.0, GPU-9a41e7b2"
        ) in said.err
        assert "Nothing was stopped." in said.err
        assert f"  ps -o pid,etime,args -p {first.pid}\n" in said.err
        assert len(node.resets()) == resets and node.pids() == stopped
    assert first.wait(timeout=60) == 0  # the first one finishes as if alone
    assert sorted(node.pids()) == sorted(SERVICES)
    assert main(["gpu", "reset", "0"]) == 0  # its lock went with it
    capsys.readouterr()


def test_start_agent_that_cannot_remove_a_roots_record_says_how_instead_of_a_traceback(
    tmp_path, monkeypatch, capsys
):
    """`mac restart agent` as a docker group user, the record of a root reset killed hard."""
    cfg = NodeConfig.load({"MAC_STATE_DIR": str(tmp_path), "HOME": str(tmp_path), "NO_COLOR": "1"})
    gone = subprocess.Popen([sys.executable, "-c", ""])
    gone.wait()
    record = records.ResetRecord(("dcgm-exporter",), "docker", "GPU 1", time.time(), gone.pid)
    path = records.write_record(cfg, record)

    def refused(_cfg) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(records, "remove_record", refused)
    gpureset.forget_finished_reset(cfg, [ServiceState("dcgm-exporter", "running")])

    said = capsys.readouterr()
    assert f"Warning: could not remove {path}, the record of an unfinished `mac gpu reset` (" in (
        " ".join(said.err.split())
    )
    assert f"sudo mac restart agent (or sudo rm {path})" in " ".join(said.err.split())
    assert "Traceback" not in said.err and "run again" not in said.out
    assert path.exists()


def _stale_record(node: Node) -> records.ResetRecord:
    """A record whose process is gone, its services stopped: a reset killed hard."""
    gone = subprocess.Popen([sys.executable, "-c", ""])
    gone.wait()
    record = records.ResetRecord(
        ("dcgm-exporter", "mango-sdk-agent"), "process", "GPU 1 (00000000:86:00.0)",
        time.time(), gone.pid,
    )  # fmt: skip
    cfg = NodeConfig.load(node.env)
    runtime, specs = runtime_and_specs(cfg, "process")
    runtime.stop_services(ROLE, [spec for spec in specs if spec.name in record.services])
    records.write_record(cfg, record)
    return record


def test_doctor_fix_restarts_the_agent_and_that_clears_the_record(node, on, capsys):
    on(node)
    record = _stale_record(node)
    try:
        assert main(["doctor", "gpu_reset"]) == 1
        said = capsys.readouterr().out
        assert "`mac gpu reset` stopped dcgm-exporter, mango-sdk-agent at" in said
        assert "mac restart agent" in said

        assert main(["doctor", "--fix", "gpu_reset", "--yes"]) == 0
        said = capsys.readouterr().out
        assert (
            f"dcgm-exporter, mango-sdk-agent, which an unfinished `mac gpu reset` (pid "
            f"{record.pid}) stopped at {record.when()}, run again."
        ) in said
        assert not _record_file(node).exists()
        assert sorted(node.pids()) == sorted(SERVICES)
    finally:
        _record_file(node).unlink(missing_ok=True)


def test_a_reset_still_running_elsewhere_is_not_overtaken(node, on, capsys):
    """Its process alive (on this boot, with the start time it recorded): refused."""
    on(node)
    cfg = NodeConfig.load(node.env)
    pid = os.getpid()  # stands for the other reset: alive, as the node's /proc shows
    own = node.root / "proc" / str(pid)
    own.mkdir()
    (own / "stat").write_text(Path(f"/proc/{pid}/stat").read_text())
    record = records.ResetRecord.of_this_process(
        ["dcgm-exporter"], "process", "GPU 0 (00000000:3B:00.0)", time.time()
    )
    records.write_record(cfg, record)
    before, resets = node.pids(), len(node.resets())
    try:
        assert main(["gpu", "reset", "1"]) == 1
        said = capsys.readouterr().err
        assert f"Error: another `mac gpu reset` (pid {pid}) is resetting GPU 0" in said
        assert f"  ps -o pid,etime,args -p {pid}\n" in said
        assert len(node.resets()) == resets and node.pids() == before
        assert _doctor(node).status is CheckStatus.WARN
        # The same pid, started at another time: the kernel gave it to someone else.
        (own / "stat").write_text(f"{pid} (python) S 1 " + "0 " * 17 + "1\n")
        assert _doctor(node).status is CheckStatus.FAIL
    finally:
        records.remove_record(cfg)
        (own / "stat").unlink()
        own.rmdir()


def test_a_gpu_service_stopped_before_stays_stopped(node, on, capsys):
    on(node)
    runtime, specs = runtime_and_specs(NodeConfig.load(node.env), "process")
    inventory = [spec for spec in specs if spec.name == "mango-sdk-agent"]
    runtime.stop_services(ROLE, inventory)  # an operator's choice
    try:
        assert main(["gpu", "reset", "1"]) == 0
        said = capsys.readouterr().out
        assert "dcgm-exporter holds the GPUs open: stopping it for" in said
        assert "mango-sdk-agent" not in node.pids()
    finally:
        runtime.start_services(ROLE, inventory)


def test_a_gpu_that_is_not_there_is_named_with_the_gpus_found(node, on, capsys):
    on(node)
    before, resets = node.pids(), len(node.resets())
    assert main(["gpu", "reset", "0000:af:00.0"]) == 1
    said = capsys.readouterr().err
    assert "Error: this node has no GPU '0000:af:00.0'." in said
    assert "  GPU 0 (00000000:3B:00.0, GPU-5d2f0c1e-aaaa-bbbb-cccc-000000000000)" in said
    assert "  GPU 1 (00000000:86:00.0, GPU-9a41e7b2-dddd-eeee-ffff-111111111111)" in said
    assert len(node.resets()) == resets and node.pids() == before


def test_not_root_is_refused_before_anything_stops(node, on, capsys, monkeypatch):
    on(node)
    monkeypatch.setattr(gpureset, "geteuid", lambda: 1000)
    before, resets = node.pids(), len(node.resets())
    assert main(["gpu", "reset", "1"]) == 1
    said = capsys.readouterr().err
    assert "Error: resetting GPU 1 (00000000:86:00.0, GPU-9a41e7b2" in said
    assert "needs root" in said
    assert said.endswith("  sudo mac gpu reset 1\n")
    assert len(node.resets()) == resets and node.pids() == before


def test_by_bus_id_without_a_kernel_log_to_write_it_warns_and_goes_on(node, on, capsys):
    dev = node.root / "dev-without-kmsg"  # where the reset cannot be recorded (not root)
    dev.mkdir(exist_ok=True)
    for name in ("nvidia0", "nvidia1"):
        (dev / name).touch()
    on(node, MAC_DEV_ROOT=str(dev))
    assert main(["gpu", "reset", "0000:3b:00.0"]) == 0
    said = capsys.readouterr()
    assert _last_reset(node)["argv"] == ["nvidia-smi", "-r", "-i", "0"]
    assert "Warning: the reset is not in the kernel log" in said.err
    assert "until MAC_GPU_EVIDENCE_WINDOW (3600 s) has passed" in said.err
    assert "GPU 0 (00000000:3B:00.0, GPU-5d2f0c1e-aaaa-bbbb-cccc-000000000000) was reset" in (
        said.out
    )
    assert sorted(node.pids()) == sorted(SERVICES)


def test_an_amd_gpu_is_reset_by_its_index_with_rocm_exporter_stopped(node, on, capsys):
    on(node, MAC_DEV_ROOT=str(FIXTURES / "dev-amd"))  # no /dev/nvidia*: an AMD node
    vendor, count = detect_gpus(Roots(sys_root=str(FIXTURES / "sysfs-amd"), dev_root="/none"))
    assert vendor == "amd" and count >= 1
    kernel_log = node.kmsg.read_bytes()
    # Kept under a serial, an index: AMD's GPU 0 is named by its index alone.
    evidence = _evidence(node, {"SER-A": 0, "index 1": 1, "SER-A partition 1": 0})
    assert main(["gpu", "reset", "0"]) == 0
    said = capsys.readouterr()
    assert _kept(evidence) == ["index 1"]
    assert "Cleared the evidence its exporter kept of GPU 0: " in said.out
    reset = _last_reset(node)
    assert reset["argv"] == ["amd-smi", "reset", "--gpureset", "-g", "0"]
    assert reset["listening"] == ["dcgm-exporter", "sw-exporter"]
    assert "  |     GPU_RESET: Successfully reset GPU" in said.out
    assert node.kmsg.read_bytes() == kernel_log  # AMD's exporter reads no kernel log
    assert sorted(node.pids()) == sorted(SERVICES)

    # amd-smi says a failed reset with exit code 0: its words decide.
    failure = node.smi / "fail.json"
    failure.write_text(
        json.dumps({"code": 0, "stdout": "GPU: 0\n    GPU_RESET: Failed to reset GPU\n"})
    )
    kept = _evidence(node, {"SER-A": 0, "index 1": 1}).read_bytes()
    try:
        assert main(["gpu", "reset", "0"]) == 1
    finally:
        failure.unlink()
    said = capsys.readouterr().err
    assert "amd-smi reset --gpureset -g 0 failed (exit code 0): GPU: 0 GPU_RESET: Failed" in said
    assert "  sudo fuser -v /dev/kfd /dev/dri/*\n" in said
    assert evidence.read_bytes() == kept  # a failed reset clears nothing
    assert sorted(node.pids()) == sorted(SERVICES)

    assert main(["gpu", "reset", "0000:05:00.0"]) == 1
    assert "on an AMD node, mac gpu reset takes the GPU's index" in capsys.readouterr().err


def test_without_the_vendors_tool_it_says_what_to_install(node, on, capsys, tmp_path):
    on(node, PATH=str(tmp_path))  # no nvidia-smi
    assert main(["gpu", "reset", "1"]) == 1
    said = capsys.readouterr().err
    assert "Error: nvidia-smi is not installed here, and the reset needs it." in said
    assert "  sudo apt-get install nvidia-utils-<branch>\n" in said


def test_where_one_process_serves_them_all_it_stops_and_starts_that_process(tmp_path, on, capsys):
    bundled = _agent(tmp_path, MAC_AGENT_SERVICES="dcgm-exporter,mango-sdk-agent,sw-exporter")
    try:
        on(bundled)
        (pid,) = set(bundled.pids().values())
        assert main(["gpu", "reset", "1"]) == 0
        said = capsys.readouterr().out
        assert _last_reset(bundled)["listening"] == []
        assert "Stopped with them: sw-exporter (one process serves them all" in said
        after = bundled.pids()
        assert sorted(after) == ["dcgm-exporter", "mango-sdk-agent", "sw-exporter"]
        assert set(after.values()) != {pid}
    finally:
        _stop(bundled)


# The user's settings: under sudo they come from the user's ~/.mac/env, not the environment.
OWNERS_SETTINGS = ("MAC_AGENT_SERVICES", "MAC_BIND", "MAC_RUNTIME", "NODE_NAME")


def _owners_agent(tmp_path: Path) -> tuple[Node, Path]:
    """An agent started by the user `op` as `mac` run by op keeps it: its state under op's
    ~/.mac/state/<host>, its settings (ports...) in op's ~/.mac/env."""
    home = tmp_path / "op-home"
    state = home / ".mac" / "state" / (socket.gethostname() or "localhost")
    user_file = home / ".mac" / "env"
    started = _agent(
        tmp_path,
        MAC_STATE_DIR=str(state),
        MAC_USER_ENV_FILE=str(user_file),
        MAC_AGENT_SERVICES="dcgm-exporter,mango-sdk-agent,sw-exporter",
    )
    owners = {k: v for k, v in started.env.items() if k in OWNERS_SETTINGS or k.endswith("_PORT")}
    user_file.parent.mkdir(parents=True, exist_ok=True)
    user_file.write_text("".join(f"{key}={value}\n" for key, value in owners.items()))
    return started, home


def test_under_sudo_the_users_agent_is_named_before_anything_stops_and_the_command_works(
    tmp_path, on, capsys, monkeypatch
):
    """`sudo mac gpu reset 1` by the user who started the agent: sudo gives root's HOME
    and none of op's environment, and root's /var/lib/mac holds no agent. It names op's
    agent and the command that resets with it, and that command does."""
    started, home = _owners_agent(tmp_path)
    try:
        before = started.pids()
        resets = len(started.resets())
        evidence = _evidence(started, {UUIDS[0]: 0, UUIDS[1]: 1})
        sudo_env = {
            k: v
            for k, v in started.env.items()
            if k not in (*OWNERS_SETTINGS, "MAC_STATE_DIR", "MAC_USER_ENV_FILE", "HOME")
            and not k.endswith("_PORT")
        }
        roots_home = tmp_path / "root-home"
        roots_home.mkdir()
        on(Node(started.root, sudo_env, started.specs), HOME=str(roots_home), SUDO_USER="op")
        monkeypatch.setattr(config, "DEFAULT_STATE_DIR_ROOT", str(tmp_path / "var-lib-mac"))
        monkeypatch.setattr(sudo_owner, "home_of", {"op": home}.get)
        monkeypatch.setattr(sudo_owner, "uid_of", {"op": os.getuid()}.get)

        assert main(["gpu", "reset", "1"]) == 1
        said = " ".join(capsys.readouterr().err.split())

        state = started.env["MAC_STATE_DIR"]
        assert f"Error: root has no MAC agent here, and op has one (state {state})" in said
        assert "Nothing was stopped." in said
        user_file = f"{home}/.mac/env"
        assert said.endswith(
            f"sudo env MAC_STATE_DIR={state} MAC_USER_ENV_FILE={user_file} mac gpu reset 1"
        )
        assert started.pids() == before and len(started.resets()) == resets  # untouched
        assert not (tmp_path / "var-lib-mac").exists()  # nothing written as root's

        # The command it names, as `sudo env ...` runs it.
        monkeypatch.setenv("MAC_STATE_DIR", state)
        monkeypatch.setenv("MAC_USER_ENV_FILE", user_file)
        assert main(["gpu", "reset", "1"]) == 0
        assert _last_reset(started)["listening"] == []  # op's exporters were stopped for it
        after = started.pids()
        assert sorted(after) == ["dcgm-exporter", "mango-sdk-agent", "sw-exporter"]
        assert set(after.values()) != set(before.values())  # and started again
        assert _kept(evidence) == [UUIDS[0]]  # GPU 1's evidence in op's folder is cleared
    finally:
        _stop(started)


def test_under_sudo_roots_own_agent_or_a_state_dir_given_on_purpose_comes_first(
    tmp_path, monkeypatch
):
    home = tmp_path / "op-home"
    theirs = home / ".mac" / "state" / (socket.gethostname() or "localhost")
    (theirs / ROLE).mkdir(parents=True)
    roots = tmp_path / "var-lib-mac"
    monkeypatch.setattr(config, "DEFAULT_STATE_DIR_ROOT", str(roots))
    monkeypatch.setattr(sudo_owner, "home_of", {"op": home}.get)
    monkeypatch.setattr(sudo_owner, "uid_of", {"op": os.getuid()}.get)
    environ = {"HOME": str(tmp_path / "root-home"), "SUDO_USER": "op", "NO_COLOR": "1"}

    def owner(**extra: str) -> sudo_owner.Owner | None:
        given = {**environ, **extra}
        return sudo_owner.invoking_users_agent(NodeConfig.load(given), given)

    assert owner() == sudo_owner.Owner("op", theirs, home / ".mac" / "env")
    assert owner(SUDO_USER="root") is None and owner(SUDO_USER="") is None
    assert owner(SUDO_USER="nobody-here") is None  # no such user
    assert owner(MAC_STATE_DIR=str(tmp_path / "chosen")) is None
    assert owner(MAC_USER_ENV_FILE=str(tmp_path / "env")) is None
    # op's ~/.mac/env moves op's folder: the agent is looked for there, its ~ op's own
    moved = tmp_path / "op-state"
    (moved / ROLE).mkdir(parents=True)
    (home / ".mac" / "env").write_text(f"MAC_STATE_DIR={moved}\n")
    assert owner().state_dir == moved
    (home / "elsewhere" / ROLE).mkdir(parents=True)
    (home / ".mac" / "env").write_text("MAC_STATE_DIR=~/elsewhere\n")
    assert owner().state_dir == home / "elsewhere"
    (home / ".mac" / "env").write_bytes(b"MAC_STATE_DIR=\xff\n")  # not UTF-8: the default
    assert owner().state_dir == theirs
    (home / ".mac" / "env").write_text("")
    mine = NodeConfig.load(environ).state_dir
    (mine / ROLE).mkdir(parents=True)  # root runs an agent of its own: that one
    assert owner() is None
    (theirs / ROLE).rmdir()
    (mine / ROLE).rmdir()
    assert owner() is None  # nobody runs one: nothing to take


# The pure parts -------------------------------------------------------------------------


def test_a_gpu_is_named_by_its_index_uuid_or_either_form_of_its_bus_id():
    gpus = gpureset.parse_nvidia_gpus(GPUS + "\n")
    assert [gpu.index for gpu in gpus] == [0, 1]
    second = gpus[1]
    for name in (
        "1",
        "GPU-9a41e7b2-dddd-eeee-ffff-111111111111",
        "gpu-9A41E7B2-DDDD-EEEE-FFFF-111111111111",
        "00000000:86:00.0",
        "0000:86:00.0",
        "0000:86:00",
    ):
        assert gpureset.is_named(second, name), name
    for name in ("0", "01x", "GPU-5d2f0c1e-aaaa-bbbb-cccc-000000000000", "0000:3b:00.0", ""):
        assert not gpureset.is_named(second, name), name


class FakeEngine:
    """`docker` as the runtime asks it: a container table, and every command recorded."""

    def __init__(self, services: list[str]) -> None:
        self.calls: list[list[str]] = []
        self.state = {f"mac-{name}": "running" for name in services}

    def __call__(self, argv, **_options) -> CommandResult:
        argv = list(argv)
        self.calls.append(argv)
        if argv[:3] == ["docker", "ps", "-aq"]:
            return CommandResult(0, "\n".join(self.state) + "\n")
        if argv[:2] == ["docker", "inspect"]:
            rows = [
                {
                    "Name": f"/{name}",
                    "Config": {"Labels": {PROJECT_LABEL: "mac", SERVICE_LABEL: name[4:]}},
                    "State": {
                        "Status": self.state[name],
                        "Pid": 7 if self.state[name] == "running" else 0,
                    },
                }
                for name in argv[2:]
            ]
            return CommandResult(0, json.dumps(rows))
        if argv[1] in ("stop", "start"):
            for name in argv[2:]:
                self.state[name] = "running" if argv[1] == "start" else "exited"
            return CommandResult(0, "\n".join(argv[2:]))
        return CommandResult(1, "", f"unexpected: {argv}")


def test_under_docker_it_stops_and_starts_the_containers_alone():
    engine = FakeEngine(["dcgm-exporter", "mango-sdk-agent", "sw-exporter"])
    runtime = DockerRuntime(run=engine)
    holders = [ServiceSpec("dcgm-exporter", []), ServiceSpec("mango-sdk-agent", [])]

    stopped = runtime.stop_services(ROLE, holders)
    assert [s.state for s in stopped] == ["exited", "exited"]
    assert ["docker", "stop", "mac-dcgm-exporter", "mac-mango-sdk-agent"] in engine.calls
    assert engine.state["mac-sw-exporter"] == "running"

    started = runtime.start_services(ROLE, holders)
    assert [s.state for s in started] == ["running", "running"]
    assert ["docker", "start", "mac-dcgm-exporter", "mac-mango-sdk-agent"] in engine.calls
    verbs = {call[1] for call in engine.calls}
    assert verbs == {"ps", "inspect", "stop", "start"}  # no Compose: nothing recreated


def test_under_docker_a_service_without_a_container_is_left_as_it_is():
    engine = FakeEngine(["sw-exporter"])  # dcgm-exporter's profile was left out here
    runtime = DockerRuntime(run=engine)
    holders = [ServiceSpec("dcgm-exporter", [])]
    assert [s.state for s in runtime.stop_services(ROLE, holders)] == ["stopped"]
    assert [s.state for s in runtime.start_services(ROLE, holders)] == ["stopped"]
    assert not any(call[1] in ("stop", "start") for call in engine.calls)


def test_a_refused_reset_names_the_lock_s_holder_not_an_earlier_reset_s_record(tmp_path):
    """Reset A was killed and left its record; reset B holds the lock and has not yet
    started A's services again (the record stays until then): C names B, not A."""
    cfg = NodeConfig.load({"MAC_STATE_DIR": str(tmp_path), "HOME": str(tmp_path), "NO_COLOR": "1"})
    killed = records.ResetRecord(("dcgm-exporter",), "process", "GPU 1", time.time(), 999_999)
    records.write_record(cfg, killed)
    lock = records.lock_path(cfg)
    lock.write_text(f"{os.getpid()}\n")

    refusal = gpureset._another_reset(cfg, lock, "0")

    assert f"another `mac gpu reset` (pid {os.getpid()}) is running" in refusal.message
    assert "999999" not in refusal.message and "GPU 1" not in refusal.message
    assert f"ps -o pid,etime,args -p {os.getpid()}" in refusal.commands

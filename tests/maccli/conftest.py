"""Fixtures of the `mac` tests: a private configuration per test, and `mac` as a subprocess.

Every path `mac` reads (per-user and per-node files, state dir, /proc for the mount
table) is redirected into tmp_path, so no test touches /etc/mango or ~/.mac.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from testkit.leftovers import MARK
from testkit.macenv import free_master_ports
from testkit.ports import check_contract_ports

FAKE_DOCKER = os.path.join(os.path.dirname(__file__), "fake_docker.py")
# Variables of the developer's shell that would change what `mac` does under test.
# (SUDO_USER: `mac` run under sudo gives the per-node commands, maccli.agent.guards.)
_SCRUB = ("MASTER_IP", "NODE_NAME", "NO_COLOR", "SUDO_USER")


@dataclass
class MacEnv:
    root: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def user_file(self) -> Path:
        return Path(self.env["MAC_USER_ENV_FILE"])

    @property
    def node_file(self) -> Path:
        return Path(self.env["MAC_NODE_ENV_FILE"])

    @property
    def state_dir(self) -> Path:
        return Path(self.env["MAC_STATE_DIR"])

    def mounts(self, *lines: str) -> None:
        """Write the mount table `mac` reads (MAC_PROC_ROOT/mounts)."""
        (self.root / "proc").mkdir(exist_ok=True)
        (self.root / "proc" / "mounts").write_text("\n".join(lines) + "\n")

    def shared_home(self, fstype: str = "nfs4") -> None:
        home = self.user_file.parent.parent
        self.mounts(
            "/dev/vda1 / ext4 rw,relatime 0 0",
            f"filer:/export/home {home} {fstype} rw,vers=4.2 0 0",
        )

    def run(self, *args: str, extra: dict[str, str] | None = None, timeout: float = 120):
        env = {**self.env, **(extra or {})}
        return subprocess.run(
            [sys.executable, "-m", "maccli.main", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )


@pytest.fixture
def mac_env(tmp_path: Path) -> MacEnv:
    return make_mac_env(tmp_path)


def make_mac_env(tmp_path: Path) -> MacEnv:
    """A private `mac` configuration under tmp_path (for fixtures of a wider scope too)."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB and not k.startswith("MAC_")}
    for keep in ("MAC_REDIS_URL", "MAC_DATA_DIR", "MAC_TEST_DB_NAME"):
        if keep in os.environ:
            env[keep] = os.environ[keep]
    home = tmp_path / "home" / "op"
    (home / ".mac").mkdir(parents=True)
    env.update(
        {
            "HOME": str(home),
            "MAC_USER_ENV_FILE": str(home / ".mac" / "env"),
            "MAC_NODE_ENV_FILE": str(tmp_path / "etc" / "mango" / "mac" / "env"),
            "MAC_STATE_DIR": str(tmp_path / "state"),
            "MAC_PROC_ROOT": str(tmp_path / "proc"),
            "MAC_RUNTIME": "process",
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
            # Every listener of a master started here on a free port, never a default that
            # a running master (or another test run) may hold. MAC_MASTER_PORT is also
            # where agents look for the master: a test that starts a master sets it.
            **{k: v for k, v in free_master_ports().items() if k != "MAC_MASTER_PORT"},
            # Its own keys in the shared Redis: another master's cached state (the node
            # alert posts' record, throttles) is never read as this one's.
            "MAC_CACHE_PREFIX": f"macenv{os.getpid()}x{uuid.uuid4().hex[:8]}",
        }
    )
    mac = MacEnv(tmp_path, env)
    mac.mounts("/dev/vda1 / ext4 rw,relatime 0 0")
    return mac


def loopback_address(salt: int) -> str:
    """An address of 127.0.0.0/8 of this test run, so the contract ports are free on it.

    The third byte is the run's (its first pytest process, testkit.leftovers), the last
    the xdist worker's and `salt` (below 30; workers past 8 move the third byte on):
    two workers of one run never share one, as pid-derived addresses could (workers
    start with neighbouring pids).
    Not on a MAC node whose agent listens on every address: ContractPortHeld, which
    skips the test (tests/conftest.py)."""
    run = os.environ.get(MARK, "").partition(":")[0]
    run_pid = int(run) if run.isdigit() else os.getpid()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    number = int(worker) if worker.isdigit() else 0
    last = salt * 8 + number % 8
    address = f"127.77.{(run_pid + number // 8) % 250 + 1}.{last % 250 + 1}"
    check_contract_ports([address])
    return address


@pytest.fixture
def files(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    """(user file, per-node file) under tmp_path, for `mac` run in this process
    (maccli.main.main): the machine's own /etc/mango/mac/env and ~/.mac/env are never read."""
    home = tmp_path / "home" / "op"
    (home / ".mac").mkdir(parents=True)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "mounts").write_text("/dev/vda1 / ext4 rw,relatime 0 0\n")
    user_file, node_file = home / ".mac" / "env", tmp_path / "etc" / "mango" / "mac" / "env"
    for name, value in {
        "HOME": str(home),
        "MAC_USER_ENV_FILE": str(user_file),
        "MAC_NODE_ENV_FILE": str(node_file),
        "MAC_STATE_DIR": str(tmp_path / "state"),
        "MAC_PROC_ROOT": str(tmp_path / "proc"),
        "MAC_RUNTIME": "process",
        "NO_COLOR": "1",
        "COLUMNS": "300",
    }.items():
        monkeypatch.setenv(name, value)
    for name in (
        "MASTER_IP",
        "NODE_NAME",
        "MASTER_URL",
        "OTHER",
        "MAC_BMC_REDFISH_PASSWORD",
        "SUDO_USER",
    ):
        monkeypatch.delenv(name, raising=False)
    return user_file, node_file


@pytest.fixture
def docker(mac_env, tmp_path):
    """Put the stand-in docker first on PATH, with two leftovers of project `deploy`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    state = tmp_path / "docker-state"
    state.mkdir()
    wrapper = bin_dir / "docker"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_DOCKER}" "$@"\n')
    wrapper.chmod(0o755)
    (state / "containers.json").write_text(
        json.dumps(
            [
                {"id": "a1", "name": "mac-sys-exporter", "project": "deploy", "service": "x"},
                {"id": "a2", "name": "mac-nic-exporter", "project": "deploy", "service": "y"},
            ]
        )
    )
    mac_env.env.update(
        {
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "FAKE_DOCKER_STATE": str(state),
            "MAC_RUNTIME": "auto",
        }
    )
    return state

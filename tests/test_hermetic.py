"""The suite keeps off the machine's own MAC: its env files, its master's ports and its
agent's.

`scripts/test` must pass on an operator's master or node too. Such a machine is made
here: a copy of /etc whose per-node file says MAC_AGENT_NETWORK=host and
MAC_RUNTIME=docker (what `mac start agent` and an operator leave there), a home whose
~/.mac/env says the same, and a listener on every default port of the master
(maccli.master.preflight.PORT_SETTINGS: 28080, 28081, 29090, 29093). Tests that once failed on
such a machine run there in a pytest of their own, and pass. Root only: a private mount
namespace shows the decoy /etc to that pytest alone; the machine's /etc is never written.

A node's agent listens on its contract ports on every address (MAC_BIND=0.0.0.0), where
the simulated fleets listen on loopback addresses of their own: they cannot, and a
fleet-based test must be skipped saying why and what to do, not error. That decoy runs
in a network namespace of its own (loopback only; the test it runs needs neither
PostgreSQL nor Redis), beside the first pytest: a listener on 0.0.0.0:29101 here would
keep the fleets of the tests running beside this one off their port too.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from contract.services import SYS_EXPORTER
from maccli.master.preflight import PORT_SETTINGS
from node.config import FILE_SETTINGS

REPO = Path(__file__).resolve().parents[1]
DECOY = "MAC_AGENT_NETWORK=host\nMAC_RUNTIME=docker\n"
# The check read the machine's per-node file (SKIP instead of WARN); the master took the
# default Alertmanager and API ports ("port 29093 is already in use").
ONCE_FAILED = (
    "tests/node/checks/test_network.py::"
    "test_forwarding_off_only_warns_where_no_exporter_port_is_dnatted",
    "tests/maccli/test_master_faults.py::"
    "test_status_right_after_a_service_died_says_it_is_not_running",
)

# A fleet-based test, skipped where an agent holds its contract port (tests/conftest.py).
FLEET_TEST = "tests/contract/test_liveness.py::test_black_holed_port_drops_syns_instead_of_refusing"
# The node's agent: a listener on every address on the port, while the pytest runs.
AGENT = (
    "import socket, subprocess, sys\n"
    "held = socket.create_server(('0.0.0.0', int(sys.argv[1])))\n"
    "sys.exit(subprocess.call(sys.argv[2:]))\n"
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="a private mount namespace needs root"),
    pytest.mark.skipif(not shutil.which("unshare"), reason="unshare (util-linux) not on PATH"),
    pytest.mark.skipif(not shutil.which("ip"), reason="ip (iproute2) not on PATH"),
]


@pytest.fixture
def default_ports_held() -> Iterator[list[int]]:
    """A listener on each default port of the master (one already taken is held anyway)."""
    held: list[socket.socket] = []
    for port in PORT_SETTINGS.values():
        listener = socket.socket()
        try:
            listener.bind(("0.0.0.0", port))
        except OSError as exc:
            listener.close()
            if exc.errno != errno.EADDRINUSE:
                raise
            continue
        listener.listen()
        held.append(listener)
    yield sorted(PORT_SETTINGS.values())
    for listener in held:
        listener.close()


def decoy_machine(root: Path) -> tuple[Path, Path]:
    """(a copy of /etc with MAC's per-node file, a home with MAC's per-user file)."""
    etc = root / "etc"
    shutil.copytree("/etc", etc, symlinks=True, ignore_dangling_symlinks=True)
    (etc / "mango" / "mac").mkdir(parents=True, exist_ok=True)
    (etc / "mango" / "mac" / "env").write_text(DECOY)
    home = root / "home"
    (home / ".mac").mkdir(parents=True)
    (home / ".mac" / "env").write_text(DECOY)
    return etc, home


def test_the_tests_pass_beside_a_real_node_s_files_and_a_real_master_s_ports(
    tmp_path, default_ports_held
):
    etc, home = decoy_machine(tmp_path)
    # As on the machine: none of the session's own file settings (FILE_SETTINGS).
    env = {k: v for k, v in os.environ.items() if k not in FILE_SETTINGS}
    env["HOME"] = str(home)
    pytest_run = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"]
    port = SYS_EXPORTER.port
    # Started first, it runs while the other does: the test's cost stays the first's.
    with subprocess.Popen(
        ["unshare", "--net", "--mount", "--propagation", "private", "sh", "-c",
         'ip link set lo up && mount --bind "$1" /etc && shift && exec "$@"', "sh", str(etc),
         sys.executable, "-c", AGENT, str(port),
         *pytest_run, f"--basetemp={tmp_path / 'inner-fleet'}", FLEET_TEST],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as fleet:  # fmt: skip
        done = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c",
             'mount --bind "$1" /etc && shift && exec "$@"', "sh", str(etc),
             *pytest_run, f"--basetemp={tmp_path / 'inner'}", *ONCE_FAILED],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        fleet_out, fleet_err = fleet.communicate(timeout=120)
    said = done.stdout[-6000:] + done.stderr[-2000:]
    assert done.returncode == 0, said
    assert f"{len(ONCE_FAILED)} passed" in done.stdout, said
    # Beside the agent's listener, the fleet's test is skipped, saying why and what to do.
    fleet_said = fleet_out[-6000:] + fleet_err[-2000:]
    assert fleet.returncode == 0, fleet_said
    assert "1 skipped" in fleet_out, fleet_said
    why = f"agent contract port {port} is taken here: 0.0.0.0:{port} listens"
    assert why in fleet_out, fleet_said
    assert "give the agent MAC_BIND=<this node's IP>" in fleet_out, fleet_said

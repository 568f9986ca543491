"""scripts/run's set-up (no database servers) and scripts/docker-images' PYTHON, each the
real script in a sandbox (tests/scripts/sandbox.py) with stand-ins for what it starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from subprocess import Popen

import pytest

from testkit.ports import free_port
from testkit.waiting import wait_for
from tests.scripts.sandbox import Sandbox, needs_tools

pytestmark = pytest.mark.skipif(bool(needs_tools()), reason=str(needs_tools()))

RECORDING_PYTHON = 'printf "%s\\n" "ran as $0" >> "$FAKE_CALLS"\n'


def test_scripts_run_asks_bootstrap_for_neither_postgresql_nor_mariadb(tmp_path: Path) -> None:
    # The master here runs on SQLite, and its Slurm lab (python -m testkit.slurmlab)
    # starts without accounting, so without slurmdbd and MariaDB.
    box = Sandbox(tmp_path)
    box.script("run")
    box.write(
        "scripts/bootstrap",
        "#!/bin/sh\n"
        'echo "bootstrap postgres=${MAC_NEED_POSTGRES-unset} mariadb=${MAC_NEED_MARIADB-unset}"'
        ' >> "$FAKE_CALLS"\n',
        0o755,
    )
    box.write(".venv/bin/mac", '#!/bin/sh\necho "mac $*" >> "$FAKE_CALLS"\n', 0o755)
    done = box.run("run", MAC_DATA_DIR=str(tmp_path / "data"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert box.called("bootstrap") == ["postgres=0 mariadb=0"]
    assert box.called("mac")[:2] == ["start master", "start agent"]


def test_scripts_run_leaves_another_terminal_the_env_that_finds_its_master(tmp_path: Path) -> None:
    """`mac` in another terminal looks in its defaults (/var/lib/mac, /etc/mango/mac/env,
    Docker where installed) and finds no master of scripts/run: run.env points it there."""
    box = Sandbox(tmp_path)
    box.script("run")
    box.write("scripts/bootstrap", "#!/bin/sh\n", 0o755)
    box.write(".venv/bin/mac", '#!/bin/sh\necho "mac $*" >> "$FAKE_CALLS"\n', 0o755)
    data = tmp_path / "a data dir"  # quoted as the shell reads it back
    # the master's Slurm settings too (the lab's, or the caller's own), for mac doctor
    done = box.run("run", MAC_DATA_DIR=str(data), SLURM_CONF="/srv/slurm/slurm.conf")
    assert done.returncode == 0, done.stdout + done.stderr
    run_env = data / "run.env"
    assert f". {run_env}" in done.stdout
    assert "MAC_BIND" not in run_env.read_text()  # unset settings stay unset

    shell = subprocess.run(
        ["bash", "-c", f'. "{run_env}"; command -v mac; echo "$MAC_STATE_DIR|$MAC_RUNTIME|'
         '$MAC_NODE_ENV_FILE|$MASTER_IP|$SLURM_CONF"'],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, check=True,
    )  # fmt: skip
    found, values = shell.stdout.splitlines()
    assert Path(found).resolve() == (box.repo / ".venv/bin/mac").resolve()
    assert values == f"{data}/state|process|{data}/agent/node.env|127.0.0.1|/srv/slurm/slurm.conf"


# The checkout's real `mac`, for `mac stop agent` (the rest is a stand-in that records).
REAL_MAC = Path(sys.executable).with_name("mac")
MAC_STOPS_THE_AGENT = (
    '#!/bin/sh\necho "mac $*" >> "$FAKE_CALLS"\n'
    '[ "$*" != "stop agent" ] || exec env PATH=/usr/bin:/bin "$REAL_MAC" "$@"\n'
)


def test_scripts_run_after_its_master_stopped_says_so_in_one_calm_line(tmp_path: Path) -> None:
    """`mac stop master` in another terminal ends the run; its trap's `mac stop agent`
    cannot deregister then, which is no error here: the node key is kept for next time."""
    box = Sandbox(tmp_path)
    box.script("run")
    box.write("scripts/bootstrap", "#!/bin/sh\n", 0o755)
    box.write(".venv/bin/mac", MAC_STOPS_THE_AGENT, 0o755)
    data = tmp_path / "data"
    node_env = data / "agent" / "node.env"
    node_env.parent.mkdir(parents=True)
    node_env.write_text("MAC_NODE_KEY=" + "k" * 43 + "\n")
    # No api-server.pid: the master is stopped, and nobody listens on its port.
    done = box.run(
        "run", MAC_DATA_DIR=str(data), MAC_MASTER_PORT=str(free_port()), REAL_MAC=str(REAL_MAC)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert box.called("mac")[-2:] == ["stop agent", "stop master"]
    assert "Stopped 8 agent services (process runtime)." in done.stdout, done.stdout
    assert (
        "==> the master is already stopped: the agent stays registered with it, and the next "
        "scripts/run takes the same node back (nothing to do)" in done.stdout.splitlines()
    )
    assert "deregister" not in done.stdout + done.stderr and not done.stderr, done.stderr
    assert "MAC_NODE_KEY=" + "k" * 43 in node_env.read_text()


def test_another_failure_of_mac_stop_agent_is_still_shown(tmp_path: Path) -> None:
    box = Sandbox(tmp_path)
    box.script("run")
    box.write("scripts/bootstrap", "#!/bin/sh\n", 0o755)
    box.write(
        ".venv/bin/mac",
        '#!/bin/sh\necho "mac $*" >> "$FAKE_CALLS"\n'
        '[ "$*" != "stop agent" ] || { echo "Error: still running: sys-exporter" >&2; exit 1; }\n',
        0o755,
    )
    done = box.run("run", MAC_DATA_DIR=str(tmp_path / "data"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Error: still running: sys-exporter" in done.stderr
    assert "already stopped" not in done.stdout
    assert box.called("mac")[-1] == "stop master"


# A `mac` whose master runs from `start master` to `stop master` (its api-server.pid).
MAC_WITH_A_MASTER = (
    '#!/bin/sh\necho "mac $*" >> "$FAKE_CALLS"\n'
    'pid="$MAC_STATE_DIR/master/api-server.pid"\n'
    'case "$*" in\n'
    '  "start master") mkdir -p "${pid%/*}" && echo 1 > "$pid" ;;\n'
    '  "stop master") rm -f "$pid" ;;\n'
    "esac\n"
)


@contextmanager
def _run_waiting_on_its_master(tmp_path: Path) -> Iterator[tuple[Sandbox, Path, Popen]]:
    """scripts/run with a master that runs, once it waits in the foreground (as a terminal
    holds it); killed afterwards if a test left it running."""
    box = Sandbox(tmp_path)
    box.script("run")
    box.write("scripts/bootstrap", "#!/bin/sh\n", 0o755)
    box.write(".venv/bin/mac", MAC_WITH_A_MASTER, 0o755)
    data = tmp_path / "data"
    process = box.start("run", MAC_DATA_DIR=str(data))
    try:
        wait_for(lambda: box.called("mac")[-1:] == ["start agent"], 30, what="the run's start")
        assert (data / "state" / "master" / "api-server.pid").exists()  # waiting on it
        yield box, data, process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def _ctrl_c(process: Popen) -> None:
    """The terminal's Ctrl-C: SIGINT to the run's whole foreground group."""
    os.killpg(process.pid, signal.SIGINT)


def test_ctrl_c_stops_the_agent_and_then_the_master(tmp_path: Path) -> None:
    """Ctrl-C where scripts/run waits: the agent stops, then the master. A `return` in its
    trap once gave back the interrupted sleep's 130, and `set -e` ended the stop there,
    the master left running behind a prompt."""
    with _run_waiting_on_its_master(tmp_path) as (box, data, process):
        _ctrl_c(process)
        out, err = process.communicate(timeout=30)
    assert box.called("mac")[-2:] == ["stop agent", "stop master"], out + err
    stop_log = data / "stop.log"
    assert f"==> stopping the agent and the master (also in {stop_log})" in out.splitlines()
    assert stop_log.read_text() == out[out.index("==> stopping") :]  # what it said, kept
    assert not (data / "state" / "master" / "api-server.pid").exists()
    assert process.returncode == 130  # as an interrupted command does


def test_ctrl_c_with_its_output_piped_to_a_reader_that_went_still_stops_everything(
    tmp_path: Path,
) -> None:
    """`scripts/run | tee run.log`, Ctrl-C: tee goes too, and the stop's first line would
    end the shell (SIGPIPE), the master left running. The stop goes on into stop.log."""
    with _run_waiting_on_its_master(tmp_path) as (box, data, process):
        process.stdout.close()  # the reader, gone
        _ctrl_c(process)
        process.wait(timeout=30)
    assert box.called("mac")[-2:] == ["stop agent", "stop master"]
    assert not (data / "state" / "master" / "api-server.pid").exists()
    said = (data / "stop.log").read_text()
    assert said.startswith("==> stopping the agent and the master (also in")
    assert process.returncode == 130


@pytest.fixture
def images(tmp_path: Path) -> Sandbox:
    box = Sandbox(tmp_path)
    box.script("docker-images")
    for name in ("python3", "python3.11"):
        box.fake(name, RECORDING_PYTHON)
    return box


def test_python_named_as_a_command_is_the_one_that_runs(images: Sandbox) -> None:
    done = images.run("docker-images", "--help", PYTHON="python3.11")
    assert done.returncode == 0, done.stderr
    assert images.called("python3.11") == ["-m maccli.runtimes.dockerimage --help"]
    assert not images.called("python3")


def test_python_given_as_a_path_is_the_one_that_runs(images: Sandbox) -> None:
    done = images.run("docker-images", PYTHON=str(images.bin / "python3.11"))
    assert done.returncode == 0, done.stderr
    assert images.called("python3.11") == ["-m maccli.runtimes.dockerimage"]


def test_a_python_that_is_not_there_is_named_not_swapped(images: Sandbox) -> None:
    done = images.run("docker-images", PYTHON="python3.99")
    assert done.returncode == 1
    assert "PYTHON=python3.99 is not a command here" in done.stderr
    assert not images.called("python3")


def test_without_python_the_checkouts_venv_then_python3(images: Sandbox) -> None:
    done = images.run("docker-images")
    assert done.returncode == 0, done.stderr
    assert images.called("python3") == ["-m maccli.runtimes.dockerimage"]

    images.write(".venv/bin/python", '#!/bin/sh\necho "venv $*" >> "$FAKE_CALLS"\n', 0o755)
    images.calls.write_text("")
    done = images.run("docker-images", "--save")
    assert done.returncode == 0, done.stderr
    assert images.called("venv") == ["-m maccli.runtimes.dockerimage --save"]

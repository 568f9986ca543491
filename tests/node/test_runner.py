"""The one runner of system commands: never an exception, never a hang."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from node import runner
from node.runner import run_command


def test_a_command_s_exit_code_and_output_come_back():
    done = run_command([sys.executable, "-c", "import sys; print('out'); sys.exit(3)"])
    assert (done.returncode, done.stdout) == (3, "out\n")


def test_a_missing_program_is_127_as_in_a_shell():
    done = run_command(["/nonexistent/nvidia-smi", "-r"])
    assert done.returncode == 127 and "command not found" in done.stderr


def test_a_command_past_its_timeout_is_killed_and_is_124():
    started = time.monotonic()
    done = run_command([sys.executable, "-c", "import time; time.sleep(60)"], timeout=0.5)
    assert done.returncode == 124 and "timed out after 0.5s" in done.stderr
    assert time.monotonic() - started < 10


def test_one_that_does_not_end_when_killed_is_left_behind_not_waited_for(monkeypatch):
    """What a GPU reset stuck in the kernel does (uninterruptible: a kill waits for the
    syscall), played by a kill that does nothing: the caller (mac gpu reset) must go on and
    start MAC's services again."""
    monkeypatch.setattr(runner, "KILL_GRACE", 0.5)
    monkeypatch.setattr(subprocess.Popen, "kill", lambda self: None)
    started = time.monotonic()
    try:
        done = run_command([sys.executable, "-c", "import time; time.sleep(60)"], timeout=0.5)
        assert time.monotonic() - started < 10
        assert done.returncode == 124
        assert done.stderr.endswith("did not end when killed (left behind)")
    finally:
        for child in psutil.Process().children():
            if "time.sleep(60)" in " ".join(child.cmdline()):
                child.kill()


def test_a_child_that_keeps_the_output_open_does_not_hold_the_caller(monkeypatch):
    """The command ends when killed; a child it started still holds its output: the
    caller waits for the command, not for its output."""
    keeps_output = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(8)']); "
        "time.sleep(60)"
    )
    started = time.monotonic()
    done = run_command([sys.executable, "-c", keeps_output], timeout=0.5)
    assert time.monotonic() - started < 6  # not the 8 s its child keeps the output open
    assert done.returncode == 124 and done.stderr.endswith("timed out after 0.5s")


def test_output_that_is_not_utf8_is_read_not_raised():
    done = run_command([sys.executable, "-c", "import sys; sys.stdout.buffer.write(b'\\xe9')"])
    assert (done.returncode, done.stdout) == (0, "\ufffd")

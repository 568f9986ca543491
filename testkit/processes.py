"""Stopping the child processes of tests and benches, the same way everywhere."""

from __future__ import annotations

import subprocess

import psutil


def stop_process(process: subprocess.Popen, timeout: float = 15) -> int:
    """SIGTERM, then SIGKILL if it is still up after `timeout` s; its exit status."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


def exited(pid: int) -> bool:
    """The process is gone or a zombie. One look, since it can be reaped between two
    (pid_exists, then Process(pid), raised NoSuchProcess in a test's wait)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True

"""Stopping the child processes of tests and benches, the same way everywhere."""

from __future__ import annotations

import subprocess


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

"""Waiting in tests and benches: poll until something holds, or until a URL answers 200.

One implementation, so that every wait ends the same way: with the value it waited for,
or with an error naming what it waited for and for how long, or, when it watched a
child process, saying that the process exited first.
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """The thing waited for did not happen in time (a test failure, not an error)."""


def wait_for(
    check: Callable[[], T],
    timeout: float = 60.0,
    interval: float = 0.2,
    *,
    what: str = "",
    process: subprocess.Popen | None = None,
) -> T:
    """Call check() until it returns something true, and return that.

    `process`: a child that must stay up meanwhile; if it exits, the wait ends at once.
    """
    name = what or getattr(check, "__name__", "the condition")
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if process is not None and process.poll() is not None:
            raise WaitTimeout(f"{name}: {process.args[0]} exited with {process.returncode} first")
        if time.monotonic() > deadline:
            raise WaitTimeout(f"{name}: not within {timeout:g} s")
        time.sleep(interval)


def http_status(url: str, timeout: float = 3.0, headers: dict | None = None) -> int | None:
    """The status `url` answers a GET with, or None when nothing answers."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def wait_http(
    url: str,
    timeout: float = 30.0,
    *,
    process: subprocess.Popen | None = None,
    request_timeout: float = 2.0,
    interval: float = 0.1,
) -> None:
    """Until `url` answers 200; `process` as in wait_for."""
    wait_for(
        lambda: http_status(url, request_timeout) == 200,
        timeout,
        interval,
        what=f"{url} answering 200",
        process=process,
    )

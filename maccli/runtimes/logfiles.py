"""`mac logs` under the process runtime: a service's log file, its last lines, and what
is appended (-f), polling the file until Ctrl-C.

The file is `<state>/<role>/logs/<service>.log`: the service's stdout and stderr and the
runtime's own start lines.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import BinaryIO

from maccli.output import CliError

FOLLOW_POLL = 0.25  # seconds between two looks at a followed log file
_BLOCK = 64 * 1024


def tail_offset(handle: BinaryIO, lines: int | None) -> int:
    """Where the last `lines` lines of the file begin (0 for all of it)."""
    end = handle.seek(0, os.SEEK_END)
    if lines is None or end == 0:
        return 0
    if lines <= 0:
        return end
    handle.seek(end - 1)
    # A final newline ends the last line; it does not start another one.
    position = end - 1 if handle.read(1) == b"\n" else end
    found = 0
    while position > 0:
        start = max(0, position - _BLOCK)
        handle.seek(start)
        block = handle.read(position - start)
        index = len(block)
        while (index := block.rfind(b"\n", 0, index)) >= 0:
            found += 1
            if found == lines:
                return start + index + 1
        position = start
    return 0


def file_logs(path: Path, service: str, role: str, lines: int | None, follow: bool) -> int:
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        raise CliError(
            f"{service} has not run under the process runtime here: there is no {path}.",
            hint=f"Start the {role} (or, if it runs in Docker, add --runtime docker):",
            commands=[f"mac start {role}", f"mac logs {service} --runtime docker"],
        ) from None
    except OSError as exc:
        raise CliError(
            f"cannot read {path}: {exc.strerror or exc}.", commands=[f"sudo mac logs {service}"]
        ) from None
    out = sys.stdout.buffer
    try:
        handle.seek(tail_offset(handle, lines))
        while chunk := handle.read(_BLOCK):
            out.write(chunk)
        out.flush()
        while follow:
            # What is appended, until Ctrl-C; a truncated file is read again from its
            # start, a replaced one (same path, new file) is reopened.
            chunk = handle.read(_BLOCK)
            if chunk:
                out.write(chunk)
                out.flush()
                continue
            time.sleep(FOLLOW_POLL)
            try:
                now = os.stat(path)
            except FileNotFoundError:
                continue  # removed; the next start creates it again
            if now.st_ino != os.fstat(handle.fileno()).st_ino:
                with contextlib.suppress(OSError):
                    fresh = path.open("rb")
                    handle.close()
                    handle = fresh
            elif now.st_size < handle.tell():
                handle.seek(0)
    except KeyboardInterrupt:
        with contextlib.suppress(OSError):
            out.flush()
    finally:
        handle.close()
    return 0

"""Slurm's client tools played back from one release's captures (tests/fixtures/slurm/<release>/).

Where no cluster of that release can run (CI has Debian 12's 22.05 only), a test still
runs `scheduler.slurm.SlurmClient` against what the release's own tools printed:
`install_tools(capture, folder)` writes scontrol, sinfo, squeue and sacct into `folder`,
each answering a command line that the capture's commands.tsv holds with its captured
standard output, standard error and exit status, and any other with status 99 and
"no capture" (so a client that runs another command line fails loudly). With
`down=True` the captures taken with slurmctld stopped (files named down-*) answer first.

Run as a program by those scripts: stdlib only, no package import.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

TOOLS = ("scontrol", "sinfo", "squeue", "sacct")
NO_CAPTURE = 99
DOWN_PREFIX = "down-"


def install_tools(capture: Path, folder: Path, *, down: bool = False) -> Path:
    """Write the played-back tools into `folder`; `folder`, to put first on PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    for tool in TOOLS:
        script = folder / tool
        words = [sys.executable, __file__, str(Path(capture).resolve()), str(int(down)), tool]
        script.write_text(f'#!/bin/sh\nexec {shlex.join(words)} "$@"\n')
        script.chmod(0o755)
    return folder


def answer(capture: Path, down: bool, argv: list[str]) -> int:
    """Print the capture of `argv` (tool first) as the tool did; its exit status."""
    command = " ".join(argv)
    rows = []
    for line in (capture / "commands.tsv").read_text().splitlines()[1:]:
        name, status, captured = line.split("\t", 2)
        if captured == command and (down or not name.startswith(DOWN_PREFIX)):
            rows.append((not name.startswith(DOWN_PREFIX), name, int(status)))
    if not rows:
        sys.stderr.write(f"{argv[0]}: no capture in {capture} for {command!r}\n")
        return NO_CAPTURE
    _, name, status = min(rows)  # a down- capture first, where asked for
    for path, stream in ((capture / name, sys.stdout), (capture / f"{name}.stderr", sys.stderr)):
        if path.exists():
            stream.write(path.read_text())
    return status


if __name__ == "__main__":
    sys.exit(answer(Path(sys.argv[1]), sys.argv[2] == "1", sys.argv[3:]))

"""docs/troubleshooting.md's table of doctor checks names every check `mac doctor` runs."""

from __future__ import annotations

import re
from pathlib import Path

from node.checks import CHECK_IDS

DOC = Path(__file__).resolve().parents[3] / "docs" / "troubleshooting.md"


def _documented() -> list[str]:
    rows, inside = [], False
    for line in DOC.read_text().splitlines():
        if line.startswith("| doctor check |"):
            inside = True
        elif inside and line.startswith("| `"):
            rows += re.findall(r"`([a-z_]+)(?::<name>)?`", line.split(" | ")[0])
        elif inside and not line.startswith("|"):
            break
    return rows


def test_the_doctor_table_lists_every_check_in_order():
    assert _documented() == list(CHECK_IDS)


def _fix_table() -> dict[str, str]:
    """The `--fix` table: what it says each check's fix runs."""
    rows, inside = {}, False
    for line in DOC.read_text().splitlines():
        if line.startswith("| check | what `--fix` runs |"):
            inside = True
        elif inside and line.startswith("| `"):
            check, runs = line.strip("| ").split(" | ", 1)
            rows[check.strip("`")] = runs
        elif inside and not line.startswith("|"):
            break
    return rows


def test_the_fix_table_names_the_sysctl_command_the_persist_fix_runs(tmp_path):
    from node.checks.network import check_ip_forward_persisted
    from node.runner import CommandResult
    from tests.node.checks.scratch import scratch_context

    ctx = scratch_context(tmp_path, lambda argv: CommandResult(1, "", "not here"))
    applied = check_ip_forward_persisted(ctx).fix.splitlines()[-1]
    assert applied == "sudo sysctl -p /etc/sysctl.d/99-mac-ipforward.conf"
    row = _fix_table()["ip_forward_persisted"]
    assert "`sudo sysctl -p`" in row and "--system" not in row

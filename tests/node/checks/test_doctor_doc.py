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

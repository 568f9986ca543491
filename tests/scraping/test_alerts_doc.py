"""docs/alerts.md's rule tables say what the shipped rule files say.

One row per rule of scraping/prometheus/alerts.yml (and scaleout.yml), in the
file's order, with its severity, its `for:` and its runbook link; each runbook link
leads to a heading that exists. Only "fires when" is the docs' own words.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "scraping" / "prometheus"
DOC = ROOT / "docs" / "alerts.md"
HEADER = "| rule | severity | fires when | for | runbook |"


def _rules(name: str) -> list[dict]:
    groups = yaml.safe_load((RULES / name).read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def _tables() -> list[list[list[str]]]:
    """Each rules table of the doc: its rows, split into cells."""
    tables, rows = [], None
    for line in DOC.read_text().splitlines():
        if line.strip() == HEADER:
            rows = []
            tables.append(rows)
        elif rows is not None and line.startswith("|"):
            if not line.startswith("|---"):
                rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
        else:
            rows = None
    return tables


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {
        _slug(line.lstrip("#")) for line in page.read_text().splitlines() if line.startswith("#")
    }


def _expected(rule: dict) -> tuple[str, str, str, str]:
    runbook = rule["annotations"]["runbook_url"].removeprefix("docs/")
    return rule["alert"], rule["labels"]["severity"], rule.get("for", "-"), runbook


def _documented(rows: list[list[str]]) -> list[tuple[str, str, str, str]]:
    found, runbook = [], ""
    for rule, severity, _fires_when, for_, link in rows:
        if link != "same":  # "same": the runbook of the row above
            match = re.search(r"\]\(([^)]+)\)", link)
            assert match, f"{rule}: no runbook link in {link!r}"
            runbook = match.group(1)
        found.append((rule, severity, for_, runbook))
    return found


@pytest.mark.parametrize(("table", "rules"), [(0, "alerts.yml"), (1, "scaleout.yml")])
def test_the_rules_table_lists_every_rule_as_shipped(table, rules):
    assert _documented(_tables()[table]) == [_expected(rule) for rule in _rules(rules)]


@pytest.mark.parametrize("rules", ["alerts.yml", "scaleout.yml"])
def test_every_runbook_link_leads_to_a_heading(rules):
    for rule in _rules(rules):
        page, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert anchor in _anchors(ROOT / page), f"{rule['alert']}: {page} has no #{anchor}"

"""The docs' settings tables are the declaration's: generated, committed, never stale."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from contract.settings import CATALOG, Applies, tables

REPO = Path(__file__).resolve().parents[2]


def _rows(page: str, marker: str) -> dict[str, list[str]]:
    """The rows between a table's markers, by setting name: its cells."""
    text = (REPO / page).read_text()
    body = text.split(f"<!-- settings:{marker} -->", 1)[1].split(f"<!-- /settings:{marker} -->")[0]
    rows = {}
    for line in body.splitlines():
        found = re.match(r"\| `([A-Z][A-Z0-9_]+)` \|(.*)\|$", line)
        if found:
            rows[found[1]] = [cell.strip() for cell in re.split(r"(?<!\\)\|", found[2])]
    return rows


def test_the_committed_tables_are_what_the_declaration_generates():
    assert tables.stale() == [], "run: python -m contract.settings.tables --write"


def test_a_changed_declaration_makes_a_table_stale_and_write_mends_it(tmp_path, monkeypatch):
    for page in tables.pages():
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / page, tmp_path / page)
    settings_md = tmp_path / "docs" / "settings.md"
    settings_md.write_text(settings_md.read_text().replace("| `MAC_PROBE_INTERVAL` |", "| x |"))
    assert tables.stale(tmp_path) == ["docs/settings.md"]
    monkeypatch.setattr(tables, "ROOT", tmp_path)
    assert tables.main([]) == 1
    assert tables.main(["--write"]) == 0
    assert tables.stale(tmp_path) == []
    assert settings_md.read_text() == (REPO / "docs" / "settings.md").read_text()


def test_the_full_reference_lists_every_setting_once():
    rows = _rows("docs/settings.md", "all")
    assert set(rows) == set(CATALOG)


def test_each_readme_row_says_under_which_runtime_it_works():
    for marker in ("agent", "master"):
        for name, cells in _rows("README.md", marker).items():
            item = CATALOG[name]
            assert item.readme, name
            runtime = cells[1]
            assert runtime.startswith(tables.APPLIES[item.applies]), (name, runtime)
    master = _rows("README.md", "master")
    assert master["MAC_DATA_DIR"][1] == "process only (Docker: the mac-data volume)"
    # Issue 34: mac-prometheus under Docker loads what MAC writes from it.
    assert master["MAC_SCRAPE_INTERVAL"][1] == "both"
    assert master["MAC_PROBE_INTERVAL"][1] == "both"
    assert _rows("README.md", "agent")["MAC_AGENT_NETWORK"][1] == "Docker only"
    assert {name for name, item in CATALOG.items() if item.readme} == set(
        _rows("README.md", "agent")
    ) | set(_rows("README.md", "master"))


def test_the_mac_command_s_table_has_every_setting_a_node_reads():
    rows = _rows("docs/cli.md", "node")
    for name in ("MASTER_IP", "MAC_SYS_EXPORTER_PORT", "MAC_BMC_REDFISH_URL", "MAC_PROC_ROOT"):
        assert name in rows
    assert rows["MAC_BIND"][1:3] == ["process only", "`mac env set`"]
    assert rows["MAC_NODE_ENV_FILE"][2] == "environment only"
    assert any(item.applies is not Applies.BOTH for item in CATALOG.values())


def test_links_in_the_tables_are_relative_to_their_page():
    assert "([docs/tls.md](docs/tls.md))" in (REPO / "README.md").read_text()
    cli = (REPO / "docs" / "cli.md").read_text()
    assert "([tls.md](tls.md))" in cli
    assert "([../exporters/README.md](../exporters/README.md))" in cli

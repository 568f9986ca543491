"""docs/benchmarks.md's sections: each between its own pair of markers."""

from __future__ import annotations

import pytest

from bench import report


def test_the_benchmarks_doc_has_each_section_between_its_own_markers() -> None:
    report.check_markers(report.BENCHMARKS_MD.read_text())


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("<!-- bench:a -->\n<!-- bench:b -->\n<!-- /bench:b -->\n", "'b' starts inside 'a'"),
        ("<!-- bench:a -->\n<!-- /bench:a -->\n<!-- bench:a -->\n", "'a' appears twice"),
        ("text\n<!-- /bench:a -->\n", "end of 'a' without its start"),
        ("<!-- bench:a -->\n## A\n", "'a' is never closed"),
    ],
)
def test_broken_markers_are_named(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        report.check_markers(text)


def test_a_write_refuses_a_doc_whose_markers_are_broken(tmp_path) -> None:
    doc = tmp_path / "benchmarks.md"
    broken = "# Benchmarks\n\n<!-- bench:other -->\n## Other\n\n<!-- bench:mine -->\n"
    doc.write_text(broken)
    with pytest.raises(ValueError, match="starts inside"):
        report.update_section("mine", "Mine", "figures", path=doc)
    assert doc.read_text() == broken


def test_a_write_replaces_its_own_section_and_leaves_the_others(tmp_path) -> None:
    doc = tmp_path / "benchmarks.md"
    report.update_section("one", "One", "first", path=doc)
    report.update_section("two", "Two", "second", path=doc)
    report.update_section("one", "One", "again", path=doc)
    text = doc.read_text()
    report.check_markers(text)
    assert "again" in text and "first" not in text and "second" in text
    assert text.index("## One") < text.index("## Two")

"""Colour only on a terminal, never with NO_COLOR; tables without trailing blanks."""

from __future__ import annotations

import io

from maccli import output


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_on_a_terminal_only(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr("sys.stdout", _Tty())
    assert output.out().no_color is False
    monkeypatch.setenv("NO_COLOR", "1")
    assert output.out().no_color is True
    monkeypatch.setattr("sys.stdout", io.StringIO())
    monkeypatch.delenv("NO_COLOR")
    assert output.out().no_color is True


def test_table_is_aligned_without_escape_codes_off_a_terminal(capsys):
    output.table(["SERVICE", "STATE"], [("sys-exporter", output.styled("running")), ("b", "x")])
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["SERVICE       STATE", "sys-exporter  running", "b             x"]


def test_error_lists_the_next_commands(capsys):
    output.print_error(output.CliError("it broke.", hint="Do this:", commands=["mac doctor"]))
    assert capsys.readouterr().err == "Error: it broke.\nDo this:\n  mac doctor\n"


def test_durations_read_like_uptime():
    assert [output.format_duration(s) for s in (None, 5, 65, 3700, 90000)] == [
        "-",
        "5s",
        "1m05s",
        "1h01m",
        "1d1h",
    ]

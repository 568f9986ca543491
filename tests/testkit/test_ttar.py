"""testkit.ttar: Prometheus's text archives back into trees, and slices cut from them."""

from __future__ import annotations

import pytest

from testkit.ttar import SEPARATOR, TtarError, extract, parse, slice_archive

ARCHIVE = f"""# Archive created by ttar -c -f x.ttar sys
Directory: sys
Mode: 755
{SEPARATOR}
Path: sys/state
Lines: 1
4: ACTIVE
Mode: 644
{SEPARATOR}
Path: sys/cmdline
Lines: 1
vimNULLBYTEtest.goNULLBYTE\\NULLBYTEEOF
Mode: 644
{SEPARATOR}
Path: sys/link
SymlinkTo: ../devices/x
{SEPARATOR}
Path: sys/secret
Lines: 0
Mode: 200
{SEPARATOR}
Directory: other
Mode: 755
{SEPARATOR}
Path: other/file
Lines: 2
a
b
Mode: 644
{SEPARATOR}
"""


def test_it_decodes_files_nul_bytes_missing_newlines_and_links(tmp_path):
    tree = extract(_write(tmp_path, ARCHIVE), tmp_path / "tree")
    assert (tree / "sys" / "state").read_text() == "4: ACTIVE\n"
    # NULLBYTE is a NUL, \\NULLBYTE the word itself; a trailing EOF: no final newline.
    assert (tree / "sys" / "cmdline").read_bytes() == b"vim\x00test.go\x00NULLBYTE"
    assert (tree / "sys" / "link").readlink().as_posix() == "../devices/x"
    assert (tree / "sys" / "secret").stat().st_mode & 0o777 == 0o200
    assert (tree / "other" / "file").read_text() == "a\nb\n"


def test_content_lines_keep_form_feeds_and_separators(tmp_path):
    # A PCI config space or an EDID holds bytes that str.splitlines() splits on.
    archive = "Path: sys/config\nLines: 1\n\x0c\x1c\x1d\x1e\x0bNULLBYTE\x10EOF\nMode: 444\n"
    tree = extract(_write(tmp_path, archive), tmp_path / "tree")
    assert (tree / "sys" / "config").read_bytes() == b"\x0c\x1c\x1d\x1e\x0b\x00\x10"


def test_strip_keeps_only_the_entries_under_a_path(tmp_path):
    extract(_write(tmp_path, ARCHIVE), tmp_path / "out", strip="other")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["file"]


def test_a_slice_is_verbatim_and_reads_back(tmp_path):
    cut = slice_archive(ARCHIVE, "other", "from a test")
    assert cut.startswith("# from a test\n")
    body = cut.split("\n", 1)[1]
    assert body in ARCHIVE  # every kept line, in order, as in the source
    assert [entry.path for entry in parse(cut)] == ["other", "other/file"]


def test_a_slice_may_keep_several_paths_in_archive_order():
    cut = slice_archive(ARCHIVE, ["other", "sys/link"], "two paths")
    assert [entry.path for entry in parse(cut)] == ["sys/link", "other", "other/file"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Path: a\nLines: 3\nx\n", "announces 3 lines"),
        ("Lines: 1\nx\n", "Lines without a Path"),
        ("Garbage here\n", "unexpected 'Garbage here'"),
    ],
)
def test_a_broken_archive_names_the_line(text, message):
    with pytest.raises(TtarError, match=message):
        parse(text)


def test_an_entry_may_not_leave_the_destination(tmp_path):
    with pytest.raises(TtarError, match="outside"):
        extract(_write(tmp_path, "Path: ../../evil\nLines: 1\nx\n"), tmp_path / "out")


def _write(tmp_path, text: str):
    path = tmp_path / "archive.ttar"
    path.write_text(text)
    return path

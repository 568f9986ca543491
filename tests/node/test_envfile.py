"""write_env_file: what it writes reads back exactly, concurrent writers lose nothing, and a
key written twice in a file is left once.

Every file here is under tmp_path: the machine's own env files are never touched.
"""

from __future__ import annotations

import multiprocessing
import stat
import threading
from pathlib import Path

import pytest

from node.envfile import EnvFileError, read_env_file, write_env_file

# Values a password or token may well be, each of which a bare KEY=VALUE line mangles.
AWKWARD = [
    "a #b",
    '"quoted"',
    "'single'",
    '"unclosed',
    "'unclosed",
    'pa"ss',
    "s3cret pa$$ word",
    "back\\slash",
    "a\\nb",  # a backslash then n, not a line break
    "trailing\\",
    '\\"',
    "x # y # z",
    "${HOME}/x",
    "tab\there",
    "=starts=with=equals",
    "#hash-first",
    "ünïcödé ✓",
]


@pytest.fixture
def env_path(tmp_path: Path) -> Path:
    path = tmp_path / "etc" / "env"
    path.parent.mkdir()
    path.write_text("# kept\nBEFORE=1\nAFTER=2\n")
    return path


@pytest.mark.parametrize("value", AWKWARD)
def test_a_value_reads_back_exactly_and_the_other_settings_stay(env_path, value):
    write_env_file(env_path, {"OTHER": value})
    assert read_env_file(env_path) == {"BEFORE": "1", "AFTER": "2", "OTHER": value}
    # Replaced in place, then followed by another key: still exact, nothing swallowed.
    write_env_file(env_path, {"BEFORE": value, "LAST": "3"})
    assert read_env_file(env_path) == {"BEFORE": value, "AFTER": "2", "OTHER": value, "LAST": "3"}
    assert env_path.read_text().startswith("# kept\n")


def test_plain_values_are_written_bare_and_awkward_ones_double_quoted(env_path):
    write_env_file(env_path, {"BEFORE": "10.0.0.5", "X": 'a "b" \\c #d'})
    assert env_path.read_text() == '# kept\nBEFORE=10.0.0.5\nAFTER=2\nX="a \\"b\\" \\\\c #d"\n'


def test_files_written_before_stay_readable(env_path):
    env_path.write_text("A=1 # note\nB='x # y'\nexport C=\"q\"\n")
    write_env_file(env_path, {"D": "4"})
    assert read_env_file(env_path) == {"A": "1", "B": "x # y", "C": "q", "D": "4"}


@pytest.mark.parametrize("value", ["one\ntwo", "one\rtwo", "nul\0byte"])
def test_a_value_that_cannot_be_stored_is_refused_and_the_file_left_alone(env_path, value):
    before = env_path.read_bytes()
    with pytest.raises(EnvFileError, match="OTHER"):
        write_env_file(env_path, {"OTHER": value})
    assert env_path.read_bytes() == before


def test_a_key_written_twice_is_left_once_with_the_new_value_where_the_first_was(tmp_path):
    path = tmp_path / "env"
    path.write_text("MASTER_IP=10.0.0.1\nOTHER=x\nexport MASTER_IP=10.0.0.2\nMASTER_IP=10.0.0.3\n")
    write_env_file(path, {"MASTER_IP": "10.0.0.9"})
    assert path.read_text() == "MASTER_IP=10.0.0.9\nOTHER=x\n"
    assert read_env_file(path)["MASTER_IP"] == "10.0.0.9"


def test_unset_removes_every_line_of_a_key_written_twice(tmp_path):
    path = tmp_path / "env"
    path.write_text("MASTER_IP=10.0.0.1\nOTHER=x\nMASTER_IP=10.0.0.2\n")
    write_env_file(path, {"MASTER_IP": None})
    assert path.read_text() == "OTHER=x\n"
    assert "MASTER_IP" not in read_env_file(path)


def test_a_multi_line_quoted_value_of_another_key_is_kept_whole(tmp_path):
    # A line inside another key's quoted value is no key of its own.
    path = tmp_path / "env"
    path.write_text('CERT="line one\nMASTER_IP=inside\n"\nMASTER_IP=10.0.0.1\n')
    write_env_file(path, {"MASTER_IP": "10.0.0.2"})
    assert read_env_file(path) == {"CERT": "line one\nMASTER_IP=inside\n", "MASTER_IP": "10.0.0.2"}


def test_concurrent_writers_of_different_keys_all_survive(tmp_path):
    path = tmp_path / "etc" / "env"
    keys = [f"KEY_{n}" for n in range(20)]
    start = threading.Barrier(len(keys))

    def write(key: str) -> None:
        start.wait()
        write_env_file(path, {key: key.lower()})

    threads = [threading.Thread(target=write, args=(key,)) for key in keys]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert read_env_file(path) == {key: key.lower() for key in keys}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # The lock beside it is owner-only too (it is created with the file's mode).
    assert stat.S_IMODE(path.with_name("env.lock").stat().st_mode) == 0o600


def _write_in_a_process(path: str, key: str) -> None:
    for n in range(5):
        write_env_file(Path(path), {key: str(n)})


def test_concurrent_processes_lose_no_update(tmp_path):
    path = tmp_path / "env"
    keys = [f"PROC_{n}" for n in range(8)]
    context = multiprocessing.get_context("fork")
    processes = [context.Process(target=_write_in_a_process, args=(str(path), k)) for k in keys]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    assert read_env_file(path) == {key: "4" for key in keys}


def test_a_line_that_would_swallow_the_new_one_is_named_and_the_file_left_alone(tmp_path):
    # An unclosed quote left by hand: the quote of the appended line would close it.
    path = tmp_path / "env"
    path.write_text('A="open\nB=2\n')
    with pytest.raises(EnvFileError, match=r"K would not read back from .* line 1 of it"):
        write_env_file(path, {"K": "a #b"})
    assert path.read_text() == 'A="open\nB=2\n'

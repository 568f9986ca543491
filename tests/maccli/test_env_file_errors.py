"""An env file `mac` cannot read (not UTF-8, a directory) is a clear error, not a traceback.

Run through maccli.main.main in this process, every file setting pointed into tmp_path:
the machine's own /etc/mango/mac/env and ~/.mac/env are never read.
"""

from __future__ import annotations

import pytest

from maccli.main import main

COMMANDS = [["env", "get", "MASTER_IP"], ["status"], ["stop", "agent"]]


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_a_non_utf8_user_file_names_the_file_and_the_fix(files, argv, capsys):
    user_file, _ = files
    user_file.write_bytes(b"MASTER_IP=10.0.0.5\nMAC_LABELS=site=caf\xe9\n")  # Latin-1
    code = main(argv)
    said = capsys.readouterr().err
    assert code == 1, said
    assert "Traceback" not in said
    assert f"Error: {user_file} is not UTF-8 text" in said
    assert "byte 0xe9 on line 2" in said
    assert f'iconv -f latin1 -t utf-8 -o "{user_file}.utf8" "{user_file}"' in said


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_a_per_node_file_that_is_a_directory_names_it_and_the_fix(files, argv, capsys):
    _, node_file = files
    node_file.mkdir(parents=True)
    code = main(argv)
    said = capsys.readouterr().err
    assert code == 1, said
    assert "Traceback" not in said
    assert f"Error: {node_file} is a directory, not an env file" in said
    assert f"mv {node_file} {node_file}.bak" in said


def test_a_write_the_file_refuses_midway_is_a_clear_error_too(files, monkeypatch, capsys):
    """A write deep inside a command (the node key at registration) that meets a line the
    reader could not take back is the same clear error, not a traceback."""
    from maccli import main as main_module
    from node.envfile import write_env_file

    _, node_file = files
    node_file.parent.mkdir(parents=True)
    before = 'MASTER_IP=10.0.0.5\nMAC_LABELS="rack=1\n'  # an unclosed quote left by hand
    node_file.write_text(before)

    def registering(args, ap):
        # A value that needs quotes: its opening quote would close the one left open.
        write_env_file(node_file, {"MAC_NODE_KEY": "k #1"})
        return 0

    monkeypatch.setattr(main_module, "dispatch", registering)

    code = main(["status"])

    said = capsys.readouterr().err
    assert code == 1 and "Traceback" not in said
    assert str(node_file) in said and "line 2" in said
    assert node_file.read_text() == before

"""`sudo mac ...` by a user whose agent runs under that user, not root.

Root's settings and /var/lib/mac hold no agent there (maccli.agent.sudo_owner):
`mac doctor` says whose checks it ran, `--fix` applies the system's fixes but never
`mac restart agent` as root, which would start a second agent beside the user's, and
the agent's other commands (status, logs, start, stop, restart) warn before they act on
root's. `sudo mac gpu reset` refuses: tests/maccli/test_gpu_reset.py.
"""

from __future__ import annotations

import os
import socket

import pytest

from maccli.agent import sudo_owner
from maccli.agent.specs import ROLE
from maccli.main import main
from node import config
from tests.maccli.conftest import loopback_address


@pytest.fixture
def under_sudo(files, tmp_path, monkeypatch):
    """Root's HOME and environment, as sudo gives them; op's agent in op's ~/.mac/state."""
    home = tmp_path / "op-home"
    theirs = home / ".mac" / "state" / (socket.gethostname() or "localhost")
    (theirs / ROLE).mkdir(parents=True)
    roots_home = tmp_path / "root-home"
    roots_home.mkdir()
    for name in ("MAC_USER_ENV_FILE", "MAC_STATE_DIR"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(roots_home))
    monkeypatch.setenv("SUDO_USER", "op")
    # One service, where nothing listens: its check fails with `mac restart agent`.
    monkeypatch.setenv("MAC_AGENT_SERVICES", "sw-exporter")
    monkeypatch.setenv("MAC_BIND", loopback_address(9))
    monkeypatch.setenv("MAC_AGENT_NETWORK", "bridge")  # forwarding matters: ip_forward's fix
    (tmp_path / "proc" / "sys" / "net" / "ipv4").mkdir(parents=True)
    (tmp_path / "proc" / "sys" / "net" / "ipv4" / "ip_forward").write_text("0\n")
    monkeypatch.setattr(config, "DEFAULT_STATE_DIR_ROOT", str(tmp_path / "var-lib-mac"))
    monkeypatch.setattr(sudo_owner, "home_of", {"op": home}.get)
    monkeypatch.setattr(sudo_owner, "uid_of", {"op": os.getuid()}.get)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    return theirs


def _said(text: str) -> str:
    return " ".join(text.split())


def test_the_checks_say_they_read_roots_settings_and_how_to_check_the_users_agent(
    under_sudo, capsys
):
    assert main(["doctor", "service:sw-exporter"]) == 1
    said = capsys.readouterr()
    assert "fail    service:sw-exporter" in said.out  # root's settings: none answers there
    assert _said(said.err).startswith(
        f"Warning: root has no MAC agent here; op's agent runs from {under_sudo}."
    )
    assert "run `mac doctor` as op, without sudo." in _said(said.err)


def test_fix_applies_the_systems_fixes_and_leaves_the_users_agent_to_the_user(
    under_sudo, tmp_path, capsys
):
    forward = tmp_path / "proc" / "sys" / "net" / "ipv4" / "ip_forward"

    assert main(["doctor", "--fix", "--yes", "ip_forward", "service:sw-exporter"]) == 1
    said = capsys.readouterr()
    lines = said.out.splitlines()
    assert "  $ sudo sysctl -w net.ipv4.ip_forward=1" in lines
    assert forward.read_text() == "1\n"
    heading = lines.index("Not applied as root (op's agent): service:sw-exporter.")
    assert lines[heading + 1 : heading + 3] == [
        "  As op, without sudo, check that agent and fix what it finds:",
        "  mac doctor --fix service:sw-exporter",
    ]
    assert "  $ mac restart agent" not in lines  # never run as root
    assert not (tmp_path / "var-lib-mac").exists()  # no agent of root's was started
    assert lines[-1] == "Left to op's agent: service:sw-exporter (above)."
    assert not any(line.startswith("Still to fix") for line in lines)  # the rest is fixed


def test_with_only_the_users_agent_to_fix_nothing_is_applied(under_sudo, tmp_path, capsys):
    assert main(["doctor", "--fix", "--yes", "service:sw-exporter"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "  mac doctor --fix service:sw-exporter" in lines
    assert lines[-1] == "Nothing here can be applied by --fix; run the commands above."
    assert not (tmp_path / "var-lib-mac").exists()


def test_roots_own_agent_is_fixed_as_before(under_sudo, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MAC_STATE_DIR", str(tmp_path / "roots-state"))  # chosen: root's
    assert main(["doctor", "--fix", "--dry-run", "service:sw-exporter"]) == 1
    said = capsys.readouterr()
    assert "Not applied as root" not in said.out
    assert "  mac restart agent" in said.out.splitlines()
    assert "Warning" not in said.err


@pytest.mark.parametrize(
    "words",
    [["status"], ["status", "agent"], ["logs", "sw-exporter", "-n", "1"], ["stop", "agent"]],
    ids=["status", "status-agent", "logs", "stop-agent"],
)
def test_the_agents_commands_warn_that_they_act_on_roots(under_sudo, capsys, words):
    main(words)
    said = _said(capsys.readouterr().err)
    typed = " ".join(words)
    assert said.startswith(
        f"Warning: root has no MAC agent here; op's agent runs from {under_sudo}. "
        f"`sudo mac {typed}` acts on root's: for op's, run `mac {typed}` as op, without sudo."
    )


@pytest.mark.parametrize(
    "words", [["status", "master"], ["logs", "api-server", "-n", "1"], ["env", "list"]]
)
def test_the_masters_commands_and_the_rest_say_nothing_of_it(under_sudo, capsys, words):
    main(words)
    assert "op's agent" not in capsys.readouterr().err


def test_not_under_sudo_or_with_a_folder_chosen_nothing_is_said(
    under_sudo, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("MAC_STATE_DIR", str(tmp_path / "roots-state"))
    main(["status"])
    assert "op's agent" not in capsys.readouterr().err
    monkeypatch.delenv("MAC_STATE_DIR")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # op itself, or sudo -u another user
    main(["status"])
    assert "op's agent" not in capsys.readouterr().err


def test_root_reads_the_users_file_only_as_that_users_plain_file(tmp_path, monkeypatch):
    """Root reading a user's ~/.mac/env must not be pointed elsewhere by that user: no
    link (to a file root alone may read), no FIFO (root would wait), nothing not theirs,
    nothing huge."""
    monkeypatch.setattr(sudo_owner, "uid_of", {"op": os.getuid()}.get)
    plain = tmp_path / "env"
    plain.write_text("MAC_STATE_DIR=/srv/op-state\n")
    assert sudo_owner.users_setting(plain, "op", "MAC_STATE_DIR") == "/srv/op-state"
    assert sudo_owner.users_setting(plain, "op", "MAC_BIND") == ""  # not set there
    assert sudo_owner.users_setting(plain, "nobody-here", "MAC_STATE_DIR") == ""

    secret = tmp_path / "roots-only"
    secret.write_text("MAC_STATE_DIR=/what-root-alone-reads\n")
    (tmp_path / "link").symlink_to(secret)
    assert sudo_owner.users_setting(tmp_path / "link", "op", "MAC_STATE_DIR") == ""
    os.mkfifo(tmp_path / "fifo")  # read at once, not waited on
    assert sudo_owner.users_setting(tmp_path / "fifo", "op", "MAC_STATE_DIR") == ""
    huge = tmp_path / "huge"
    huge.write_text("MAC_STATE_DIR=/srv/op-state\n" + "#" * sudo_owner.USER_FILE_LIMIT)
    assert sudo_owner.users_setting(huge, "op", "MAC_STATE_DIR") == ""
    monkeypatch.setattr(sudo_owner, "uid_of", {"op": os.getuid() + 4242}.get)
    assert sudo_owner.users_setting(plain, "op", "MAC_STATE_DIR") == ""  # not op's file

"""Fix steps: the line each one prints does, run by a real shell, what applying it does."""

from __future__ import annotations

import subprocess

import pytest

from maccli.fixsteps import apply_step
from node.checks import CheckContext, CheckResult, CheckStatus
from node.checks.fixes import (
    Mac,
    MakeDirs,
    Run,
    SetSysctl,
    SetSysctlInFile,
    WriteFile,
    needs_root,
    render,
)
from node.host import Roots


def _shell(line: str, cwd) -> None:
    """Run a printed line as root would (no sudo needed, and sudo may not be installed)."""
    subprocess.run(
        ["sh", "-c", line.replace("sudo ", "")], cwd=cwd, check=True, capture_output=True
    )


def _ctx(tmp_path) -> CheckContext:
    return CheckContext(
        roots=Roots(proc_root=str(tmp_path / "proc"), etc_root=str(tmp_path / "etc"))
    )


def _no_mac(args):
    raise AssertionError(f"no mac command expected: {args}")


@pytest.mark.parametrize(
    "content", ["net.ipv4.ip_forward = 1\n", "[Network]\nIPForward=yes\n", "a\n\nb c=d\n"]
)
def test_a_written_file_is_what_the_printed_tee_line_writes(tmp_path, content):
    shown = WriteFile(str(tmp_path / "by-shell" / "x.conf"), content)
    (tmp_path / "by-shell").mkdir()
    _shell(shown.line(), tmp_path)
    applied = apply_step(WriteFile("/etc/x.conf", content), _ctx(tmp_path), _no_mac)
    assert applied.ok
    assert (tmp_path / "etc/x.conf").read_text() == content
    assert (tmp_path / "by-shell/x.conf").read_text() == content


def test_a_file_content_the_printed_forms_cannot_carry_is_refused():
    for content in ("no newline", "it's\n", "50%\n", "back\\slash\n"):
        with pytest.raises(ValueError):
            WriteFile("/etc/x", content)


def test_editing_a_sysctl_file_matches_the_printed_sed(tmp_path):
    text = (
        "# keep me\n"
        "vm.swappiness = 10\n"
        "  net.ipv4.ip_forward=0\n"
        "net/ipv4/ip_forward = 0\n"
        "net.ipv4.ip_forward_update_priority = 1\n"  # another key, left alone
    )
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/sysctl.conf").write_text(text)
    (tmp_path / "by-sed.conf").write_text(text)
    _shell(
        SetSysctlInFile(str(tmp_path / "by-sed.conf"), "net.ipv4.ip_forward", "1").line(), tmp_path
    )
    step = SetSysctlInFile("/etc/sysctl.conf", "net.ipv4.ip_forward", "1")
    assert apply_step(step, _ctx(tmp_path), _no_mac).ok
    edited = (tmp_path / "etc/sysctl.conf").read_text()
    assert edited == (tmp_path / "by-sed.conf").read_text()
    assert edited.splitlines()[2:4] == ["net.ipv4.ip_forward = 1", "net.ipv4.ip_forward = 1"]
    assert "net.ipv4.ip_forward_update_priority = 1" in edited


def test_sysctl_and_mkdir_go_under_the_contexts_roots(tmp_path):
    (tmp_path / "proc/sys/net/ipv4").mkdir(parents=True)
    (tmp_path / "proc/sys/net/ipv4/ip_forward").write_text("0\n")
    ctx = _ctx(tmp_path)
    assert apply_step(SetSysctl("net.ipv4.ip_forward", "1"), ctx, _no_mac).ok
    assert (tmp_path / "proc/sys/net/ipv4/ip_forward").read_text() == "1\n"
    assert apply_step(MakeDirs("/etc/systemd/network/a.network.d"), ctx, _no_mac).ok
    assert (tmp_path / "etc/systemd/network/a.network.d").is_dir()


def test_a_refused_step_says_why_and_never_raises(tmp_path):
    ctx = _ctx(tmp_path)  # no proc tree: the sysctl file is missing
    applied = apply_step(SetSysctl("net.ipv4.ip_forward", "1"), ctx, _no_mac)
    assert not applied.ok and "No such file" in applied.error
    failed = apply_step(Run(("sh", "-c", "echo nope >&2; exit 3"), root=False), ctx, _no_mac)
    assert not failed.ok and failed.error == "nope"


def test_mac_steps_run_through_the_mac_command(tmp_path):
    seen = []
    applied = apply_step(Mac(("restart", "agent")), _ctx(tmp_path), lambda a: seen.append(a) or 4)
    assert seen == [["restart", "agent"]]
    assert not applied.ok and applied.error == "exit code 4"


def test_a_results_fix_text_is_rendered_from_its_steps():
    steps = (MakeDirs("/etc/d"), Run(("networkctl", "reload")), Mac(("restart", "agent")))
    result = CheckResult("x", "x", CheckStatus.FAIL, "broken", steps=steps)
    assert (
        result.fix
        == render(steps)
        == ("sudo mkdir -p /etc/d\nsudo networkctl reload\nmac restart agent")
    )
    assert needs_root(steps) and not needs_root((Mac(("restart", "agent")),))
    assert not needs_root((Run(("docker", "rm", "-f", "mac-x"), root=False),))
    with pytest.raises(ValueError):
        CheckResult("x", "x", CheckStatus.FAIL, "broken", "other text", steps=steps)


def test_host_paths_map_to_the_roots_and_back(tmp_path):
    ctx = CheckContext(roots=Roots(proc_root="/host/proc", etc_root="/host/root/etc"))
    assert str(ctx.local("/etc/sysctl.d/a.conf")) == "/host/root/etc/sysctl.d/a.conf"
    assert str(ctx.local("/proc/sys/net/ipv4/ip_forward")) == "/host/proc/sys/net/ipv4/ip_forward"
    assert str(ctx.local("/etcetera")) == "/etcetera"
    assert ctx.host("/host/root/etc/sysctl.conf") == "/etc/sysctl.conf"
    assert ctx.host("/elsewhere/x") == "/elsewhere/x"

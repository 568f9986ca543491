"""Docker enabled at boot, and leftover mac-* containers of another Compose project."""

from __future__ import annotations

import os
from pathlib import Path

from node.checks import CheckContext, CheckStatus
from node.checks.docker import check_docker_enabled, check_stale_containers
from node.checks.fixes import Run
from node.host import Roots
from node.runner import CommandResult


def _ctx(tmp_path: Path, answers: dict) -> CheckContext:
    def run(argv):
        return answers.get(tuple(argv[:2]), CommandResult(127, "", f"{argv[0]}: not found"))

    roots = Roots(
        etc_root=str(tmp_path / "etc"),
        usr_root=str(tmp_path / "usr"),
        lib_root=str(tmp_path / "lib"),
    )
    return CheckContext(roots=roots, extra={"run": run})


def _install_unit(tmp_path: Path) -> Path:
    unit = tmp_path / "usr/lib/systemd/system/docker.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("[Unit]\nDescription=Docker\n")
    return unit


def test_docker_disabled_at_boot_fails_with_enable_now(tmp_path):
    _install_unit(tmp_path)
    ctx = _ctx(tmp_path, {("systemctl", "is-enabled"): CommandResult(1, "disabled\n")})
    result = check_docker_enabled(ctx)
    assert result.status == CheckStatus.FAIL
    assert "docker.service is disabled" in result.detail
    assert result.steps == (Run(("systemctl", "enable", "--now", "docker")),)
    assert result.fix == "sudo systemctl enable --now docker"


def test_a_masked_docker_is_unmasked_first(tmp_path):
    _install_unit(tmp_path)
    ctx = _ctx(tmp_path, {("systemctl", "is-enabled"): CommandResult(1, "masked\n")})
    assert check_docker_enabled(ctx).fix.splitlines() == [
        "sudo systemctl unmask docker",
        "sudo systemctl enable --now docker",
    ]


def test_docker_enabled_passes(tmp_path):
    _install_unit(tmp_path)
    ctx = _ctx(tmp_path, {("systemctl", "is-enabled"): CommandResult(0, "enabled\n")})
    assert check_docker_enabled(ctx).status == CheckStatus.PASS


def test_without_systemd_the_unit_symlinks_decide(tmp_path):
    unit = _install_unit(tmp_path)
    offline = {("systemctl", "is-enabled"): CommandResult(1, "", "Failed to connect to bus")}
    result = check_docker_enabled(_ctx(tmp_path, offline))
    assert result.status == CheckStatus.FAIL and "multi-user.target.wants" in result.detail
    wants = tmp_path / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True)
    os.symlink(unit, wants / "docker.service")
    assert check_docker_enabled(_ctx(tmp_path, offline)).status == CheckStatus.PASS


def test_no_docker_engine_installed_is_skipped(tmp_path):
    ctx = _ctx(tmp_path, {("systemctl", "is-enabled"): CommandResult(1, "", "No such file")})
    assert check_docker_enabled(ctx).status == CheckStatus.SKIP


PS = ("docker", "ps")


def test_containers_of_another_project_fail_with_the_removal_command(tmp_path):
    listing = "mac-sys-exporter\tdeploy\nmac-nic-exporter\tmac\nmac-bmc-agent\t\n"
    result = check_stale_containers(_ctx(tmp_path, {PS: CommandResult(0, listing)}))
    assert result.status == CheckStatus.FAIL
    assert "mac-sys-exporter (project deploy)" in result.detail
    assert "mac-bmc-agent (project none)" in result.detail
    assert "mac-nic-exporter" not in result.detail
    # Exactly the foreign containers, by name: never this project's own mac-nic-exporter.
    assert result.steps == (
        Run(("docker", "rm", "-f", "mac-sys-exporter", "mac-bmc-agent"), root=False),
    )
    assert result.fix == "docker rm -f mac-sys-exporter mac-bmc-agent"


def test_only_our_own_project_passes(tmp_path):
    listing = "mac-sys-exporter\tmac\n"
    assert check_stale_containers(_ctx(tmp_path, {PS: CommandResult(0, listing)})).status == (
        CheckStatus.PASS
    )


def test_no_engine_skips_the_stale_check(tmp_path):
    down = CommandResult(
        1, "", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock."
    )
    result = check_stale_containers(_ctx(tmp_path, {PS: down}))
    assert result.status == CheckStatus.SKIP and "Cannot connect" in result.detail

"""`mac doctor` on the master: can it talk to slurmctld for the drain (MAC_SLURM_DRAIN)?"""

from __future__ import annotations

import socket

import pytest

from node.checks import CheckContext, CheckStatus
from node.checks.slurm import check_slurm
from node.config import NodeConfig
from node.runner import CommandResult, run_command
from testkit.slurmlab import SlurmLab, SlurmLabUnavailable, lab_folder


def _ctx(tmp_path, run=run_command, **settings: str) -> CheckContext:
    environ = {
        "MAC_NODE_ENV_FILE": str(tmp_path / "node.env"),
        "MAC_USER_ENV_FILE": str(tmp_path / "user.env"),
        **settings,
    }
    return CheckContext(extra={"config": NodeConfig.load(environ=environ), "run": run})


@pytest.fixture(scope="module")
def lab():
    try:
        with lab_folder() as root, SlurmLab.start(root, ["node-1"], 0) as running:
            yield running
    except SlurmLabUnavailable as exc:
        pytest.skip(str(exc))


def test_skipped_while_the_drain_is_off(tmp_path):
    result = check_slurm(_ctx(tmp_path))
    assert result.status == CheckStatus.SKIP
    assert result.detail == "MAC_SLURM_DRAIN is off: this master does not drain nodes in Slurm."


def test_a_bad_setting_fails_naming_it(tmp_path):
    result = check_slurm(_ctx(tmp_path, MAC_SLURM_DRAIN="on", MAC_DRAIN_BUDGET="all of them"))
    assert result.status == CheckStatus.FAIL
    assert result.detail.startswith("MAC_DRAIN_BUDGET='all of them': give a share of the fleet")


def test_no_slurm_conf_says_where_it_looked_and_how_to_point_at_it(tmp_path):
    missing = tmp_path / "slurm.conf"
    result = check_slurm(_ctx(tmp_path, MAC_SLURM_DRAIN="dry-run", SLURM_CONF=str(missing)))
    assert result.status == CheckStatus.FAIL
    assert result.detail == f"MAC_SLURM_DRAIN=dry-run, but there is no slurm.conf at {missing}."
    assert "mac env set SLURM_CONF=/path/to/slurm.conf" in result.fix


@pytest.mark.slurm
def test_a_live_controller_passes_and_a_stopped_one_fails(tmp_path, lab):
    ctx = _ctx(tmp_path, MAC_SLURM_DRAIN="on", SLURM_CONF=str(lab.conf))
    result = check_slurm(ctx)
    assert result.status == CheckStatus.PASS, result.detail
    assert " is UP (SLURM_CONF=" in result.detail and result.detail.endswith("MAC_SLURM_DRAIN=on")
    lab.stop_controller()
    try:
        down = check_slurm(ctx)
    finally:
        lab.start_controller()
    assert down.status == CheckStatus.FAIL
    assert down.detail.startswith(f"slurmctld does not answer (SLURM_CONF={lab.conf}): ")
    assert "is DOWN" in down.detail and "scontrol ping" in down.fix
    # not taken for a refused credential (test_a_refused_munge_credential...)
    assert "munge" not in down.detail + down.fix and "credential" not in down.detail


def test_a_user_slurm_would_refuse_is_told_to_become_an_operator(tmp_path, monkeypatch):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=c\n")
    answers = {
        "ping": CommandResult(0, "Slurmctld(primary) at head is UP\n"),
        "show": CommandResult(0, "SlurmUser               = slurm(64030)\n"),
    }
    monkeypatch.setattr("node.checks.slurm.os.geteuid", lambda: 1000)
    monkeypatch.setattr("node.checks.slurm._user", lambda: "mac")
    monkeypatch.setattr(
        "node.checks.slurm.which",
        lambda ctx, name: "/usr/bin/scontrol" if name == "scontrol" else None,
    )
    ctx = _ctx(tmp_path, lambda argv: answers[argv[3]], MAC_SLURM_DRAIN="on", SLURM_CONF=str(conf))
    result = check_slurm(ctx)
    assert result.status == CheckStatus.WARN
    assert "this master runs as mac, neither root nor SlurmUser slurm" in result.detail
    assert result.fix.startswith("sudo sacctmgr -i modify user mac set adminlevel=Admin")


class _Docker:
    """The docker CLI's answers: mac-worker's state, and scontrol run in it."""

    def __init__(self, running: bool = True) -> None:
        self.running = running
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str]) -> CommandResult:
        self.calls.append(argv)
        if argv[:2] == ["docker", "inspect"]:
            return CommandResult(0, "true\n" if self.running else "false\n")
        if argv[0] == "docker" and not self.running:
            return CommandResult(
                1, "", "Error response from daemon: Container 3f2a is not running\n"
            )
        return CommandResult(0, "Slurmctld(primary) at head is UP\n")


@pytest.mark.parametrize("runtime", ["docker", "auto"])
def test_under_docker_the_tools_run_where_the_drain_does_in_mac_worker(
    tmp_path, monkeypatch, runtime
):
    conf = tmp_path / "slurm.conf"
    conf.write_text("SlurmctldHost=head(10.0.0.1)\n")
    # No scontrol on the host: MAC's image brings it.
    monkeypatch.setattr(
        "node.checks.slurm.which", lambda ctx, name: "/usr/bin/docker" if name == "docker" else None
    )
    docker = _Docker()
    ctx = _ctx(tmp_path, docker, MAC_SLURM_DRAIN="on", SLURM_CONF=str(conf), MAC_RUNTIME=runtime)
    result = check_slurm(ctx)
    assert result.status == CheckStatus.PASS, result.detail
    up = "Slurmctld(primary) at head is UP"
    assert result.detail == f"{up} from mac-worker (SLURM_CONF={conf}); MAC_SLURM_DRAIN=on"
    assert docker.calls[-1] == [
        "docker",
        "exec",
        "mac-worker",
        "env",
        f"SLURM_CONF={conf}",
        "scontrol",
        "ping",
    ]


def test_under_docker_a_stopped_worker_is_named_with_the_command_that_starts_it(
    tmp_path, monkeypatch
):
    conf = tmp_path / "slurm.conf"
    conf.write_text("SlurmctldHost=head(10.0.0.1)\n")
    docker = _Docker(running=False)
    ctx = _ctx(
        tmp_path, docker, MAC_SLURM_DRAIN="dry-run", SLURM_CONF=str(conf), MAC_RUNTIME="docker"
    )
    result = check_slurm(ctx)
    assert result.status == CheckStatus.FAIL
    assert result.detail.startswith("mac-worker, which drains under Docker, is not running: ")
    assert result.fix.startswith("mac start master")


def test_a_process_master_with_docker_installed_but_no_worker_container_asks_the_host(
    tmp_path, monkeypatch
):
    conf = tmp_path / "slurm.conf"
    conf.write_text("SlurmctldHost=head(10.0.0.1)\n")
    monkeypatch.setattr("node.checks.slurm.which", lambda ctx, name: f"/usr/bin/{name}")
    docker = _Docker(running=False)
    result = check_slurm(_ctx(tmp_path, docker, MAC_SLURM_DRAIN="on", SLURM_CONF=str(conf)))
    assert docker.calls[1][:2] == ["env", f"SLURM_CONF={conf}"]
    assert result.status == CheckStatus.PASS, result.detail


@pytest.mark.parametrize(
    ("said", "detail", "fix"),
    [
        (
            "permission denied while trying to connect to the Docker daemon socket",
            "cannot ask mac-worker through Docker: ",
            "sudo mac doctor",
        ),
        (
            'scontrol: error: s_p_parse_file: unable to read "/etc/slurm/slurm.conf": '
            "No such file or directory",
            "mac-worker has no ",
            "mac restart master",
        ),
        (
            'scontrol: error: Munge encode failed: Failed to access "/run/munge.socket": '
            "No such file or directory (retrying ...)",
            "mac-worker cannot have its requests signed by this host's munged: ",
            "sudo systemctl status munge",
        ),
    ],
)
def test_under_docker_what_keeps_the_worker_from_slurm_is_named(tmp_path, said, detail, fix):
    conf = tmp_path / "slurm.conf"
    conf.write_text("SlurmctldHost=head(10.0.0.1)\n")

    def run(argv):
        return CommandResult(1, "", said)

    ctx = _ctx(tmp_path, run, MAC_SLURM_DRAIN="on", SLURM_CONF=str(conf), MAC_RUNTIME="docker")
    result = check_slurm(ctx)
    assert result.status == CheckStatus.FAIL
    assert result.detail.startswith(detail) and result.fix.startswith(fix)


@pytest.mark.slurm
def test_a_refused_munge_credential_is_told_apart_from_a_stopped_controller(tmp_path, lab):
    """Both make `scontrol ping` say DOWN; only the first is a matter of munge keys (the
    stopped controller: test_a_live_controller_passes_and_a_stopped_one_fails)."""
    other = lab.conf_with_another_munge_key()
    controller = socket.gethostname().split(".")[0]  # the lab's SlurmctldHost
    refused = check_slurm(_ctx(tmp_path, MAC_SLURM_DRAIN="on", SLURM_CONF=str(other)))
    assert refused.status == CheckStatus.FAIL
    assert refused.detail.startswith(
        f"slurmctld at {controller} runs but refused this master's credential "
        f"(SLURM_CONF={other}): "
    ), refused.detail
    assert "Zero Bytes were transmitted or received" in refused.detail
    assert "munge key is not the cluster's" in refused.detail
    assert refused.fix.startswith(f"munge -n | ssh {controller} unmunge")
    assert "/etc/munge/munge.key" in refused.fix and "systemctl restart munge" in refused.fix
    assert "mac restart master" not in refused.fix  # no mac-worker to restart here


def test_under_docker_a_refused_credential_also_restarts_mac_worker(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("SlurmctldHost=head(10.0.0.1)\n")
    calls = []

    def run(argv):
        calls.append(argv)
        if argv[-1] == "ping":
            return CommandResult(1, "Slurmctld(primary) at head is DOWN\n")
        return CommandResult(
            1, "", "slurm_load_ctl_conf error: Zero Bytes were transmitted or received\n"
        )

    ctx = _ctx(tmp_path, run, MAC_SLURM_DRAIN="on", SLURM_CONF=str(conf), MAC_RUNTIME="docker")
    result = check_slurm(ctx)
    assert result.status == CheckStatus.FAIL
    assert result.detail.startswith("slurmctld at head runs but refused this master's credential")
    assert result.fix.startswith("munge -n | ssh head unmunge")
    assert result.fix.endswith(
        "mac restart master    # mac-worker mounts munge's socket as it is now"
    )
    assert calls[-1] == [
        "docker", "exec", "mac-worker", "env", f"SLURM_CONF={conf}",
        "timeout", "3", "scontrol", "show", "config",
    ]  # fmt: skip

"""Whether this master can talk to slurmctld, for MAC's drain in Slurm (MAC_SLURM_DRAIN).

`mac doctor` on the master runs it like the other checks; elsewhere (an agent, a master
with the drain off) it is skipped. It runs Slurm's own `scontrol ping` and `scontrol
show config` with the master's SLURM_CONF, as the drain does, and says what is missing:
the drain's settings, slurm.conf, the client tools, munge, the controller, and whether
this user may change nodes (SlurmUser, root, or an account at Slurm's Admin level).
A ping that says DOWN is asked once more (`scontrol show config`): a slurmctld that
runs but refuses this master's munge credential looks DOWN to ping, and only that read
tells it from one that does not answer.
Under Docker the drain runs in mac-worker (root there, with the host's slurm.conf and
munge socket mounted), so the tools run there too, through `docker exec`.
"""

from __future__ import annotations

import os
import pwd
import re
from pathlib import Path

from contract.drainpolicy import DEFAULT_SLURM_CONF, DrainMode, check_settings
from node.checks.base import CheckContext, CheckResult, CheckStatus, config, runner, which
from node.runner import Runner

CHECK_ID = "slurm"
TITLE = "the master reaches slurmctld (MAC_SLURM_DRAIN)"
# What 22.05's tools say when slurmctld took the connection and closed it unanswered:
# it refused this host's credential (scheduler.slurm.errors, which node/ may not import).
CREDENTIAL_REFUSED = "Zero Bytes were transmitted or received"
INSTALL_FIX = (
    "# on the master: Slurm's client tools and munge, with the cluster's munge key\n"
    "sudo apt-get install slurm-client munge\n"
    "sudo install -o munge -g munge -m 0400 <the cluster's munge.key> /etc/munge/munge.key\n"
    "sudo systemctl restart munge"
)


def _result(status: CheckStatus, detail: str, fix: str = "") -> CheckResult:
    return CheckResult(CHECK_ID, TITLE, status, detail, fix)


def _config_value(text: str, key: str) -> str:
    """One value of `scontrol show config` ("SlurmUser = slurm(64030)" -> "slurm(64030)")."""
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == key:
            return value.strip()
    return ""


def _user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def _in_worker(ctx: CheckContext, runtime: str) -> bool:
    """True where the master's worker is a container: MAC_RUNTIME=docker, or, left to
    `auto`, a running mac-worker container."""
    if runtime == "docker":
        return True
    if runtime != "auto" or not which(ctx, "docker"):
        return False
    shown = runner(ctx)(["docker", "inspect", "-f", "{{.State.Running}}", "mac-worker"])
    return shown.returncode == 0 and shown.stdout.strip() == "true"


def _refused_credential(
    run: Runner, where: list[str], conf: Path, pinged: str
) -> CheckResult | None:
    """FAIL where slurmctld runs but refused this master's credential; None where it does
    not answer at all. A munge key that is not the cluster's makes `scontrol ping` say
    DOWN with no word of why; one read tells: it says "Zero Bytes were transmitted or
    received" at once, while a down slurmctld's tools retry for ~9 s (cut at 3 here)."""
    shown = run([*where, "env", f"SLURM_CONF={conf}", "timeout", "3", "scontrol", "show", "config"])
    said = " ".join(f"{shown.stdout} {shown.stderr}".split())
    if shown.returncode == 0 or CREDENTIAL_REFUSED not in said:
        return None
    found = re.search(r" at (\S+) is DOWN", pinged)
    controller = found.group(1) if found else "<controller>"
    fix = (
        f'munge -n | ssh {controller} unmunge    # "Invalid credential": the keys differ\n'
        f'# slurmctld\'s log on {controller} says "authentication error" for this master\n'
        "sudo install -o munge -g munge -m 0400 <the cluster's munge.key> /etc/munge/munge.key\n"
        "sudo systemctl restart munge"
    )
    if where:
        fix += "\nmac restart master    # mac-worker mounts munge's socket as it is now"
    return _result(
        CheckStatus.FAIL,
        f"slurmctld at {controller} runs but refused this master's credential "
        f"(SLURM_CONF={conf}): `scontrol ping` says DOWN, `scontrol show config` says "
        f"{said[:200]}. Most often this master's munge key is not the cluster's (or munged "
        "here uses another one, or the Slurm versions differ).",
        fix,
    )


def check_slurm(ctx: CheckContext) -> CheckResult:
    cfg = config(ctx)
    try:
        mode = cfg.value("MAC_SLURM_DRAIN")
        check_settings(cfg.get)
        conf = cfg.value("SLURM_CONF")
    except ValueError as exc:
        return _result(
            CheckStatus.FAIL, str(exc), "mac env set MAC_SLURM_DRAIN=dry-run   # or off, or on"
        )
    if mode is DrainMode.OFF:
        return _result(
            CheckStatus.SKIP,
            "MAC_SLURM_DRAIN is off: this master does not drain nodes in Slurm.",
        )
    if not conf.is_file():
        return _result(
            CheckStatus.FAIL,
            f"MAC_SLURM_DRAIN={mode}, but there is no slurm.conf at {conf}.",
            "# the cluster's own slurm.conf, the same file as on its nodes:\n"
            f"sudo install -m 0644 <the cluster's slurm.conf> {DEFAULT_SLURM_CONF}\n"
            "# or point the master at it, then restart the master:\n"
            "mac env set SLURM_CONF=/path/to/slurm.conf && mac restart master",
        )
    runtime = (cfg.get("MAC_RUNTIME") or "auto").strip().lower()
    where: list[str] = []
    if _in_worker(ctx, runtime):
        where = ["docker", "exec", "mac-worker"]
    elif not which(ctx, "scontrol"):
        return _result(CheckStatus.FAIL, "scontrol is not installed on this master.", INSTALL_FIX)
    run = runner(ctx)
    ping = run([*where, "env", f"SLURM_CONF={conf}", "scontrol", "ping"])
    said = " ".join(f"{ping.stdout} {ping.stderr}".split())
    if where and ping.returncode != 0 and ("No such container" in said or "not running" in said):
        return _result(
            CheckStatus.FAIL,
            f"mac-worker, which drains under Docker, is not running: {said[:200]}",
            "mac start master    # then: mac doctor",
        )
    if where and ping.returncode != 0 and "docker" in said.lower() and "denied" in said.lower():
        return _result(
            CheckStatus.FAIL,
            f"cannot ask mac-worker through Docker: {said[:200]}",
            "sudo mac doctor    # or as a member of the docker group",
        )
    if where and "slurm.conf" in said and ("No such file" in said or "not found" in said):
        return _result(
            CheckStatus.FAIL,
            f"mac-worker has no {conf}: it was started before it existed. {said[:200]}",
            "mac restart master    # mounts the host's slurm.conf into mac-worker",
        )
    munge = "munge" in said.lower() or "authentication" in said.lower()
    if where and ping.returncode != 0 and munge:
        # The host's munged signs for the worker through the socket mounted at its start;
        # a munged restarted since made a new one (the old mount, a lone file, is stale).
        return _result(
            CheckStatus.FAIL,
            f"mac-worker cannot have its requests signed by this host's munged: {said[:300]}",
            "sudo systemctl status munge    # munged runs here, with the cluster's key\n"
            "mac restart master    # mac-worker mounts munge's socket as it is now",
        )
    if " is DOWN" in ping.stdout and not munge:
        refused = _refused_credential(run, where, conf, ping.stdout)
        if refused:
            return refused
    if ping.returncode != 0 or " is UP" not in ping.stdout:
        return _result(
            CheckStatus.FAIL,
            f"slurmctld does not answer (SLURM_CONF={conf}): {said[:300] or 'no answer'}",
            INSTALL_FIX
            if munge
            else (
                f"SLURM_CONF={conf} scontrol ping   # which controller, and is it UP?\n"
                "# slurmctld must run, and its port (SlurmctldPort) be open to this master"
            ),
        )
    controller = next((line for line in ping.stdout.splitlines() if " is UP" in line), "")
    if where:
        # root in its container: a user Slurm lets change nodes.
        return _result(
            CheckStatus.PASS,
            f"{controller.strip()} from mac-worker (SLURM_CONF={conf}); MAC_SLURM_DRAIN={mode}",
        )
    shown = run(["env", f"SLURM_CONF={conf}", "scontrol", "show", "config"])
    slurm_user = _config_value(shown.stdout, "SlurmUser").split("(", 1)[0]
    user = _user()
    detail = f"{controller.strip()} (SLURM_CONF={conf}); MAC_SLURM_DRAIN={mode}"
    if os.geteuid() != 0 and slurm_user and user != slurm_user:
        return _result(
            CheckStatus.WARN,
            f"{detail}, but this master runs as {user}, neither root nor SlurmUser "
            f"{slurm_user}: Slurm refuses its drains unless {user} has Slurm's Admin "
            "level (22.05 takes node updates from no lower level).",
            f"sudo sacctmgr -i modify user {user} set adminlevel=Admin\n"
            "# (or run the master as root or as the SlurmUser)",
        )
    return _result(CheckStatus.PASS, detail)


CHECKS = (check_slurm,)

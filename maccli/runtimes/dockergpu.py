"""The agent's GPU profiles under Docker: which of them this node can run now.

dcgm-exporter (Compose profile `nvidia`) gets the GPUs through the NVIDIA Container
Toolkit, rocm-exporter (profile `amd`) gets /dev/kfd and /dev/dri. Without them
`compose up` fails as a whole (`could not select device driver "nvidia"`, a device
that does not exist), nothing starts and the node never registers. The guide expects
the opposite: a *registered* node whose GPU metrics are missing, then the fix and
`mac restart agent`; and a missing backend never blocks the rest (ARCHITECTURE). So
a profile whose plumbing is missing is left out, with a warning that gives the fix,
and every other service starts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from node.checks.base import CheckContext, CheckStatus
from node.checks.gpu import check_nvidia_toolkit
from node.host import Roots
from node.runner import Runner

AMD_DEVICES = ("kfd", "dri")
RESTART = "mac restart agent"
# What the engine answers a container that asks for the GPUs of a driver it has not
# registered: the toolkit installed while dockerd ran, or never configured for it.
NVIDIA_REFUSED = 'device driver "nvidia"'
NVIDIA_CONFIGURE = (
    "sudo nvidia-ctk runtime configure --runtime=docker",
    "sudo systemctl restart docker",
)


@dataclass(frozen=True)
class LeftOut:
    """A profile this node cannot run now: why, and the commands that bring it back."""

    profile: str
    why: str
    steps: tuple[str, ...]


def engine_runtimes(run: Runner) -> set[str]:
    """The runtimes the engine has (`docker info`'s Runtimes: runc, nvidia...)."""
    done = run(["docker", "info", "--format", "{{json .Runtimes}}"])
    try:
        runtimes = json.loads(done.stdout or "{}") if done.returncode == 0 else {}
    except json.JSONDecodeError:
        return set()
    return set(runtimes) if isinstance(runtimes, dict) else set()


def nvidia_left_out(run: Runner, roots: Roots) -> LeftOut | None:
    """Why dcgm-exporter's container cannot have the GPUs here; None when it can.

    The engine's own word first: an `nvidia` runtime in `docker info` is the toolkit
    configured for this engine (`nvidia-ctk runtime configure`), wherever it is
    installed. Otherwise `mac doctor`'s check: the toolkit's programs on this host. A
    toolkit installed but unknown to the engine is caught at `up` (refused_by_engine).
    """
    if "nvidia" in engine_runtimes(run):
        return None
    check = check_nvidia_toolkit(CheckContext(roots=roots))
    if check.status != CheckStatus.FAIL:
        return None
    return LeftOut("nvidia", check.detail, tuple(check.fix.splitlines()))


def nvidia_refused(said: str) -> LeftOut:
    """The engine refused the GPUs although the toolkit is here: configure it for Docker."""
    return LeftOut(
        "nvidia",
        f"Docker refused its GPUs ({said}): the NVIDIA Container Toolkit is installed but "
        "this engine does not use it yet.",
        (*NVIDIA_CONFIGURE, RESTART),
    )


def amd_left_out(roots: Roots) -> LeftOut | None:
    """rocm-exporter's container needs both devices passed in; None when both exist."""
    missing = [str(roots.dev(name)) for name in AMD_DEVICES if not roots.dev(name).exists()]
    if not missing:
        return None
    wanted = " and ".join(str(roots.dev(name)) for name in AMD_DEVICES)
    return LeftOut(
        "amd",
        f"it needs {wanted} passed into its container, and {', '.join(missing)} is missing "
        "here: the amdgpu driver is not loaded.",
        ("sudo modprobe amdgpu", "lsmod | grep amdgpu", RESTART),
    )


def left_out(profiles: list[str], run: Runner, roots: Roots) -> list[LeftOut]:
    """The profiles of `profiles` that this node cannot run now."""
    found = []
    if "nvidia" in profiles:
        found.append(nvidia_left_out(run, roots))
    if "amd" in profiles:
        found.append(amd_left_out(roots))
    return [item for item in found if item is not None]


def profile_services(files: Sequence[Path], profile: str) -> list[str]:
    """The services of the compose files `files` that only `profile` runs."""
    names: list[str] = []
    for path in files:
        try:
            document = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue  # compose itself says what is wrong with the file
        for name, service in (document.get("services") or {}).items():
            if profile in ((service or {}).get("profiles") or ()) and name not in names:
                names.append(name)
    return names


def warning(services: list[str], item: LeftOut) -> str:
    """What `mac start agent` says of a profile it leaves out."""
    names = ", ".join(services) or f"the {item.profile} profile"
    return (
        f"{names} left out: {item.why} The other services start without it, and the node "
        f"is registered all the same; to add {names}:\n"
        + "\n".join(f"  {step}" for step in item.steps)
    )

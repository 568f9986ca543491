"""How a master under Docker reaches Slurm: what mac-worker mounts and resolves.

Under the process runtime the worker runs Slurm's tools on the host. In a container
they need the same three things, taken from the host's slurm.conf (SLURM_CONF) when
`mac start master` writes the Compose file:

- slurm.conf's folder (with gres.conf and the files it includes), read-only, at the
  same path, and SLURM_CONF pointing at it;
- the folder of munge's socket (`AuthInfo=socket=`, else /run/munge): the host's munged
  signs the worker's requests, so the container needs no key of its own. The worker runs
  as root in its container, which Slurm takes as a user allowed to change nodes;
- slurmctld's address: a controller named without one is resolved on the host and
  written into the container's hosts file (a name the host resolves to its own
  loopback, as Debian's 127.0.1.1, becomes the host's gateway address). An address of
  loopback in slurm.conf cannot be reached from a container, and `mac start master`
  says so rather than start a worker that cannot drain.

Without a slurm.conf at SLURM_CONF nothing is mounted, as the process runtime then
does not talk to Slurm either.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from pathlib import Path

from contract.slurmconf import SlurmConf, read_slurm_conf
from maccli.output import CliError
from node.config import NodeConfig

# Docker (20.10+) writes the host's address on the container's bridge for this word.
HOST_GATEWAY = "host-gateway"


@dataclass(frozen=True)
class SlurmAccess:
    """The mounts, environment and host names mac-worker gets for Slurm's tools."""

    conf: SlurmConf
    hosts: tuple[str, ...]  # Compose's extra_hosts: "name:address"

    @property
    def volumes(self) -> list[str]:
        folders = [f"{self.conf.path.parent}:{self.conf.path.parent}:ro"]
        munge = self.conf.munge_socket.parent
        if munge != self.conf.path.parent:
            folders.append(f"{munge}:{munge}:ro")
        return folders

    @property
    def environment(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf.path)}


def _resolved(name: str) -> str | None:
    """The host's IPv4 address for `name`, or None where the host cannot resolve it."""
    try:
        found = socket.getaddrinfo(name, None, family=socket.AF_INET, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    return str(found[0][4][0]) if found else None


def slurm_access(cfg: NodeConfig) -> SlurmAccess | None:
    """What mac-worker needs for this host's slurm.conf; None without one. Raises CliError
    where slurm.conf cannot be read or names a controller by a loopback address."""
    path = Path(cfg.value("SLURM_CONF"))
    if not path.is_file():
        return None
    try:
        conf = read_slurm_conf(path)
    except OSError as exc:
        raise CliError(
            f"cannot read {path} (SLURM_CONF): {exc.strerror or exc}",
            hint="mac-worker mounts the cluster's slurm.conf from this host; make it readable:",
            commands=[f"ls -l {path}"],
        ) from None
    unreachable = [c for c in conf.controllers if c.loopback]
    if unreachable:
        named = ", ".join(f"{c.name}({c.address})" for c in unreachable)
        raise CliError(
            f"{path} names slurmctld by a loopback address ({named}): the master's "
            "containers cannot reach this host's loopback, so MAC could neither drain "
            "nor read jobs.",
            hint="Give slurmctld an address the containers reach (the host's own), or "
            "run the master as processes, or do without Slurm on this master:",
            commands=[
                f"sudoedit {path}    # SlurmctldHost=<name>(<this host's address>)",
                "mac env set MAC_RUNTIME=process && mac restart master",
                "mac env set SLURM_CONF=/nonexistent && mac restart master",
            ],
        )
    hosts = []
    for controller in conf.controllers:
        if controller.address or not controller.name:
            continue
        address = _resolved(controller.name)
        if address is None:
            continue  # the containers' resolver may know it; `mac doctor` tells
        if ipaddress.ip_address(address).is_loopback:
            address = HOST_GATEWAY
        hosts.append(f"{controller.name}:{address}")
    return SlurmAccess(conf, tuple(hosts))

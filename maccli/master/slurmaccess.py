"""How a master under Docker reaches Slurm: what mac-worker mounts and resolves.

Under the process runtime the worker runs Slurm's tools on the host. In a container
they need the same three things, taken from the host's slurm.conf (SLURM_CONF) when
`mac start master` writes the Compose file:

- slurm.conf's folder (with gres.conf and the files it includes), read-only, at the
  same path, and SLURM_CONF pointing at it; a slurm.conf directly in a system folder
  (/etc/slurm.conf) is mounted alone, never the folder over the container's own. A file
  it includes from another folder (`Include /site/slurm/nodes.conf`) gets that folder
  too, and one that is a link (a shared file system) the folder it points into: Slurm's
  tools refuse a slurm.conf whose includes they cannot open;
- the folder of munge's socket (`AuthInfo=socket=`, else /run/munge), likewise: the
  host's munged signs the worker's requests, so the container needs no key of its own.
  The worker runs as root in its container, which Slurm takes as a user allowed to
  change nodes; it keeps the host's user namespace (Compose's `userns_mode: host`), so
  an engine that remaps containers' users does not make it an unprivileged one;
- slurmctld's address: a controller named by a host name (its address in parentheses,
  or its name alone) is resolved on the host and written into the container's hosts
  file, as the container cannot read the host's /etc/hosts (a name the host resolves to
  its own loopback, as Debian's 127.0.1.1, becomes the host's gateway address). A
  loopback address or `localhost` in slurm.conf cannot be reached from a container:
  with the drain on, `mac start master` says so rather than start a worker that cannot
  drain; with it off (job reads only) it warns;
- the file of `MAC_SLURM_NODE_MAP=@/path` (the drain and job reads read it at each pass),
  likewise, where slurm.conf's mounts do not cover it already;
- slurmdbd's address, for sacct (the jobs that started and ended between two reads of
  slurmctld), likewise resolved on the host; named by this machine itself (Slurm's
  default `localhost`) it is out of the containers' reach, and `mac start master`
  warns: slurmctld's reads go on, those short jobs are not seen.

Without a slurm.conf at SLURM_CONF nothing is mounted, as the process runtime then
does not talk to Slurm either.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from pathlib import Path

from contract.drainpolicy import DrainMode
from contract.nodemap import map_file
from contract.slurmconf import SlurmConf, read_slurm_conf
from maccli import output
from maccli.output import CliError
from node.config import NodeConfig

# Docker (20.10+) writes the host's address on the container's bridge for this word.
HOST_GATEWAY = "host-gateway"
# Folders a container has of its own: a file directly in one is mounted alone.
SYSTEM_FOLDERS = frozenset(
    Path(folder)
    for folder in ("/", "/etc", "/run", "/var", "/var/run", "/usr", "/tmp", "/home", "/opt", "/srv")
)


def _shared(path: Path) -> Path:
    """What is mounted for `path`: its folder, or path alone in a system folder."""
    return path if path.parent in SYSTEM_FOLDERS else path.parent


def _covering(paths: list[Path]) -> list[Path]:
    """The folders and files to mount for `paths`, in order, none inside another."""
    wanted: list[Path] = []
    for shared in map(_shared, paths):
        if any(shared == kept or kept in shared.parents for kept in wanted):
            continue
        wanted = [kept for kept in wanted if shared not in kept.parents] + [shared]
    return wanted


@dataclass(frozen=True)
class SlurmAccess:
    """The mounts, environment and host names mac-worker gets for Slurm's tools."""

    conf: SlurmConf
    hosts: tuple[str, ...]  # Compose's extra_hosts: "name:address"
    node_map: Path | None = None  # MAC_SLURM_NODE_MAP's @file

    @property
    def volumes(self) -> list[str]:
        files = [self.conf.path]
        for included in self.conf.includes:
            files += [included, included.resolve()]  # the link's own folder and its target's
        files.append(self.conf.munge_socket)
        if self.node_map is not None:
            files += [self.node_map, self.node_map.resolve()]
        return [f"{shared}:{shared}:ro" for shared in _covering(files)]

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


def _drain_on(cfg: NodeConfig) -> bool:
    try:
        return cfg.value("MAC_SLURM_DRAIN") is not DrainMode.OFF
    except ValueError:
        return True  # a bad value stops the start elsewhere, with its own words


def slurm_access(cfg: NodeConfig) -> SlurmAccess | None:
    """What mac-worker needs for this host's slurm.conf; None without one. Raises CliError
    where slurm.conf cannot be read, or names slurmctld by this machine itself while the
    drain is on."""
    given = Path(cfg.value("SLURM_CONF")).expanduser()
    if not given.is_file():
        return None
    path = given.resolve()  # a link to a shared file system: the file it names
    try:
        conf = read_slurm_conf(path)
    except OSError as exc:
        raise CliError(
            f"cannot read {path} (SLURM_CONF): {exc.strerror or exc}",
            hint="mac-worker mounts the cluster's slurm.conf from this host; make it readable:",
            commands=[f"ls -l {path}"],
        ) from None
    conf = SlurmConf(
        path, conf.controllers, conf.munge_socket.resolve(), conf.accounting, conf.includes
    )
    local = [c for c in conf.controllers if c.loopback]
    if local:
        named = ", ".join(f"{c.name}({c.address})" if c.address else c.name for c in local)
        words = (
            f"{path} names slurmctld by this machine itself ({named}): the master's "
            "containers cannot reach this host that way"
        )
        if not _drain_on(cfg):
            output.warn(f"{words}; MAC will not read Slurm's jobs under Docker.")
        else:
            raise CliError(
                f"{words}, so MAC could neither drain nor read jobs.",
                hint="Give slurmctld an address the containers reach (the host's own), or "
                "run the master as processes, or do without Slurm on this master:",
                commands=[
                    f"sudoedit {path}    # SlurmctldHost=<name>(<this host's address>)",
                    "mac env set MAC_RUNTIME=process && mac restart master",
                    "mac env set MAC_SLURM_DRAIN=off && mac restart master",
                ],
            )
    _warn_local_accounting(conf)
    if conf.munge_socket.parent in SYSTEM_FOLDERS:
        output.warn(
            f"munge's socket {conf.munge_socket} is mounted into mac-worker alone (its "
            "folder is the system's): when munged restarts it makes a new one, which the "
            "worker does not see until `mac restart master`. A socket in a folder of its "
            "own (munged's default /run/munge) has no such step."
        )
    hosts: list[str] = []
    for daemon in (*conf.controllers, *conf.accounting):
        if daemon.ip or daemon.loopback or not daemon.target:
            continue
        address = _resolved(daemon.target)
        if address is None:
            continue  # the containers' resolver may know it; `mac doctor` tells
        if ipaddress.ip_address(address).is_loopback:
            address = HOST_GATEWAY
        if f"{daemon.target}:{address}" not in hosts:
            hosts.append(f"{daemon.target}:{address}")
    return SlurmAccess(conf, tuple(hosts), map_file(cfg.get("MAC_SLURM_NODE_MAP")))


def _warn_local_accounting(conf: SlurmConf) -> None:
    """slurmdbd named by this machine itself: sacct in mac-worker cannot reach it."""
    local = [host.target for host in conf.accounting if host.loopback]
    if local:
        output.warn(
            f"{conf.path} names slurmdbd by this machine itself ({', '.join(local)}; "
            "AccountingStorageHost, Slurm's default localhost where unset): sacct in "
            "mac-worker cannot reach it, so jobs that start and end between two reads of "
            "slurmctld are not seen under Docker. Set AccountingStorageHost to this "
            "host's name or address (slurmdbd listening there), then: mac restart master"
        )

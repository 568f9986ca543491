"""The master's client of Slurm: scontrol, sinfo, squeue and sacct, run with a deadline each.

The tools find slurmctld as they do for a person at a shell: SLURM_CONF (the client's
`slurm_conf`, else the process's environment, else Slurm's default path or DNS SRV
record) and munge's default socket, or the one slurm.conf names. No shell is involved:
a node name or a reason reaches scontrol as one argument, whatever it holds.

Nodes are read with the command that prints one record per node on the tools' release
(`release`, from `scontrol --version`): `sinfo --json` on 22.05, `scontrol --json show
nodes` from 23.02 on, where sinfo's JSON groups nodes instead (see `records`).

Every failure is one of the types of `scheduler.slurm.errors`, carrying the command and
Slurm's own words. A controller that is down makes 22.05's tools retry for about 9 s
before they give up (`scontrol ping` alone answers at once), so callers that must not
wait (/health, the sweep) call `ping()` first. A DOWN from ping costs it one more read
(at most `ping_timeout`): slurmctld refusing this host's credential looks DOWN to ping
too, and only that read tells it apart (SlurmCredentialRefused).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from scheduler.slurm.errors import (
    SlurmCommandRefused,
    SlurmCredentialRefused,
    SlurmError,
    SlurmOutputError,
    SlurmToolMissing,
    SlurmUnknownNode,
    SlurmUnreachable,
    classify_failure,
)
from scheduler.slurm.records import (
    SACCT_DELIMITER,
    SACCT_FORMAT,
    Controller,
    Reservation,
    SlurmJob,
    SlurmNode,
    load_json,
    parse_nodes,
    parse_ping,
    parse_reservations,
    parse_sacct,
    parse_squeue_jobs,
    parse_version,
)

DEFAULT_TIMEOUT = 10.0
DEFAULT_PING_TIMEOUT = 2.0
NEXT_STATES = ("RESUME", "DOWN", "DRAIN")  # what `scontrol reboot nextstate=` accepts
# The first release whose scontrol prints JSON (and whose sinfo --json groups nodes).
SCONTROL_JSON_SINCE = (23, 2)
# One NodeName: no hostlist, no spaces, nothing scontrol would read as another field.
_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class SlurmClient:
    """Slurm's client tools on this host, aimed at one cluster."""

    def __init__(
        self,
        slurm_conf: str | os.PathLike[str] | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        ping_timeout: float = DEFAULT_PING_TIMEOUT,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.env = dict(os.environ if environ is None else environ)
        if slurm_conf:
            self.env["SLURM_CONF"] = str(Path(slurm_conf))
        self.timeout = timeout
        self.ping_timeout = ping_timeout

    # ---------------------------------------------------------------- the controller

    def ping(self) -> Controller:
        """The slurmctld that answers, within `ping_timeout`; SlurmUnreachable when none does."""
        argv = ("scontrol", "ping")
        done = self._call(argv, timeout=self.ping_timeout)
        controllers = parse_ping(done.stdout)
        for controller in controllers:
            if controller.up:
                return controller
        said = "; ".join(f"{c.role} at {c.host} is DOWN" for c in controllers)
        # Slurm's own words on why, where it says any (munge refusing the master's user,
        # a slurm.conf it cannot read): the fix is in them, not in "DOWN".
        why = _said(done.stderr)
        words = "; ".join(filter(None, [said, *why]))
        if controllers and not why:
            self._refused_or_down(argv, words)
        raise SlurmUnreachable(argv, words or done.stdout.strip() or "no slurmctld answered")

    def _refused_or_down(self, argv: Sequence[str], said: str) -> None:
        """After a ping that says DOWN and no more: raise SlurmCredentialRefused where
        slurmctld runs but dropped the ping unanswered (a munge key not the cluster's
        looks DOWN to ping); return where it does not answer at all.

        Asked with one light read, whose words tell the two apart: "Zero Bytes were
        transmitted or received" from a slurmctld that refused the credential, at once;
        "Unable to contact slurm controller" after ~9 s of retries from one that is down,
        so the read gets `ping_timeout` and its timeout means down.
        """
        follow = ("scontrol", "show", "config")
        try:
            self._run(follow, timeout=self.ping_timeout)
        except SlurmCredentialRefused as exc:
            raise SlurmCredentialRefused(argv, f"{said}; {' '.join(follow)}: {exc.detail}") from exc
        except SlurmError:
            return

    # ---------------------------------------------------------------- nodes

    @cached_property
    def release(self) -> tuple[int, int]:
        """(major, minor) of this host's Slurm tools, as `scontrol --version` says: the
        tools, not slurmctld, decide the JSON's shape."""
        return parse_version(self._run(("scontrol", "--version")))

    def nodes(self) -> list[SlurmNode]:
        """Every node of the cluster, with its state, flags and reason.

        Hidden partitions' nodes too (`--all`), which Slurm 23.02+ leaves out for a user
        who is not one of its operators (22.05's sinfo --json always lists them).
        """
        argv = self._nodes_argv()
        nodes = parse_nodes(self._json(argv), argv)
        if not nodes:
            # a cluster has nodes: an empty answer is one MAC misread, and would make
            # every node look unknown to Slurm
            raise SlurmOutputError(argv, "Slurm listed no nodes")
        return nodes

    def node(self, name: str) -> SlurmNode:
        """One node; SlurmUnknownNode when Slurm has no node of that name.

        Slurm 23.02+ prints just that node; 22.05 has no such JSON, so the whole table.
        """
        _check_node_name(name)
        if self.release < SCONTROL_JSON_SINCE:
            argv, found = self._nodes_argv(), self.nodes()
        else:
            argv = self._nodes_argv(name)
            found = parse_nodes(self._json(argv), argv)  # none, with a warning, if unknown
        for node in found:
            if node.name == name:
                return node
        raise SlurmUnknownNode(argv, f"Slurm has no node named {name!r}")

    def _nodes_argv(self, name: str | None = None) -> tuple[str, ...]:
        """The command that prints one record per node (22.05 reads every node anyway)."""
        if self.release < SCONTROL_JSON_SINCE:
            return ("sinfo", "--all", "--json")
        return ("scontrol", "--all", "--json", "show", *(("node", name) if name else ("nodes",)))

    def drain(self, node: str, reason: str) -> None:
        """Drain `node` with `reason`: running jobs finish, no new job starts there."""
        _check_node_name(node)
        self._update(node, "State=DRAIN", f"Reason={_check_reason(reason)}")

    def resume(self, node: str) -> None:
        """Return a drained or down node to service (SlurmCommandRefused if it is neither)."""
        _check_node_name(node)
        self._update(node, "State=RESUME")

    def reboot_asap(self, node: str, reason: str, nextstate: str = "RESUME") -> None:
        """`scontrol reboot ASAP`: drain `node`, reboot it once empty, then `nextstate`.

        Slurm runs its RebootProgram on the node and waits for the node to register
        with a new boot time; the node is `DRAIN+REBOOT_REQUESTED` until it is empty.
        """
        _check_node_name(node)
        if nextstate.upper() not in NEXT_STATES:
            raise ValueError(
                f"nextstate must be one of {', '.join(NEXT_STATES)}, not {nextstate!r}"
            )
        self._run(
            (
                "scontrol", "reboot", "ASAP", f"nextstate={nextstate.upper()}",
                f"reason={_check_reason(reason)}", node,
            )
        )  # fmt: skip

    def reservations(self) -> list[Reservation]:
        """Every reservation, active or still to come."""
        return parse_reservations(self._run(("scontrol", "show", "reservation", "-o")))

    # ---------------------------------------------------------------- jobs

    def jobs(self) -> list[SlurmJob]:
        """Every job slurmctld knows: pending, running, and finished within MinJobAge.

        Running jobs carry each node's GPU indexes; finished ones only their count.
        `--all`: also the jobs of hidden partitions and of those the master's user may
        not use (squeue leaves them out otherwise, and their GPUs would look free).
        `--states=all`: from 24.05.1 on, squeue --json leaves finished jobs out otherwise.
        """
        return parse_squeue_jobs(self._json(("squeue", "--all", "--states=all", "--json")))

    def accounting_jobs(
        self,
        start: datetime,
        end: datetime | None = None,
        *,
        job_ids: Iterable[int] = (),
    ) -> list[SlurmJob]:
        """Jobs that ran between `start` and `end` (default now), from slurmdbd, all users.

        Needs accounting (AccountingStorageType=accounting_storage/slurmdbd); GPU counts
        only (AccountingStorageTRES=gres/gpu), no indexes.
        """
        argv = [
            "sacct", "--allusers", "--allocations", "--noheader", "--parsable2",
            f"--delimiter={SACCT_DELIMITER}", f"--format={','.join(SACCT_FORMAT)}",
            f"--starttime={_sacct_time(start)}", f"--endtime={_sacct_time(end) if end else 'now'}",
        ]  # fmt: skip
        ids = [str(int(job_id)) for job_id in job_ids]
        if ids:
            argv.append(f"--jobs={','.join(ids)}")
        return parse_sacct(self._run(argv, env={"SLURM_TIME_FORMAT": "%s"}))

    # ---------------------------------------------------------------- running tools

    def _update(self, node: str, *fields: str) -> None:
        self._run(("scontrol", "update", f"NodeName={node}", *fields))

    def _json(self, argv: Sequence[str]) -> dict[str, Any]:
        """A --json tool's document. Its errors do not say why, so a failed read asks
        slurmctld for a ping to tell an outage (SlurmUnreachable) from a refusal."""
        out = self._run(argv)
        try:
            return load_json(argv, out)
        except SlurmCommandRefused as exc:
            try:
                self.ping()
            except SlurmUnreachable as down:
                # its type too: a refused credential stays one, with its fix
                raise type(down)(argv, f"{exc.detail} ({down.detail})") from exc
            raise

    def _run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> str:
        """Run one tool; its standard output, or the typed error."""
        done = self._call(argv, timeout=timeout, env=env)
        if done.returncode != 0:
            raise classify_failure(argv, done.returncode, f"{done.stderr}\n{done.stdout}")
        return done.stdout

    def _call(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess:
        """Run one tool, whatever its exit; missing or silent tools are typed errors."""
        limit = self.timeout if timeout is None else timeout
        try:
            return subprocess.run(
                list(argv),
                env={**self.env, **(env or {})},
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=limit,
                check=False,
            )
        except FileNotFoundError:
            raise SlurmToolMissing(
                argv, f"{argv[0]} is not installed on this host (Debian: slurm-client)"
            ) from None
        except subprocess.TimeoutExpired as exc:
            # The tools retry what they cannot do (munge refusing the master's user, a
            # controller away) and say so as they go: the last such line is the why.
            why = _said(exc.stderr)[-1:]  # bytes: what the tool wrote before it was stopped
            detail = f"no answer within {limit:g} s" + (f" ({why[0]})" if why else "")
            raise SlurmUnreachable(argv, detail) from None


def _said(stderr: str | bytes | None) -> list[str]:
    """A tool's last three distinct lines on its standard error."""
    text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr or ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return list(dict.fromkeys(lines))[-3:]


def _check_node_name(name: str) -> None:
    if not isinstance(name, str) or not _NODE_NAME.match(name):
        raise ValueError(
            f"node name {name!r} is not one Slurm NodeName (letters, digits, '.', '_', '-')"
        )


def _check_reason(reason: str) -> str:
    text = (reason or "").strip()
    if not text:
        raise ValueError("reason is empty: Slurm needs a reason to drain or reboot a node")
    if any(char in text for char in "\r\n\0"):
        raise ValueError(f"reason {text!r} holds a line break; Slurm keeps one line")
    return text


def _sacct_time(moment: datetime) -> str:
    """sacct reads local time without a zone: "2026-12-03T18:47:39"."""
    local = moment.astimezone() if moment.tzinfo else moment
    return local.strftime("%Y-%m-%dT%H:%M:%S")

"""What can go wrong when MAC talks to Slurm, as types a caller can act on.

- `SlurmUnreachable`: slurmctld (or slurmdbd for sacct) does not answer, or this host
  cannot authenticate to it (munge): retry later, say so on /health.
- `SlurmCredentialRefused`: a SlurmUnreachable where slurmctld does run, but took the
  connection and closed it without a reply: it refused this host's credential (most
  often a munge key that is not the cluster's); its `fix` says how to check and mend it.
- `SlurmUnknownNode`: the NodeName is not in Slurm's configuration: a name-mapping problem.
- `SlurmCommandRefused`: slurmctld answered and said no (a state change it does not
  allow, a permission): the command's own words are in the message.
- `SlurmPermissionDenied`: a refusal because this host's user may not change nodes;
  its `fix` says how to give it the right.
- `SlurmToolMissing`: the client tools are not installed on the master.
- `SlurmOutputError`: the tool answered with something MAC cannot read (another version).

Each carries the command line and what the tool printed, so logs and the node's
history can quote Slurm itself, and a `fix` where MAC knows the next step.
"""

from __future__ import annotations

from collections.abc import Sequence

# What the tools print when they cannot reach or authenticate to the daemon (22.05).
UNREACHABLE_MARKERS = (
    "Unable to contact slurm controller",
    "Unable to connect to database",
    "Connection refused",
    "Munge encode failed",
    "Protocol authentication error",
    "Socket timed out",
)
# slurmctld accepted the connection and closed it without a reply (22.05). Measured on the
# lab with a client whose munged has another key: every request but `scontrol ping` says
# so, and slurmctld logs "auth_g_verify: ... has authentication error". A down
# controller says "Unable to contact slurm controller (connect failure)" instead.
CREDENTIAL_REFUSED_MARKERS = ("Zero Bytes were transmitted or received",)
UNKNOWN_NODE_MARKERS = ("Invalid node name specified",)
# A user that is neither SlurmUser, root nor a Slurm administrator (22.05: node updates
# need AdminLevel=Admin, reboots Operator), as scontrol says it.
PERMISSION_MARKERS = (
    "slurm_update error: Invalid user id",
    "scontrol_reboot_nodes error: Permission denied",
)


class SlurmError(Exception):
    """A Slurm command failed; `command` is its argv, `detail` what it printed, `fix`
    what to do about it where MAC knows."""

    fix = ""

    def __init__(self, command: Sequence[str], detail: str) -> None:
        self.command = tuple(command)
        self.detail = detail.strip()
        super().__init__(f"{' '.join(self.command)}: {self.detail or 'failed, printing nothing'}")


class SlurmUnreachable(SlurmError):
    """slurmctld or slurmdbd did not answer (down, a network problem, munge)."""


class SlurmCredentialRefused(SlurmUnreachable):
    """slurmctld runs, but dropped this host's requests unanswered: their credential."""

    fix = (
        "slurmctld runs but refused this host's credential: most often this host's munge "
        "key is not the cluster's (or munged here uses another one, or the Slurm versions "
        "differ). Check: munge -n | ssh <controller> unmunge; slurmctld's log says "
        '"authentication error". Install the cluster\'s /etc/munge/munge.key here (0400, '
        "owner munge) and restart munge; docs/slurm.md"
    )


class SlurmCommandRefused(SlurmError):
    """Slurm answered and refused the command; `fix` says what to do, where MAC knows."""


class SlurmUnknownNode(SlurmCommandRefused):
    """The node is not one of Slurm's NodeNames."""


class SlurmPermissionDenied(SlurmCommandRefused):
    """The user running the tool may not change Slurm's nodes."""

    fix = (
        "run the master as SlurmUser or root, or give its user Slurm's Admin level "
        "(sacctmgr modify user <user> set adminlevel=Admin); docs/slurm.md"
    )


class SlurmToolMissing(SlurmError):
    """A Slurm client program is not installed (Debian: slurm-client)."""


class SlurmOutputError(SlurmError):
    """A tool's output could not be read."""


def classify_failure(command: Sequence[str], returncode: int, output: str) -> SlurmError:
    """The error for a command that exited with `returncode`, having printed `output`."""
    detail = output.strip() or f"exited with status {returncode}"
    if any(marker in output for marker in UNKNOWN_NODE_MARKERS):
        return SlurmUnknownNode(command, detail)
    if any(marker in output for marker in CREDENTIAL_REFUSED_MARKERS):
        return SlurmCredentialRefused(command, detail)
    if any(marker in output for marker in UNREACHABLE_MARKERS):
        return SlurmUnreachable(command, detail)
    if any(marker in output for marker in PERMISSION_MARKERS):
        return SlurmPermissionDenied(command, detail)
    return SlurmCommandRefused(command, detail)

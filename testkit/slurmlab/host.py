"""What the Slurm lab needs of the machine: root, Debian's programs, MariaDB, users, a folder."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

# The users that labs run jobs as (issue 33's access tests need two that are not root).
LAB_USERS = ("maclab-alice", "maclab-bob")
# slurmdbd reaches MariaDB as root over its local socket ("localhost"): Debian's own
# MariaDB lets root in there by unix_socket authentication, without a password.
MARIADB_HOST = "localhost"


class SlurmLabUnavailable(RuntimeError):
    """The lab cannot run here; the message says why (for a test's skip)."""


class SlurmLabError(RuntimeError):
    """A lab command failed; the message holds the command and what it printed."""


def check_can_run(*, accounting: bool = False) -> None:
    """Raise SlurmLabUnavailable unless this machine can run a lab (root, the programs)."""
    if os.geteuid() != 0:
        raise SlurmLabUnavailable(
            "the Slurm lab needs root (slurmd starts jobs as their users; GPUs are made with mknod)"
        )
    programs = ["munged", "slurmctld", "slurmd", "scontrol", "sbatch", "sinfo", "squeue"]
    if accounting:
        programs += ["slurmdbd", "sacct", "sacctmgr", "mariadb"]
    missing = [name for name in programs if not which(name)]
    if missing:
        raise SlurmLabUnavailable(
            f"{', '.join(missing)} not installed: scripts/bootstrap installs Debian's "
            "slurmctld, slurmd, slurm-client, slurmdbd and munge"
        )
    if accounting and not mariadb_answers():
        raise SlurmLabUnavailable(
            "MariaDB does not let root in over its local socket, which slurmdbd needs: "
            "scripts/bootstrap installs and starts it"
        )


def ensure_users(names: Iterable[str] = LAB_USERS) -> list[str]:
    """Add each missing user as a system account (no home, no login shell); the names."""
    names = list(names)
    for name in names:
        try:
            pwd.getpwnam(name)
        except KeyError:
            if os.geteuid() != 0:
                raise SlurmLabUnavailable(
                    f"user {name} does not exist, and adding it needs root"
                ) from None
            subprocess.run(
                ["useradd", "--system", "--user-group", "--no-create-home",
                 "--shell", "/usr/sbin/nologin", "--comment", "MAC Slurm lab user", name],
                check=True, capture_output=True, text=True, timeout=30,
            )  # fmt: skip
    return names


@contextlib.contextmanager
def lab_folder(prefix: str = "maclab-") -> Iterator[Path]:
    """A short folder under /tmp that job users can cross (0711), removed afterwards.

    pytest's tmp_path lies under /tmp/pytest-of-root (0700), which slurmstepd, running a
    job as its user, cannot cross to reach the job's script in the lab's spool: labs
    whose jobs run as other users live here instead.
    """
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o711)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def check_reachable(path: Path, user: str) -> None:
    """Raise unless others may cross every folder down to `path` (a job user must)."""
    for folder in [*reversed(path.parents), path]:
        if not folder.stat().st_mode & stat.S_IXOTH:
            raise SlurmLabError(
                f"{folder} is closed to others ({stat.filemode(folder.stat().st_mode)}), so "
                f"{user}'s job cannot reach its script under {path}: start the lab in "
                "testkit.slurmlab.lab_folder() (pytest's tmp_path is under a 0700 folder)"
            )


def lab_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise SlurmLabError(f"user {name} does not exist: call ensure_users([{name!r}])") from None


def which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


def program(name: str) -> str:
    path = which(name)
    if not path:
        raise SlurmLabUnavailable(f"{name} not installed (scripts/bootstrap)")
    return path


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
        return True
    return False


def mariadb_answers() -> bool:
    done = subprocess.run(
        ["mariadb", "-h", MARIADB_HOST, "-u", "root", "-N", "-e", "SELECT 1"],
        capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    return done.returncode == 0


def drop_database(name: str) -> None:
    subprocess.run(
        ["mariadb", "-h", MARIADB_HOST, "-u", "root", "-e", f"DROP DATABASE IF EXISTS `{name}`"],
        capture_output=True, timeout=30, check=False,
    )  # fmt: skip

"""A real Slurm cluster on one machine, in a folder of the caller's, for tests, benches and demos.

Debian's Slurm 22.05 (slurmctld, slurmd, the client tools) and munge, run as root:
one slurmctld, one `slurmd -N <name>` per node on its own loopback port, one munged
with its own key and socket, and, when asked (`accounting=True`), one slurmdbd on the
local MariaDB with a database of its own, so that `sacct` answers. Everything the lab
writes lies under its folder: configuration, munge key and socket, spools, logs, pid
files, and each node's GPUs as character devices made with mknod (major 195, as
/dev/nvidia*), named by `gres.conf`, so that `--gres=gpu:2` really allocates indexes
and `scontrol -d show job` shows `GRES=gpu:2(IDX:0-1)`.

The package: `lab` (SlurmLab: start, drive, read, stop), `config` (slurm.conf, gres.conf,
slurmdbd.conf, the reboot script, the GPU device nodes), `host` (what it needs of the
machine: root, programs, MariaDB, users, a folder), `processes` (pid files and markers).

Things that are not what a site runs, and why:
- `SlurmUser=root`, munged `--force`: the lab runs as root, with no service user.
- `ProctrackType=proctrack/linuxproc`, `TaskPlugin=task/none`: containers have no
  cgroups to spare; `SlurmdParameters=config_overrides`: the nodes claim the CPUs and
  GPUs of slurm.conf, not the machine's two cores.
- `SchedulerParameters=batch_sched_delay=0`: a job starts within a second of sbatch.
- `RebootProgram` is the lab's own script (bin/reboot): it appends the node and the time
  to reboots.log and restarts that node's slurmd with `-b` (report a boot now), which is
  what slurmctld waits for to finish `scontrol reboot ... nextstate=RESUME`.

Jobs of other users: `submit(user=...)` runs sbatch as root with `--uid/--gid`, which
22.05 allows root. The user must exist on the machine: `ensure_users()` adds the lab's
users (`LAB_USERS`, system accounts without a home or a login shell) when missing and
leaves them in place, since labs of other test runs on the machine may use them.

`stop()` cancels every job, stops every daemon (by its pid file, so a slurmd that the
reboot script restarted goes too), kills whatever still carries the lab's marker in
its environment (slurmstepd, a job's processes), and drops the accounting database.

Measured by bench/slurm_lab.py (docs/benchmarks.md: 3 runs, medians, 2-core machine
shared with other work), lab started and idle:
- start to every node idle: 3 nodes 0.17 s; 3 nodes with slurmdbd on a fresh database
  3.2 s; 20 nodes 0.72 s;
- 20 nodes: 20 slurmd at 5.3 MiB RSS each (106 MiB in all, 23 MiB PSS: they share
  the binary's pages), slurmctld 7 MiB, munged 4 MiB; all daemons together use 0.05 %
  of one core while idle;
- slurmdbd 8.7 MiB RSS; sacct has a job's end 0.09 s after slurmctld reports it done.
See docs/slurm.md.
"""

from testkit.slurmlab.host import (
    LAB_USERS,
    SlurmLabError,
    SlurmLabUnavailable,
    check_can_run,
    ensure_users,
    lab_folder,
)
from testkit.slurmlab.lab import LabNode, SlurmLab
from testkit.slurmlab.processes import DAEMON_MARKER, JOB_MARKER

__all__ = [
    "DAEMON_MARKER",
    "JOB_MARKER",
    "LAB_USERS",
    "LabNode",
    "SlurmLab",
    "SlurmLabError",
    "SlurmLabUnavailable",
    "check_can_run",
    "ensure_users",
    "lab_folder",
]

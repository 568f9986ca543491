"""The lab's configuration files: slurm.conf, gres.conf, slurmdbd.conf, the reboot script, GPUs."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from testkit.slurmlab.host import MARIADB_HOST, program

if TYPE_CHECKING:
    from testkit.slurmlab.lab import SlurmLab

NVIDIA_MAJOR = 195
REBOOT_SCRIPT = """#!/bin/sh
# The lab's RebootProgram: slurmd runs it (as root, with slurmd's environment) for
# `scontrol reboot`. A real node would reboot; this one records a boot and restarts
# its slurmd with -b, which reports the boot to slurmctld as a real one would.
node="$MAC_SLURMLAB_DAEMON_NODE"
echo "$(date +%s.%N) $node" >> "@ROOT@/reboots.log"
pid=$(cat "@ROOT@/run/slurmd-$node.pid")
setsid sh -c "kill -TERM $pid; \\
  while [ -d /proc/$pid ] && ! grep -q '^State:.*Z' /proc/$pid/status; do sleep 0.05; done; \\
  exec @SLURMD@ -b -N $node" </dev/null >>"@ROOT@/log/reboot-$node.log" 2>&1 &
exit 0
"""


def write_config(
    lab: SlurmLab, cpus: int, memory_mb: int, gpus: int, extra: Mapping[str, str]
) -> None:
    """slurm.conf, gres.conf, an empty cgroup.conf and the reboot script, under lab.root."""
    root = lab.root
    settings = {
        "ClusterName": lab.cluster,
        "SlurmctldHost": f"{socket.gethostname().split('.')[0]}(127.0.0.1)",
        "SlurmctldPort": str(lab.controller_port),
        "SlurmUser": "root",
        "SlurmdUser": "root",
        "AuthType": "auth/munge",
        "CredType": "cred/munge",
        "AuthInfo": f"socket={lab.munge_socket}",
        "StateSaveLocation": str(root / "spool" / "slurmctld"),
        "SlurmdSpoolDir": str(root / "spool" / "%n"),
        "SlurmctldPidFile": str(root / "run" / "slurmctld.pid"),
        "SlurmdPidFile": str(root / "run" / "slurmd-%n.pid"),
        "SlurmctldLogFile": str(root / "log" / "slurmctld.log"),
        "SlurmdLogFile": str(root / "log" / "slurmd-%n.log"),
        "SlurmdParameters": "config_overrides",
        "ProctrackType": "proctrack/linuxproc",
        "TaskPlugin": "task/none",
        "MpiDefault": "none",
        "ReturnToService": "2",
        "SelectType": "select/cons_tres",
        "SelectTypeParameters": "CR_Core",
        "GresTypes": "gpu",
        "RebootProgram": str(root / "bin" / "reboot"),
        "JobAcctGatherType": "jobacct_gather/none",
        "MailProg": "/bin/true",
        "KillWait": "5",
        # schedule a batch job when it is submitted (22.05 waits up to 3 s by default)
        "SchedulerParameters": "batch_sched_delay=0",
    }
    if lab.accounting_database:
        settings |= {
            "AccountingStorageType": "accounting_storage/slurmdbd",
            "AccountingStorageHost": "127.0.0.1",
            "AccountingStoragePort": str(lab.accounting_port),
            # the munge socket for slurmdbd (22.05 takes it from here, not AuthInfo)
            "AccountingStoragePass": str(lab.munge_socket),
            "AccountingStorageTRES": "gres/gpu",
        }
    settings |= dict(extra)
    lines = [f"{key}={value}" for key, value in settings.items()]
    for node in lab.nodes:
        lines.append(
            f"NodeName={node.name} NodeAddr=127.0.0.1 Port={node.port} CPUs={cpus} "
            f"RealMemory={memory_mb} Gres=gpu:{gpus} State=UNKNOWN"
        )
    lines.append(f"PartitionName={lab.partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    (root / "etc" / "slurm.conf").write_text("\n".join(lines) + "\n")
    (root / "etc" / "gres.conf").write_text(
        "".join(
            f"NodeName={node.name} Name=gpu File={root}/dev/{node.name}/nvidia[0-{gpus - 1}]\n"
            for node in lab.nodes
            if gpus
        )
    )
    # An empty cgroup.conf: without one, 22.05's slurmd looks in /etc/slurm.
    (root / "etc" / "cgroup.conf").write_text("")
    script = root / "bin" / "reboot"
    script.write_text(
        REBOOT_SCRIPT.replace("@ROOT@", str(root)).replace("@SLURMD@", program("slurmd"))
    )
    script.chmod(0o755)


def write_slurmdbd_conf(lab: SlurmLab) -> None:
    """slurmdbd.conf beside slurm.conf (slurmdbd finds it there through SLURM_CONF)."""
    conf = lab.root / "etc" / "slurmdbd.conf"
    conf.write_text(
        "\n".join(
            [
                "AuthType=auth/munge",
                f"AuthInfo=socket={lab.munge_socket}",
                "DbdHost=localhost",
                "DbdAddr=127.0.0.1",
                f"DbdPort={lab.accounting_port}",
                "SlurmUser=root",
                f"PidFile={lab.root / 'run' / 'slurmdbd.pid'}",
                f"LogFile={lab.root / 'log' / 'slurmdbd.log'}",
                "StorageType=accounting_storage/mysql",
                f"StorageHost={MARIADB_HOST}",
                "StorageUser=root",
                f"StorageLoc={lab.accounting_database}",
            ]
        )
        + "\n"
    )
    conf.chmod(0o600)  # slurmdbd refuses a configuration others can read


def make_gpus(folder: Path, count: int) -> tuple[Path, ...]:
    """`count` character devices nvidia0.. in `folder`, as the NVIDIA driver names them."""
    folder.mkdir(parents=True, exist_ok=True)
    devices = []
    for index in range(count):
        path = folder / f"nvidia{index}"
        if not path.exists():
            os.mknod(path, 0o660 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, index))
        devices.append(path)
    return tuple(devices)

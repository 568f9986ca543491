"""Capture what Slurm's tools print in the lab's states, as fixtures for the parsers' tests.

    python -m testkit.slurmcapture tests/fixtures/slurm

starts a lab (testkit.slurmlab, with accounting) of eight nodes, puts them in the states
MAC must tell apart, runs jobs of two users, and writes the tools' own outputs:
sinfo.json, squeue.json, sacct.txt (as scheduler.slurm's client asks for it),
reservations.txt, ping_up.txt, ping_down.txt and errors.json (argv, status, stdout and
stderr of commands Slurm refuses, and of commands against a stopped slurmctld or
slurmdbd). tests/scheduler/slurm/test_records.py reads them; README.md beside them says
what each holds.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from scheduler.slurm.records import SACCT_DELIMITER, SACCT_FORMAT
from testkit.slurmlab import SlurmLab, ensure_users, lab_folder
from testkit.waiting import wait_for

NODES = [f"node-{index}" for index in range(1, 9)]
SACCT_ARGV = (
    "sacct", "--allusers", "--allocations", "--noheader", "--parsable2",
    f"--delimiter={SACCT_DELIMITER}", f"--format={','.join(SACCT_FORMAT)}",
)  # fmt: skip
PLACEHOLDER = "/tmp/maclab"


def capture(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    alice, bob = ensure_users()
    with lab_folder() as root, SlurmLab.start(root, NODES, 4, accounting=True) as lab:

        def write(name: str, text: str) -> None:
            (out / name).write_text(text.replace(str(root), PLACEHOLDER))
            print(f"wrote {out / name}")

        lab.run("sacctmgr", "-i", "add", "account", "physics")
        lab.run("sacctmgr", "-i", "add", "user", alice, "account=physics")
        finished = lab.submit(seconds=1, gpus=1, node="node-8", name="short")
        failed = lab.submit(command="exit 3", gpus=1, node="node-8", user=bob, name="fails")
        lab.wait_job(finished, "COMPLETED")
        lab.wait_job(failed, "FAILED")
        jobs = [
            lab.submit(gpus=2, node="node-1", user=alice, account="physics", name="train-a"),
            lab.submit(gpus=2, node="node-1", user=bob, name="train-b"),
            lab.submit(gpus=1, nodes=2, node="node-[7-8]", name="two-nodes"),
            lab.submit(gpus=1, node="node-5", name="on-draining"),
            lab.submit(gpus=4, node="node-6", name="before-reboot"),
        ]
        for job in jobs:
            lab.wait_job(job, "RUNNING")
        lab.scontrol("update", "NodeName=node-2", "State=DRAIN", "Reason=MAC: GPU 3 XID 79; reboot")
        lab.scontrol("update", "NodeName=node-3", "State=DOWN", "Reason=bad PSU, ticket 4711")
        lab.scontrol("update", "NodeName=node-5", "State=DRAIN", "Reason=admin: firmware update")
        lab.scontrol(
            "create", "reservation", "ReservationName=maint-rack2", "Nodes=node-4",
            "StartTime=now", "Duration=120", "Users=root", "Flags=MAINT",
        )  # fmt: skip
        lab.scontrol(
            "reboot", "ASAP", "nextstate=RESUME", "reason=MAC: GPU 0 fell off the bus", "node-6"
        )
        pending = lab.submit(gpus=1, node="node-2", name="waits")  # node-2 is drained
        lab.wait_job(pending, "PENDING")
        # slurmctld marks reserved nodes in its 5-second background pass
        wait_for(lambda: "maint" in lab.node_states()["node-4"], 15, what="node-4 in maint")
        write("sinfo.json", lab.sinfo("--json"))
        write("squeue.json", lab.squeue("--json"))
        write("reservations.txt", lab.scontrol("show", "reservation", "-o"))
        write("ping_up.txt", lab.scontrol("ping"))
        wait_for(
            lambda: "COMPLETED" in lab.sacct("-n", "-X", "-o", "State", "-j", str(finished)),
            15,
            what="the finished job in sacct",
        )
        write("sacct.txt", _call(lab, *SACCT_ARGV, "--starttime=now-1hour")["stdout"])
        errors = {
            "unknown_node": _call(lab, "scontrol", "update", "NodeName=node-99", "State=RESUME"),
            "resume_idle_node": _call(lab, "scontrol", "update", "NodeName=node-7", "State=RESUME"),
            "drain_without_reason": _call(
                lab, "scontrol", "update", "NodeName=node-7", "State=DRAIN"
            ),
        }
        # A master whose user may not change nodes (munge's socket opened to it).
        (root / "munge").chmod(0o711)
        errors["drain_as_nobody"] = _call(
            lab, "runuser", "-u", "nobody", "--", "scontrol", "update", "NodeName=node-7",
            "State=DRAIN", "Reason=MAC: test",
        )  # fmt: skip
        errors["reboot_as_nobody"] = _call(
            lab, "runuser", "-u", "nobody", "--", "scontrol", "reboot", "ASAP",
            "nextstate=RESUME", "reason=MAC: test", "node-7",
        )  # fmt: skip
        lab.stop_controller()
        write("ping_down.txt", _call(lab, "scontrol", "ping")["stdout"])
        errors["update_controller_down"] = _call(
            lab, "scontrol", "update", "NodeName=node-7", "State=RESUME"
        )
        errors["squeue_controller_down"] = _call(lab, "squeue", "--json")
        errors["sacct_nothing_found"] = _call(lab, *SACCT_ARGV, "--jobs=999999")
        lab.stop_accounting()
        errors["sacct_slurmdbd_down"] = _call(lab, *SACCT_ARGV, "--starttime=now-1hour")
        write("errors.json", json.dumps(errors, indent=2) + "\n")


def _call(lab: SlurmLab, *argv: str) -> dict:
    env = {**lab.env, "SLURM_TIME_FORMAT": "%s"}  # as the client runs sacct
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    return {
        "argv": list(argv),
        "returncode": done.returncode,
        "stdout": done.stdout,
        "stderr": done.stderr,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="where to write the captured outputs")
    capture(parser.parse_args(argv).folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The settings of the scheduler link: Slurm's own SLURM_CONF, and MAC's drain in Slurm
(docs/slurm.md), each read by its parser in contract.drainpolicy, and the NodeName map by
contract.nodemap."""

from __future__ import annotations

from pathlib import Path

from contract import drainpolicy, nodemap
from contract.settings.kinds import Custom, FilePath
from contract.settings.model import Group, Setting, Side

MASTER = Side.MASTER


def _drain(parse, what: str, shower=str) -> Custom:
    """A drain setting read by its own parser in contract.drainpolicy."""
    return Custom(lambda name, text: parse(text, name), what, shower)


SCHEDULER = Group(
    "Slurm",
    (
        Setting(
            "SLURM_CONF",
            FilePath(folder=False),
            Path(drainpolicy.DEFAULT_SLURM_CONF),
            "Slurm's own variable: the cluster's slurm.conf, for the master's `scontrol` "
            "(with munge and the cluster's key; `mac doctor` checks it); under Docker "
            "mac-worker mounts it and munge's socket",
            MASTER,
            see="docs/slurm.md",
            readme=True,
        ),
        Setting(
            "MAC_SLURM_DRAIN",
            _drain(drainpolicy.parse_drain_mode, "off, dry-run or on"),
            drainpolicy.DrainMode.OFF,
            "the drain in Slurm: `off`, `dry-run` (decide and record, change nothing) or `on`",
            MASTER,
            see="docs/slurm.md#draining-unhealthy-nodes",
            readme=True,
        ),
        Setting(
            "MAC_DRAIN_BUDGET",
            _drain(drainpolicy.parse_drain_budget, "share (10%) or count (3)"),
            drainpolicy.parse_drain_budget(None),
            "the most of the fleet MAC keeps drained at once; past it MacDrainBudgetSpent fires",
            MASTER,
            see="docs/slurm.md",
            readme=True,
        ),
        Setting(
            "MAC_SLURM_REBOOT",
            _drain(drainpolicy.parse_reboot, "on or off", lambda on: "on" if on else "off"),
            False,
            "`on`: a verdict whose action is reboot gets `scontrol reboot ASAP "
            "nextstate=RESUME` instead of a drain",
            MASTER,
            see="docs/slurm.md",
            readme=True,
        ),
        Setting(
            "MAC_SLURM_RESUME_SWEEPS",
            _drain(drainpolicy.parse_resume_sweeps, "integer from 1 to 1000"),
            drainpolicy.DEFAULT_RESUME_SWEEPS,
            "healthy sweeps in a row before MAC resumes a node it drained (after a drain "
            "for reset_gpu, reboot or inspect_hardware, on a boot since its fault)",
            MASTER,
            see="docs/slurm.md",
            readme=True,
        ),
        Setting(
            "MAC_SLURM_NODE_MAP",
            Custom(
                lambda name, text: nodemap.check_node_map(text, name),
                "host=NodeName,... or @file",
            ),
            None,
            "host name to Slurm NodeName where they differ (`gpu-01.dc=gpu01,...` or "
            "`@/path/file`); by default the short host name",
            MASTER,
            see="docs/slurm.md",
            readme=True,
        ),
    ),
)

GROUPS = (SCHEDULER,)

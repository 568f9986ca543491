"""The settings of MAC's drain in Slurm, read the same way by the master and by `mac`.

The master's settings (macweb.settings) read them to run the drain (scheduler.drainpass);
`mac env set` refuses a bad value when it is written, and `mac doctor` on the master says
what they are and whether slurmctld answers (node.checks.slurm). One parser each, here,
so a value means the same everywhere and a bad one gets the same words.

- ``MAC_SLURM_DRAIN``: ``off`` (the default: MAC never reads or changes Slurm for the
  drain), ``dry-run`` (MAC decides and records what it would do, and changes nothing) or
  ``on``.
- ``MAC_DRAIN_BUDGET``: the most nodes MAC keeps drained at once, as a share of the nodes
  it monitors in Slurm (``10%``, the default) or a count (``3``). A bad rule, or a bad
  driver release, must never empty a cluster.
- ``MAC_SLURM_RESUME_SWEEPS``: healthy sweeps in a row before MAC resumes a node it drained.
- ``MAC_SLURM_REBOOT``: ``on`` lets MAC ask Slurm to reboot a node whose verdict says
  reboot, instead of draining it; ``off`` by default.
- ``SLURM_CONF``: Slurm's own variable for its configuration, as the tools read it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from contract.nodemap import parse_node_map

DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"
DEFAULT_DRAIN_BUDGET = "10%"
DEFAULT_RESUME_SWEEPS = 3
_PERCENT = re.compile(r"^(\d+(?:\.\d+)?)\s*%$")


class DrainMode(StrEnum):
    OFF = "off"
    DRY_RUN = "dry-run"
    ON = "on"


def parse_drain_mode(value: str | None, name: str = "MAC_SLURM_DRAIN") -> DrainMode:
    """The mode written in `value` (empty: off); ValueError naming `name` otherwise."""
    text = (value or "").strip().lower() or DrainMode.OFF
    try:
        return DrainMode(text)
    except ValueError:
        raise ValueError(
            f"{name}={value!r}: use off (the default), dry-run (decide and record, change "
            "nothing in Slurm) or on (drain and resume nodes)."
        ) from None


@dataclass(frozen=True)
class DrainBudget:
    """At most this share of the fleet (`share`, 0 < share <= 1) or this many nodes (`count`)."""

    share: float | None = None
    count: int | None = None

    def limit(self, fleet: int) -> int:
        """How many nodes MAC may keep drained in a fleet of `fleet` nodes.

        A share rounds down, but never below one node while the fleet has one: 10 % of
        five nodes lets MAC drain one, not none.
        """
        if fleet <= 0:
            return 0
        if self.count is not None:
            return min(self.count, fleet)
        return max(1, math.floor(fleet * (self.share or 0.0) + 1e-9))

    def __str__(self) -> str:
        if self.count is not None:
            return str(self.count)
        return f"{(self.share or 0.0) * 100:g}%"


def parse_drain_budget(value: str | None, name: str = "MAC_DRAIN_BUDGET") -> DrainBudget:
    """`10%` or `3` (empty: the default, 10 %); ValueError naming `name` otherwise."""
    text = (value or "").strip() or DEFAULT_DRAIN_BUDGET
    percent = _PERCENT.match(text)
    if percent:
        share = float(percent.group(1)) / 100
        if 0 < share <= 1:
            return DrainBudget(share=share)
    elif text.isascii() and text.isdigit() and int(text) >= 1:
        return DrainBudget(count=int(text))
    raise ValueError(
        f"{name}={value!r}: give a share of the fleet, more than 0% and at most 100% (e.g. 10%, "
        "the default), or a number of nodes from 1 (e.g. 3). To drain nothing, set "
        "MAC_SLURM_DRAIN=dry-run instead."
    )


def parse_resume_sweeps(value: str | None, name: str = "MAC_SLURM_RESUME_SWEEPS") -> int:
    """Healthy sweeps in a row before MAC resumes a node it drained (default 3)."""
    text = (value or "").strip()
    if not text:
        return DEFAULT_RESUME_SWEEPS
    if text.isascii() and text.isdigit() and 1 <= int(text) <= 1000:
        return int(text)
    raise ValueError(f"{name}={value!r}: give a number of sweeps from 1 to 1000 (default 3).")


def parse_reboot(value: str | None, name: str = "MAC_SLURM_REBOOT") -> bool:
    """Whether MAC may ask Slurm to reboot a node (default no)."""
    text = (value or "").strip().lower()
    if text in ("", "0", "false", "no", "off"):
        return False
    if text in ("1", "true", "yes", "on"):
        return True
    raise ValueError(
        f"{name}={value!r}: use on to let MAC reboot nodes whose verdict says reboot "
        "(scontrol reboot ASAP nextstate=RESUME), off (the default) to drain them only."
    )


# Each setting and its parser: `mac env set` checks a value with it, `mac start master`
# checks them all before anything starts.
PARSERS = {
    "MAC_SLURM_DRAIN": parse_drain_mode,
    "MAC_DRAIN_BUDGET": parse_drain_budget,
    "MAC_SLURM_RESUME_SWEEPS": parse_resume_sweeps,
    "MAC_SLURM_REBOOT": parse_reboot,
    # Strictly, its @file too: `mac start master` and `mac doctor` run where the file is.
    "MAC_SLURM_NODE_MAP": parse_node_map,
}


def check_settings(get: Callable[[str], str | None]) -> None:
    """Raise ValueError naming the first of these settings whose value `get` gives is bad."""
    for name, parse in PARSERS.items():
        parse(get(name), name)

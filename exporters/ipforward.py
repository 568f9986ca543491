"""sys-manager's ip_forward watch: see each reset of net.ipv4.ip_forward, and say what preceded it.

The guide's hardest failure is forwarding dropping to 0 mid-run (a RoCE NIC gains
carrier, the network is reconfigured), after which the node silently goes Offline.
A poll of the flag every second costs one small read; each 1 -> 0 transition is a
reset. For each one the watch

- counts it (mac_ipforward_resets_total) and keeps its time;
- with MAC_IPFORWARD_REASSERT=1 (off by default) writes 1 back at once, as networkd
  would with the drop-in, and counts that (mac_ipforward_reasserts_total);
- asks journald for the last "Gained carrier" of systemd-networkd before it, where the
  journal can tell (the link name is a bounded label: one series, IFNAMSIZ long);
- hands it to the reporter (exporters.ipforward_report), which records it in the node's
  history on the master.

/proc/sys/net belongs to the network namespace of the reader. Where sys-manager shares
the host's network (host mode, the process runtime) the watch reads that file; in bridge
mode sys-manager has a network namespace of its own, and the watch reads the node's flag
from the host's pid 1 instead (/proc/1/net/snmp: node.checks.network.read_forwarding,
which the `ip_forward` check uses too). To set it back, sys-manager needs the file
writable and CAP_NET_ADMIN: the process runtime runs as root; under Docker, host mode's
compose file gives sys-manager that one file read-write and the capability. In bridge
mode a write would change only sys-manager's own namespace, so the watch does not try,
and says so (``reassert_problem``).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric

from exporters.runtime import BackendStatus
from node.checks.network import PROC_FILE, read_forwarding
from node.host import Roots
from node.runner import Runner, run_command

log = logging.getLogger("exporters")

DEFAULT_INTERVAL = 1.0
# A carrier gain this long before a reset still counts as what preceded it.
CARRIER_WINDOW_SECONDS = 300
# Linux interface names: at most 15 bytes (IFNAMSIZ), no '/', no blanks.
LINK_NAME = re.compile(r"[A-Za-z0-9_.:@-]{1,15}")


@dataclass(frozen=True)
class CarrierGain:
    link: str
    at: float  # unix time


@dataclass(frozen=True)
class Reset:
    """One 1 -> 0 transition of net.ipv4.ip_forward as the watch saw it."""

    at: float
    carrier: CarrierGain | None
    reasserted: bool


def parse_carrier_gains(text: str) -> list[CarrierGain]:
    """The "Gained carrier" entries of `journalctl -o json` output, oldest first."""
    gains = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        message = entry.get("MESSAGE") if isinstance(entry, dict) else None
        if not isinstance(message, str) or not message.endswith("Gained carrier"):
            continue
        link = entry.get("INTERFACE") or message.partition(":")[0].strip()
        try:
            at = int(entry["__REALTIME_TIMESTAMP"]) / 1e6
        except (KeyError, TypeError, ValueError):
            continue
        # lo "gains carrier" whenever networkd starts: never what reset forwarding.
        if isinstance(link, str) and LINK_NAME.fullmatch(link) and link != "lo":
            gains.append(CarrierGain(link, at))
    return sorted(gains, key=lambda gain: gain.at)


def last_carrier_gain(
    run: Runner, before: float, journal_dir: str | None = None
) -> CarrierGain | None:
    """systemd-networkd's last "Gained carrier" up to `before`, or None where none is known."""
    since = int(before - CARRIER_WINDOW_SECONDS)
    argv = ["journalctl", "-u", "systemd-networkd", "--since", f"@{since}", "-o", "json"]
    argv += ["--no-pager", *(["--directory", journal_dir] if journal_dir else [])]
    result = run(argv)
    if result.returncode != 0:
        return None
    gains = [gain for gain in parse_carrier_gains(result.stdout) if gain.at <= before + 1]
    return gains[-1] if gains else None


class IpForwardWatch:
    """Polls the flag in a thread of its own; a source of sys-manager's /metrics."""

    name = "ipforward"
    inline = True  # collect() only reads what the poll thread keeps

    def __init__(
        self,
        roots: Roots | None = None,
        *,
        reassert: bool = False,
        interval: float = DEFAULT_INTERVAL,
        on_reset: Callable[[Reset], None] = lambda reset: None,
        run: Runner = run_command,
        journal_dir: str | None = None,
        clock: Callable[[], float] = time.time,
        reassert_problem: str = "",
        netns_of_its_own: bool = False,
    ) -> None:
        self.roots = roots or Roots()
        self.path = self.roots.host(PROC_FILE)  # what a reassert writes
        # Not in the node's network namespace (bridge mode): read the host's pid 1's.
        self.netns_of_its_own = netns_of_its_own
        # Why a reassert cannot work here ("" when it can, or when none is asked for).
        self.reassert_problem = reassert_problem if reassert else ""
        self.reassert = reassert and not self.reassert_problem
        self.interval = interval
        self.on_reset = on_reset
        self.run = run
        self.journal_dir = journal_dir
        self.clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.value: int | None = None
        self.error = ""
        self.resets = 0
        self.reasserts = 0
        self.last: Reset | None = None

    def _read(self) -> int | None:
        found = read_forwarding(self.roots, self.netns_of_its_own)
        self.error = found.problem
        return found.value

    def _write_one(self) -> bool:
        try:
            self.path.write_text("1\n")
        except OSError as exc:
            log.warning("ip_forward was reset and could not be set back: %s", exc)
            return False
        return True

    def poll(self) -> Reset | None:
        """One look at the flag; the Reset when it just went from 1 to 0."""
        value = self._read()
        with self._lock:
            previous, self.value = self.value, value
        if not (previous == 1 and value == 0):
            return None
        at = self.clock()
        reasserted = self.reassert and self._write_one()  # first: every second counts
        with self._lock:
            self.resets += 1
            if reasserted:
                self.reasserts += 1
                self.value = 1
        carrier = last_carrier_gain(self.run, at, self.journal_dir)
        reset = Reset(at, carrier, reasserted)
        with self._lock:
            self.last = reset
        log.warning(
            "net.ipv4.ip_forward was reset to 0%s%s",
            f" after {carrier.link} gained carrier" if carrier else "",
            "; set back to 1 (MAC_IPFORWARD_REASSERT=1)" if reasserted else "",
        )
        self.on_reset(reset)
        return reset

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except Exception:  # the watch must outlive any surprise; the next poll retries
                log.exception("ip_forward watch")

    def start(self) -> IpForwardWatch:
        if self.reassert_problem:
            log.error("MAC_IPFORWARD_REASSERT=1 is ignored: %s", self.reassert_problem)
        self.poll()  # the starting value: a 0 found at start is not a reset
        self._thread = threading.Thread(target=self._loop, name="ipforward-watch", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def backends(self) -> list[BackendStatus]:
        found = [BackendStatus("ip_forward", not self.error, self.error)]
        if self.reassert or self.reassert_problem:
            found.append(
                BackendStatus(
                    "ip_forward_reassert", not self.reassert_problem, self.reassert_problem
                )
            )
        return found

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            value, resets, reasserts, last = self.value, self.resets, self.reasserts, self.last
        if value is not None:
            yield GaugeMetricFamily(
                "mac_ipforward_enabled", "net.ipv4.ip_forward now (1 on, 0 off).", value=value
            )
        yield CounterMetricFamily(
            "mac_ipforward_resets", "Times net.ipv4.ip_forward went from 1 to 0.", value=resets
        )
        yield CounterMetricFamily(
            "mac_ipforward_reasserts",
            "Resets set back to 1 at once (MAC_IPFORWARD_REASSERT=1).",
            value=reasserts,
        )
        yield GaugeMetricFamily(
            "mac_ipforward_last_reset_timestamp_seconds",
            "Unix time of the last reset seen (0: none since sys-manager started).",
            value=last.at if last else 0.0,
        )
        if last is None:
            return
        info = InfoMetricFamily(
            "mac_ipforward_last_reset",
            "The last reset: the link that gained carrier before it ('' where journald "
            "cannot tell) and whether it was set back.",
        )
        link = last.carrier.link if last.carrier else ""
        info.add_metric([], {"link": link, "reasserted": str(last.reasserted).lower()})
        yield info
        if last.carrier is not None:
            yield GaugeMetricFamily(
                "mac_ipforward_last_carrier_gain_timestamp_seconds",
                "Unix time of the carrier gain that preceded the last reset (journald).",
                value=last.carrier.at,
            )

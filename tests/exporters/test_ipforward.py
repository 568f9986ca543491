"""sys-manager's ip_forward watch and its reporter, on a prepared /proc tree.

The journal output is recorded from a real systemd-networkd (a container whose veth
lost and regained carrier). The watch against a real kernel flag, a real master and a
real Prometheus is test_ipforward_netns.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.master_api import Reply
from exporters.ipforward import (
    CarrierGain,
    IpForwardWatch,
    Reset,
    last_carrier_gain,
    parse_carrier_gains,
)
from exporters.ipforward_report import ResetReporter
from exporters.runtime import Exporter
from exporters.sysmanager import reassert_problem
from node.host import Roots
from node.runner import CommandResult
from tests.node.checks.scratch import snmp, write

JOURNAL = Path(__file__).parents[1] / "fixtures/journal/networkd-carrier.json"
# The two "host0: Gained carrier" entries of the recording, in unix seconds.
FIRST_GAIN, SECOND_GAIN = 1796141589.959621, 1796141592.983053


@pytest.fixture
def flag(tmp_path) -> Path:
    path = tmp_path / "proc/sys/net/ipv4/ip_forward"
    path.parent.mkdir(parents=True)
    path.write_text("1\n")
    return path


def _journal(argv):
    assert argv[:5] == [
        "journalctl",
        "-u",
        "systemd-networkd",
        "--since",
        "@1796141300",  # 300 s before the reset
    ]
    return CommandResult(0, JOURNAL.read_text())


def _watch(tmp_path, *, reassert=False, run=None, seen=None) -> IpForwardWatch:
    return IpForwardWatch(
        Roots(proc_root=str(tmp_path / "proc")),
        reassert=reassert,
        run=run or (lambda argv: CommandResult(1, "", "No journal files were found.")),
        on_reset=(seen.append if seen is not None else lambda reset: None),
        clock=lambda: 1796141600.0,
    )


def _sample(watch: IpForwardWatch, name: str, labels: dict | None = None) -> float | None:
    return Exporter("sys-manager", [watch]).registry.get_sample_value(name, labels or {})


def test_carrier_gains_come_from_networkd_json_and_skip_loopback():
    gains = parse_carrier_gains(JOURNAL.read_text())
    assert gains == [CarrierGain("host0", FIRST_GAIN), CarrierGain("host0", SECOND_GAIN)]
    assert parse_carrier_gains('not json\n{"MESSAGE": "eth0: Gained carrier"}\n') == []
    long_name = '{"MESSAGE": "x: Gained carrier", "INTERFACE": "a-very-long-link-name", '
    assert parse_carrier_gains(long_name + '"__REALTIME_TIMESTAMP": "1"}') == []


def test_the_last_gain_before_the_reset_is_the_one_reported():
    assert last_carrier_gain(_journal, 1796141600.0) == CarrierGain("host0", SECOND_GAIN)
    assert last_carrier_gain(lambda argv: CommandResult(127, "", ""), 1796141600.0) is None


def test_a_one_to_zero_transition_is_a_reset_and_nothing_else_is(tmp_path, flag):
    seen: list[Reset] = []
    watch = _watch(tmp_path, seen=seen, run=_journal)
    assert watch.poll() is None  # the starting value
    flag.write_text("0\n")
    reset = watch.poll()
    assert reset == Reset(1796141600.0, CarrierGain("host0", SECOND_GAIN), reasserted=False)
    assert watch.poll() is None  # still 0: the same reset
    flag.write_text("1\n")
    watch.poll()
    flag.write_text("0\n")
    watch.poll()
    assert len(seen) == 2 and watch.resets == 2 and watch.reasserts == 0
    assert flag.read_text() == "0\n"  # not touched without MAC_IPFORWARD_REASSERT
    assert _sample(watch, "mac_ipforward_enabled") == 0
    assert _sample(watch, "mac_ipforward_resets_total") == 2
    assert _sample(watch, "mac_ipforward_last_reset_timestamp_seconds") == 1796141600.0
    info = {"link": "host0", "reasserted": "false"}
    assert _sample(watch, "mac_ipforward_last_reset_info", info) == 1
    assert _sample(watch, "mac_ipforward_last_carrier_gain_timestamp_seconds") == SECOND_GAIN


def test_forwarding_found_off_at_start_is_not_a_reset(tmp_path, flag):
    flag.write_text("0\n")
    watch = _watch(tmp_path)
    watch.poll()
    watch.poll()
    assert watch.resets == 0
    assert _sample(watch, "mac_ipforward_resets_total") == 0
    assert _sample(watch, "mac_ipforward_last_reset_timestamp_seconds") == 0
    assert (
        _sample(watch, "mac_ipforward_last_reset_info", {"link": "", "reasserted": "false"}) is None
    )


def test_reassert_sets_it_back_at_once_and_counts_that_too(tmp_path, flag):
    watch = _watch(tmp_path, reassert=True)
    watch.poll()
    flag.write_text("0\n")
    reset = watch.poll()
    assert reset is not None and reset.reasserted and reset.carrier is None
    assert flag.read_text() == "1\n"
    assert (watch.resets, watch.reasserts) == (1, 1)
    assert _sample(watch, "mac_ipforward_enabled") == 1
    assert _sample(watch, "mac_ipforward_reasserts_total") == 1
    assert _sample(watch, "mac_ipforward_last_reset_info", {"link": "", "reasserted": "true"}) == 1


def test_in_bridge_mode_the_watch_does_not_reassert_and_says_why(tmp_path, flag):
    problem = reassert_problem(flag, "bridge")
    assert "bridge mode" in problem and "--network host" in problem
    watch = IpForwardWatch(
        Roots(proc_root=str(tmp_path / "proc")), reassert=True, reassert_problem=problem
    )
    watch.poll()
    flag.write_text("0\n")
    reset = watch.poll()
    assert reset is not None and not reset.reasserted and flag.read_text() == "0\n"
    labels = {"backend": "ip_forward_reassert", "reason": problem}
    assert _sample(watch, "mac_exporter_backend_available", labels) == 0


def test_in_a_namespace_of_its_own_the_watch_follows_the_hosts_flag(tmp_path, flag):
    """Bridge mode: sys-manager's own flag stays 1 while the node's (pid 1's) drops."""
    host = tmp_path / "proc/1/net/snmp"
    write(host, snmp("1"))
    seen: list[Reset] = []
    watch = IpForwardWatch(
        Roots(proc_root=str(tmp_path / "proc")),
        netns_of_its_own=True,
        on_reset=seen.append,
        run=lambda argv: CommandResult(1, "", ""),
        clock=lambda: 1796141600.0,
    )
    watch.poll()
    assert _sample(watch, "mac_ipforward_enabled") == 1
    write(host, snmp("2"))
    assert watch.poll() is not None
    assert len(seen) == 1 and flag.read_text() == "1\n"
    assert _sample(watch, "mac_ipforward_enabled") == 0
    assert _sample(watch, "mac_ipforward_resets_total") == 1


def test_a_garbled_host_flag_is_a_backend_with_its_reason(tmp_path, flag):
    write(tmp_path / "proc/1/net/snmp", "Ip: DefaultTTL\nIp: 64\n")
    watch = IpForwardWatch(Roots(proc_root=str(tmp_path / "proc")), netns_of_its_own=True)
    watch.poll()
    [backend] = watch.backends()
    assert not backend.available
    assert backend.reason == f"{tmp_path}/proc/1/net/snmp has no Forwarding value on its Ip: lines"
    assert _sample(watch, "mac_ipforward_enabled") is None


def test_a_flag_sys_manager_cannot_write_is_named_with_what_to_do(tmp_path):
    """No write access (here: no such file; under Docker: a read-only /proc)."""
    flag = tmp_path / "proc/sys/net/ipv4/ip_forward"
    in_container, as_process = reassert_problem(flag, "host"), reassert_problem(flag, None)
    assert f"{flag} is not writable" in in_container and "--network host" in in_container
    assert f"{flag} is not writable" in as_process and "as root" in as_process


def test_where_the_flag_is_writable_nothing_stands_in_the_way(flag):
    assert reassert_problem(flag, "host") == reassert_problem(flag, None) == ""
    # Without a reassert asked for, the watch reports no reassert backend at all.
    assert [b.name for b in IpForwardWatch(Roots(proc_root=str(flag.parents[3]))).backends()] == [
        "ip_forward"
    ]


def test_an_unreadable_flag_is_a_backend_with_its_reason(tmp_path):
    watch = _watch(tmp_path)
    watch.poll()
    [backend] = watch.backends()
    assert not backend.available and "cannot read" in backend.reason
    exporter = Exporter("sys-manager", [watch])
    assert exporter.registry.get_sample_value("mac_ipforward_enabled") is None
    assert (
        exporter.registry.get_sample_value(
            "mac_exporter_backend_available", {"backend": "ip_forward", "reason": backend.reason}
        )
        == 0
    )


def test_the_thread_polls_and_stops_with_the_exporter(tmp_path, flag):
    import time

    watch = IpForwardWatch(Roots(proc_root=str(tmp_path / "proc")), interval=0.05)
    exporter = Exporter("sys-manager", [watch.start()])
    flag.write_text("0\n")
    deadline = time.monotonic() + 5
    while watch.resets == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert watch.resets == 1
    exporter.close()
    assert not watch._thread.is_alive()


# --- the reporter ------------------------------------------------------------------------


class Master:
    """Answers report_event() as told, and keeps what it took."""

    def __init__(self, *statuses: int, headers: dict | None = None) -> None:
        self.statuses = list(statuses)
        self.headers = headers or {}
        self.taken: list[dict] = []

    def report_event(self, body: dict) -> Reply:
        status = self.statuses.pop(0) if self.statuses else 201
        if status == 201:
            self.taken.append(body)
        error = "connection refused" if status == 0 else ""
        return Reply(status, {"detail": "x"} if status else "", self.headers, error)


RESET = Reset(1796141600.0, CarrierGain("host0", SECOND_GAIN), reasserted=False)


def test_a_report_says_when_which_link_and_whether_it_was_set_back():
    master = Master()
    reporter = ResetReporter(lambda: master)
    reporter.add(RESET)
    assert reporter.send_pending() is None
    assert master.taken == [
        {
            "kind": "ip_forward_reset",
            "when": "2026-12-01T16:13:20.000+00:00",
            "link": "host0",
            "carrier_at": "2026-12-01T16:13:12.983+00:00",
            "reasserted": False,
            "resets": 1,
        }
    ]
    assert reporter.sent == 1 and reporter.pending() == 0


def test_reports_wait_while_the_master_is_unreachable_and_lose_no_count():
    master = Master(0, 0)
    reporter = ResetReporter(lambda: master, max_pending=2)
    for _ in range(5):
        reporter.add(RESET)
    assert reporter.pending() == 5  # 2 reports, the second standing for 4 resets
    assert reporter.send_pending() == 0.0  # unreachable: back off and try again
    assert "connection refused" in reporter.last_error
    assert reporter.send_pending() == 0.0
    assert reporter.send_pending() is None
    assert [body["resets"] for body in master.taken] == [1, 4]
    assert reporter.sent == 5 and reporter.pending() == 0
    registry = Exporter("sys-manager", [reporter]).registry
    assert registry.get_sample_value("mac_ipforward_reports_sent_total") == 5
    assert registry.get_sample_value("mac_ipforward_reports_pending") == 0


def test_before_registration_reports_wait_for_a_node_key():
    reporter = ResetReporter(lambda: None)
    reporter.add(RESET)
    assert reporter.send_pending() == reporter.max_delay
    assert reporter.pending() == 1 and "not registered" in reporter.last_error


def test_the_masters_retry_after_is_honoured_and_a_refused_report_is_dropped():
    limited = Master(429, headers={"retry-after": "17"})
    reporter = ResetReporter(lambda: limited)
    reporter.add(RESET)
    assert reporter.send_pending() == 17.0
    refused = Master(400)
    reporter = ResetReporter(lambda: refused)
    reporter.add(RESET)
    assert reporter.send_pending() is None
    assert reporter.pending() == 0 and reporter.sent == 0

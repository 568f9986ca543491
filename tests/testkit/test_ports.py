"""Ports for the tests' servers: never one the kernel may give an outgoing connection
meanwhile, never one of MAC's defaults, never the same one twice to one process, and
never the same one to two xdist workers."""

from __future__ import annotations

import socket

import pytest

from testkit import ports


def test_ports_are_below_the_ephemeral_range_and_outside_mac_s_defaults() -> None:
    low = ports._ephemeral_low()
    handed = [ports.free_port() for _ in range(300)]
    assert all(1024 <= port < low for port in handed)
    assert not [port for port in handed if port in ports.MAC_DEFAULTS]
    # Handed out lately: not again, although nothing has bound them yet.
    assert len(set(handed)) == len(handed)


def test_a_port_someone_listens_on_is_never_handed_out(monkeypatch) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", ports.free_port()))
        squatter.listen()
        taken = squatter.getsockname()[1]
        monkeypatch.setattr(ports, "_HANDED", type(ports._HANDED)(maxlen=1024))
        monkeypatch.setattr(ports.random, "shuffle", lambda seq: seq.sort(key=lambda p: p != taken))
        assert ports.free_port() != taken


@pytest.mark.parametrize("count", [2, 3])
def test_each_xdist_worker_draws_from_a_slice_of_its_own(monkeypatch, count: int) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(count))
    whole = range(20000, 32000)
    slices = []
    for number in range(count):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{number}")
        slices.append(set(ports._slice(whole)))
    assert all(len(share) >= len(whole) // count - 1 for share in slices)
    assert sum(len(share) for share in slices) == len(set().union(*slices))  # disjoint
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert ports._slice(whole) == whole

"""Ports for the tests' servers: never one the kernel may give an outgoing connection
meanwhile, never one of MAC's defaults, never the same one twice to one process, and
never the same one to two xdist workers. And the agent's contract ports: whether a
listener (a MAC node's agent, on every address) keeps a simulated agent off them.

The listeners here are on free ports standing in for a contract port: one on 0.0.0.0:29101
would keep the fleets of the tests running beside these off their port (tests/test_hermetic.py
holds the real one, in a network namespace of its own)."""

from __future__ import annotations

import socket

import pytest

from testkit import ports
from testkit.ports import ContractPortHeld, check_contract_ports, contract_port_holders
from testkit.simfleet import FleetThread, loopback_base


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


def _listen(address: str, port: int, family: int = socket.AF_INET, v6only: bool = False):
    listener = socket.socket(family, socket.SOCK_STREAM)
    if family == socket.AF_INET6:
        listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, int(v6only))
    listener.bind((address, port))
    listener.listen()
    return listener


def test_a_listener_on_every_address_holds_the_port_and_the_error_says_what_to_do() -> None:
    ours = f"{loopback_base().rsplit('.', 1)[0]}.1"
    port = ports.free_port()
    assert contract_port_holders([ours], [port]) == {}
    check_contract_ports([ours], [port])  # nothing listens: no error
    with _listen("0.0.0.0", port):
        assert contract_port_holders([ours], [port]) == {port: f"0.0.0.0:{port}"}
        with pytest.raises(ContractPortHeld) as held:
            check_contract_ports([ours], [port])
    said = str(held.value)
    assert f"agent contract port {port} is taken here: 0.0.0.0:{port} listens" in said
    assert f"cannot listen on {ours}:{port}" in said
    assert "give the agent MAC_BIND=<this node's IP>" in said
    assert "run the tests on a machine without a MAC agent" in said


def test_a_listener_on_the_same_address_holds_it_one_on_another_address_does_not() -> None:
    prefix = loopback_base().rsplit(".", 1)[0]
    mine, other = f"{prefix}.1", f"{prefix}.2"
    port = ports.free_port()
    with _listen(other, port):
        assert contract_port_holders([mine], [port]) == {}
        assert contract_port_holders([mine, other], [port]) == {port: f"{other}:{port}"}
        with pytest.raises(ContractPortHeld, match=f"cannot listen on {other}:{port}"):
            check_contract_ports([mine, other], [port])
        _listen(mine, port).close()  # and indeed the other address is free


@pytest.mark.skipif(not socket.has_ipv6, reason="no IPv6 here")
def test_an_ipv6_wildcard_holds_the_port_unless_it_takes_ipv6_only() -> None:
    ours = f"{loopback_base().rsplit('.', 1)[0]}.1"
    port = ports.free_port()
    try:
        dual = _listen("::", port, socket.AF_INET6)
    except OSError as exc:
        pytest.skip(f"cannot listen on [::]: {exc}")
    with dual:
        assert contract_port_holders([ours], [port]) == {port: f"[::]:{port}"}
    with _listen("::", port, socket.AF_INET6, v6only=True):
        assert contract_port_holders([ours], [port]) == {}


def test_a_fleet_beside_an_agent_binds_nothing_and_stops_its_thread(monkeypatch) -> None:
    """The agent's listener as /proc/net/tcp would show it (a real one on 0.0.0.0:29101
    would meet the fleets of the tests running beside this one)."""
    monkeypatch.setattr(ports, "_listeners", lambda wanted: [("0.0.0.0", 29101)])
    runner = FleetThread(2, base=loopback_base())
    with pytest.raises(ContractPortHeld, match="agent contract port 29101 is taken here"):
        runner.start()
    assert not runner.thread.is_alive()
    assert all(port.server is None for node in runner.nodes for port in node.ports.values())

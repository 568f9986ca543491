"""`python -m testkit.simfleet`: serve a fleet, register it with a real master, fail clearly."""

from __future__ import annotations

import subprocess
import urllib.request

import pytest

from healthcheck.sweep import run_sweep
from inventory.models import Node
from testkit.ports import check_contract_ports
from testkit.simfleet import hostname_for, loopback_base, node_addresses, pick
from tests.healthcheck.conftest import PYTHON, REPO, wait_ready


@pytest.mark.django_db(transaction=True)
def test_it_serves_and_registers_nodes_the_sweep_then_judges(
    live_server, settings, processes, fast_probes, sd_dir, sweep_redis
):
    settings.JOIN_TOKEN = "join-secret"
    base = loopback_base()
    check_contract_ports(node_addresses(4, base))  # not beside an agent's (a skip)
    fleet_proc = processes.start(
        "simfleet",
        [PYTHON, "-m", "testkit.simfleet", "--nodes", "4", "--base", base,
         "--register", live_server.url, "--token", "join-secret", "--refuse", "0.25"],
        env=None,
    )  # fmt: skip
    wait_ready(fleet_proc)
    assert "registered 4 of 4 nodes" in fleet_proc.log_path.read_text()

    addresses = node_addresses(4, base)
    nodes = {n.ip: n for n in Node.objects.all()}
    assert set(nodes) == set(addresses)
    assert nodes[addresses[0]].hostname == hostname_for(addresses[0])
    assert nodes[addresses[0]].exporters == {"sys-exporter": 29101, "nic-exporter": 29500}
    with urllib.request.urlopen(f"http://{addresses[1]}:29101/metrics", timeout=2) as page:
        assert b"node_load1" in page.read()

    run_sweep()
    refused = {addresses[i] for i in pick(4, 0.25, 2 / 3)}
    statuses = dict(Node.objects.values_list("ip", "status"))
    assert {ip for ip, status in statuses.items() if status == "offline"} == refused


@pytest.mark.django_db(transaction=True)
def test_a_second_run_reregisters_the_same_rows_from_each_nodes_own_address(live_server):
    base = loopback_base()
    check_contract_ports(node_addresses(3, base))
    for run in range(2):
        done = subprocess.run(
            [PYTHON, "-c", (
                "import asyncio, sys\n"
                "from testkit.simfleet import SimFleet, register_fleet\n"
                "async def main():\n"
                f"    fleet = SimFleet(3, base={base!r})\n"
                "    await fleet.start()\n"
                f"    done, errors = await register_fleet(fleet, {live_server.url!r})\n"
                "    await fleet.stop()\n"
                "    print(done, errors)\n"
                "asyncio.run(main())\n"
            )],
            cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.stdout.strip() == "3 []", (run, done.stdout, done.stderr)
    assert sorted(Node.objects.values_list("ip", flat=True)) == sorted(node_addresses(3, base))


def test_a_wrong_token_is_reported_with_the_next_step(live_server, settings, tmp_path):
    settings.JOIN_TOKEN = "right"
    base = loopback_base()
    check_contract_ports(node_addresses(1, base))
    done = subprocess.run(
        [PYTHON, "-m", "testkit.simfleet", "--nodes", "1", "--base", base,
         "--register", live_server.url, "--token", "wrong"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert "--token" in done.stderr and "HTTP 401" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_base_outside_loopback_is_refused():
    done = subprocess.run(
        [PYTHON, "-m", "testkit.simfleet", "--nodes", "1", "--base", "10.0.0.0"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "not a loopback address" in done.stderr

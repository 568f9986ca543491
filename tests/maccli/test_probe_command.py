"""`mac probe <agent>`: the master's probe and diagnosis, run by `mac`, against real servers.

The nodes are a simulated fleet on loopback addresses private to this run (one that
answers, one whose services refuse, one whose sys-exporter drops or swallows
connections while the host-network nic-exporter answers: the ip_forward pattern). As
root, the network-namespace reproduction of ip_forward = 0 is probed too. `mac` runs
without DJANGO_SETTINGS_MODULE: the probe and the diagnosis need no Django settings.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testkit.simfleet import FleetThread, Mode, loopback_base

REPO = Path(__file__).resolve().parents[2]
SYSCTL_FIX = "sudo sysctl -w net.ipv4.ip_forward=1"


@pytest.fixture
def fleet():
    with FleetThread(4, base=loopback_base()) as running:
        running.set_node_mode(1, Mode.REFUSE)
        running.set_mode(2, "sys-exporter", Mode.BLACKHOLE)
        running.set_mode(3, "sys-exporter", Mode.HANG)
        yield running


def probe(mac_env, *args: str, netns: str = "") -> subprocess.CompletedProcess:
    env = {k: v for k, v in mac_env.env.items() if k != "DJANGO_SETTINGS_MODULE"}
    prefix = ["ip", "netns", "exec", netns] if netns else []
    return subprocess.run(
        [*prefix, sys.executable, "-m", "maccli.main", "probe", *args],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=60, check=False,
    )  # fmt: skip


def rows(stdout: str) -> dict[str, list[str]]:
    lines = stdout.splitlines()
    assert lines[0].split() == ["SERVICE", "PORT", "NETWORK", "URL", "OUTCOME", "TIME"]
    return {line.split()[0]: line.split() for line in lines[1:9]}


def test_an_answering_node_is_online(mac_env, fleet):
    ip = fleet.nodes[0].ip
    done = probe(mac_env, ip, "--timeout", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    table = rows(done.stdout)
    assert table["sys-exporter"][:5] == [
        "sys-exporter", "29101", "bridge", f"http://{ip}:29101/metrics", "ok",
    ]  # fmt: skip
    assert table["nic-exporter"][2:5] == ["host", f"http://{ip}:29500/metrics", "ok"]
    assert table["bmc-agent"][4] == "refused"  # the simulated node runs two services
    assert table["mango-sdk-agent"][3] == f"http://{ip}:28000/docs"
    assert table["sys-exporter"][-1] == "ms"
    assert f"sys-exporter answers: the master marks {ip} Online." in done.stdout
    assert "Diagnosis" not in done.stdout
    assert "Traceback" not in done.stderr


def test_a_refusing_node_has_its_service_down(mac_env, fleet):
    ip = fleet.nodes[1].ip
    done = probe(mac_env, ip, "--timeout", "1")
    assert done.returncode == 1
    assert {row[4] for row in rows(done.stdout).values()} == {"refused"}
    assert f"does not answer: the master marks {ip} Offline." in done.stdout
    assert "Diagnosis: the exporter service is down." in done.stdout
    assert "mac restart agent" in done.stdout


@pytest.mark.parametrize("node", [2, 3], ids=["blackholed", "hanging"])
def test_bridge_timing_out_while_nic_answers_is_ip_forwarding(mac_env, fleet, node):
    ip = fleet.nodes[node].ip
    started = time.monotonic()
    done = probe(mac_env, ip, "--timeout", "0.5")
    assert time.monotonic() - started < 10
    assert done.returncode == 1, done.stdout + done.stderr
    table = rows(done.stdout)
    assert table["sys-exporter"][4:] == ["timeout", "500", "ms"]
    assert table["nic-exporter"][4] == "ok"
    assert "Diagnosis: IPv4 forwarding is off on the agent." in done.stdout
    # The services that refuse do not run there; the master would not probe them.
    assert "Not counted in the diagnosis" in done.stdout and "bmc-agent" in done.stdout
    assert f"  {SYSCTL_FIX}" in done.stdout.splitlines()
    assert "/etc/sysctl.d/99-mac-ipforward.conf" in done.stdout
    assert "Traceback" not in done.stderr


def test_json_has_every_service_and_the_diagnosis(mac_env, fleet):
    online = probe(mac_env, fleet.nodes[0].ip, "--json", "--timeout", "1")
    assert online.returncode == 0
    body = json.loads(online.stdout)
    assert set(body) == {
        "address", "ip", "timeout", "network", "network_source", "registered", "online",
        "results", "judged_on", "diagnosis", "diagnosis_if_host",
    }  # fmt: skip
    assert (body["network"], body["network_source"], body["registered"]) == ("", "", None)
    assert body["diagnosis_if_host"] is None  # online: no other reading
    assert body["online"] is True and body["timeout"] == 1.0
    assert body["diagnosis"] == {"code": "", "label": "", "meaning": "", "fix": ""}
    assert len(body["results"]) == 8
    first = body["results"][0]
    assert set(first) == {
        "service", "port", "network", "url", "outcome", "words", "http_status", "detail", "ms",
    }  # fmt: skip
    assert (first["service"], first["outcome"], first["http_status"]) == ("sys-exporter", "ok", 200)

    offline = probe(mac_env, fleet.nodes[2].ip, "--json", "--timeout", "0.5")
    assert offline.returncode == 1
    body = json.loads(offline.stdout)
    assert body["online"] is False
    assert body["judged_on"] == ["nic-exporter", "sys-exporter"]
    assert body["diagnosis"]["code"] == "ip_forward_off"
    assert body["diagnosis"]["label"] == "IPv4 forwarding is off on the agent"
    assert SYSCTL_FIX in body["diagnosis"]["fix"]


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("http://10.0.0.5/", "is not an address or host name (no scheme, port or path)"),
        ("10.0.0.5:29101", "is not an address or host name (no scheme, port or path)"),
        ("not a host", "is not an address or host name"),
        ("gpu_07", "is not an address or host name"),
    ],
)
def test_a_non_address_is_refused(mac_env, target, says):
    done = probe(mac_env, target)
    assert done.returncode == 2
    assert says in done.stderr
    assert "mac probe 10.0.0.17" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_a_timeout_out_of_range_is_refused(mac_env):
    done = probe(mac_env, "127.0.0.1", "--timeout", "0")
    assert done.returncode == 2 and "--timeout 0 is out of range" in done.stderr


def test_names_and_bracketed_addresses_resolve():
    from maccli.probe import resolve

    assert resolve("localhost") in {"127.0.0.1", "::1"}
    assert resolve("[::1]") == "::1"
    assert resolve(" 10.0.0.17 ") == "10.0.0.17"


def test_with_network_host_the_forwarding_pattern_is_a_blocked_port(mac_env, fleet):
    ip = fleet.nodes[2].ip  # 29101 black-holed, 29500 answers
    done = probe(mac_env, ip, "--timeout", "0.5", "--network", "host")
    assert done.returncode == 1, done.stdout + done.stderr
    table = rows(done.stdout)
    assert {row[2] for row in table.values()} == {"host"}  # every service on the host
    assert "Network mode: host (--network)." in done.stdout
    assert "Diagnosis: sys-exporter hangs or a host firewall drops its port." in done.stdout
    assert SYSCTL_FIX not in done.stdout

    bridge = probe(mac_env, ip, "--json", "--timeout", "0.5", "--network", "bridge")
    body = json.loads(bridge.stdout)
    assert (body["network"], body["diagnosis"]["code"]) == ("bridge", "ip_forward_off")


def test_without_network_an_unknown_mode_is_judged_as_before_and_says_so(mac_env, fleet):
    ip = fleet.nodes[2].ip
    done = probe(mac_env, ip, "--timeout", "0.5")
    assert "Network mode: unknown: the master may judge differently" in done.stdout
    # Where the registered mode is read, and how to give it.
    assert f"agent_network in GET /api/v1/nodes/?ip={ip}" in done.stdout
    assert "give it with --network host|bridge." in done.stdout
    # Or let mac ask the master with an API token.
    assert "mac env set MAC_API_TOKEN=<token>" in " ".join(done.stdout.split())
    # A host-mode node would be judged otherwise by the master: no claim that it agrees.
    assert "as the master does" not in done.stdout
    assert "Diagnosis: IPv4 forwarding is off on the agent." in done.stdout
    # The reading of the same probes for a host-mode node (new installs' default) is given too.
    assert f"If {ip} runs in host mode (the default of new installs), the diagnosis is " in (
        " ".join(done.stdout.split())
    )
    assert "instead: sys-exporter hangs or a host firewall drops its port." in " ".join(
        done.stdout.split()
    )
    body = json.loads(probe(mac_env, ip, "--json", "--timeout", "0.5").stdout)
    assert body["diagnosis"]["code"] == "ip_forward_off"
    assert body["diagnosis_if_host"]["code"] == "port_blocked"


def test_a_bad_network_names_the_allowed_values(mac_env):
    done = probe(mac_env, "127.0.0.1", "--network", "nat")
    assert done.returncode == 2
    assert "invalid choice: 'nat' (choose from 'host', 'bridge')" in done.stderr


@pytest.mark.django_db(transaction=True)
def test_a_node_probing_itself_asks_its_master_for_its_mode(mac_env, fleet, live_master):
    from testkit.factories import make_node

    ip = fleet.nodes[2].ip
    make_node(f"probe-self-{os.getpid()}", ip, key="k" * 43, agent_network="host")
    mac_env.env.update(
        {
            "MASTER_IP": "127.0.0.1",
            "MAC_MASTER_PORT": str(live_master.port),
            "MAC_NODE_KEY": "k" * 43,
        }
    )
    done = probe(mac_env, ip, "--json", "--timeout", "0.5")
    body = json.loads(done.stdout)
    assert body["network"] == "host"
    assert body["network_source"] == "registered with master 127.0.0.1"
    assert body["diagnosis"]["code"] == "port_blocked"
    # Another node's address: the master's answer is about this node, so it is not used.
    other = json.loads(probe(mac_env, fleet.nodes[3].ip, "--json", "--timeout", "0.5").stdout)
    assert other["network"] == "" and other["diagnosis"]["code"] == "ip_forward_off"


def api_token(django_user_model) -> str:
    from rest_framework.authtoken.models import Token

    user = django_user_model.objects.create_user(f"probe-reader-{os.getpid()}")
    return Token.objects.create(user=user).key


def ask(mac_env, live_master, token: str) -> None:
    """mac on the master's host (no node key): the inventory read with MAC_API_TOKEN."""
    mac_env.env.update(
        {"MASTER_IP": "127.0.0.1", "MAC_MASTER_PORT": str(live_master.port), "MAC_API_TOKEN": token}
    )


@pytest.mark.django_db(transaction=True)
def test_another_node_is_judged_in_the_mode_it_registered_with_an_api_token(
    mac_env, fleet, live_master, django_user_model
):
    from testkit.factories import make_node

    ip = fleet.nodes[2].ip  # 29101 black-holed, 29500 answers
    make_node(f"probe-other-{os.getpid()}", ip, agent_network="host")
    # ?search= would find these too (the address is in theirs), and they come first.
    make_node(f"a-probe-decoy-{os.getpid()}", f"{ip}0", agent_network="bridge")
    make_node(f"a-probe-decoy2-{os.getpid()}", f"{ip}1", agent_network="bridge")
    ask(mac_env, live_master, api_token(django_user_model))

    done = probe(mac_env, ip, "--timeout", "0.5")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Network mode: host (registered with master 127.0.0.1 via MAC_API_TOKEN)." in (
        " ".join(done.stdout.split())
    )
    assert "unknown" not in done.stdout and "Warning" not in done.stderr
    assert "Diagnosis: sys-exporter hangs or a host firewall drops its port." in done.stdout
    assert "runs in host mode" not in done.stdout  # the mode is known: no other reading

    body = json.loads(probe(mac_env, ip, "--json", "--timeout", "0.5").stdout)
    assert body["network"] == "host" and body["registered"] is True
    assert body["network_source"] == "registered with master 127.0.0.1 via MAC_API_TOKEN"
    assert body["diagnosis"]["code"] == "port_blocked" and body["diagnosis_if_host"] is None


@pytest.mark.django_db(transaction=True)
def test_a_token_the_master_refuses_is_a_warning_and_the_probe_still_runs(
    mac_env, fleet, live_master
):
    from testkit.factories import make_node

    ip = fleet.nodes[2].ip
    make_node(f"probe-refused-{os.getpid()}", ip, agent_network="host")
    ask(mac_env, live_master, "0" * 40)

    done = probe(mac_env, ip, "--timeout", "0.5")
    assert done.returncode == 1, done.stdout + done.stderr
    warning = " ".join(done.stderr.split())
    assert "Warning: master 127.0.0.1 refuses MAC_API_TOKEN (HTTP 401" in warning
    assert "python manage.py drf_create_token <username>, docs/api.md" in warning
    assert "Traceback" not in done.stderr
    assert "Network mode: unknown" in done.stdout
    assert "Diagnosis: IPv4 forwarding is off on the agent." in done.stdout

    body = json.loads(probe(mac_env, ip, "--json", "--timeout", "0.5").stdout)
    assert (body["network"], body["network_source"], body["registered"]) == ("", "", None)


@pytest.mark.django_db(transaction=True)
def test_an_address_the_master_does_not_know_is_said_to_be_outside_the_inventory(
    mac_env, fleet, live_master, django_user_model
):
    ip = fleet.nodes[0].ip  # answers, but never registered
    ask(mac_env, live_master, api_token(django_user_model))

    done = probe(mac_env, ip, "--timeout", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    said = " ".join(done.stdout.split())
    assert f"{ip} is not in the inventory of master 127.0.0.1: the master does not probe it" in said
    assert f"sys-exporter answers: once registered, the master marks {ip} Online." in said
    assert "Network mode: unknown" not in said and "Warning" not in done.stderr

    body = json.loads(probe(mac_env, ip, "--json", "--timeout", "1").stdout)
    assert (body["network"], body["network_source"], body["registered"]) == ("", "", False)


def test_a_master_that_does_not_answer_is_a_warning_and_the_probe_still_runs(mac_env, fleet):
    from testkit.ports import free_port

    mac_env.env.update(
        {"MASTER_IP": "127.0.0.1", "MAC_MASTER_PORT": str(free_port()), "MAC_API_TOKEN": "t" * 40}
    )
    done = probe(mac_env, fleet.nodes[2].ip, "--timeout", "0.5")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "cannot read the network mode" in done.stderr and "connection refused" in done.stderr
    assert "Traceback" not in done.stderr
    assert "Diagnosis: IPv4 forwarding is off on the agent." in done.stdout


# --- the network-namespace reproduction (root) ---------------------------------------------


@pytest.mark.netns
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
@pytest.mark.skipif(
    not (shutil.which("ip") and shutil.which("iptables") and shutil.which("curl")),
    reason="iproute2, iptables or curl missing",
)
def test_probe_from_the_master_namespace_sees_forwarding_off(mac_env, tmp_path):
    from testkit.netns import AGENT_IP, forwarding_off_lab, real_exporters, sh

    with forwarding_off_lab("p") as names, real_exporters(names, tmp_path):
        off = probe(mac_env, AGENT_IP, "--timeout", "1", netns=names["master"])
        assert off.returncode == 1, off.stdout + off.stderr
        table = rows(off.stdout)
        assert table["sys-exporter"][4] == "timeout" and table["nic-exporter"][4] == "ok"
        assert "Diagnosis: IPv4 forwarding is off on the agent." in off.stdout
        assert SYSCTL_FIX in off.stdout

        sh("ip", "netns", "exec", names["agent"], "sysctl", "-qw", "net.ipv4.ip_forward=1")
        on = probe(mac_env, AGENT_IP, "--timeout", "1", netns=names["master"])
        assert on.returncode == 0, on.stdout + on.stderr
        assert f"the master marks {AGENT_IP} Online" in on.stdout

"""The ip_forward watch for real: a kernel flag flipped in a namespace, a master, a Prometheus.

sys-manager runs in a network namespace of its own (testkit.hostcut), reading that
namespace's net.ipv4.ip_forward. The master (gunicorn on the test database) and
Prometheus (Debian's, with MAC's alert rules, scraping sys-manager through the targets
file the sweep writes) run here, across the lab's veth. Flipping the flag must raise
sys-manager's counter, put the reset into the node's history on the master (also when
the master was unreachable at the time: the link is cut, then restored) and fire
MacIpForwardReset. Root only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from inventory.choices import EventKind, NodeStatus
from inventory.models import Node, NodeEvent
from scraping.promconfig import ALERT_RULES, render_prometheus_config
from scraping.targets import write_targets
from testkit.hostcut import cut_lab
from testkit.netns import REPO, sh
from testkit.ports import free_port
from testkit.processes import stop_process
from testkit.waiting import wait_for
from tests.conftest import netns_marks

pytestmark = [
    *netns_marks("ip", "iptables", "prometheus"),
    pytest.mark.prometheus,
    pytest.mark.django_db(transaction=True),
]
KEY = "ipforward-watch-node-key"
SYS_MANAGER_PORT = 29103


def get_json(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return json.load(response)
    except (OSError, ValueError):
        return None


def get_text(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return response.read().decode()
    except OSError:
        return ""


def sample(metrics: str, name: str) -> float | None:
    for line in metrics.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


class Children:
    """Processes this module starts, stopped by their own pid."""

    def __init__(self) -> None:
        self.running: list[subprocess.Popen] = []

    def start(self, args: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
        with log.open("wb") as handle:
            child = subprocess.Popen(
                args, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=REPO
            )
        self.running.append(child)
        return child

    def stop(self, child: subprocess.Popen) -> None:
        stop_process(child)
        self.running.remove(child)

    def stop_all(self) -> None:
        for child in list(self.running):
            self.stop(child)


@pytest.fixture(scope="module")
def lab():
    with cut_lab("w") as lab:
        yield lab


@pytest.fixture(scope="module")
def master(lab, django_db_setup, tmp_path_factory):
    """A master on the lab's near end: gunicorn + uvicorn on the test database."""
    from tests.conftest import live_database_url

    port = free_port()
    data = tmp_path_factory.mktemp("watch-master")
    env = {
        **os.environ,
        "DATABASE_URL": live_database_url(),
        "MAC_DATA_DIR": str(data),
        "MAC_PROBE_INTERVAL": "3600",
        "DJANGO_SETTINGS_MODULE": "macweb.settings",
    }
    children = Children()
    log = data / "api-server.log"
    children.start(
        [sys.executable, "-m", "gunicorn", "macweb.asgi:application", "-c",
         "python:macweb.gunicorn_conf", "--bind", f"{lab.master_ip}:{port}", "--workers", "1"],
        log, env,
    )  # fmt: skip
    url = f"http://{lab.master_ip}:{port}"
    wait_for(lambda: get_json(f"{url}/health"), timeout=60, what="the master")
    yield url
    children.stop_all()


@pytest.fixture(scope="module")
def prometheus(lab, master, tmp_path_factory):
    """Debian's Prometheus with MAC's rules, scraping and evaluating every second."""
    work = tmp_path_factory.mktemp("watch-prometheus")
    config = render_prometheus_config(
        str(work / "targets"),
        [master.removeprefix("http://")],
        scrape_interval="1s",
        scrape_timeout="1s",
        sd_refresh_interval="1s",
        rule_files=[str(ALERT_RULES)],
    )
    write_targets([], work / "targets")
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    children = Children()
    children.start(
        [shutil.which("prometheus"), f"--config.file={work / 'prometheus.yml'}",
         f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
        work / "prometheus.log",
    )  # fmt: skip
    api = f"http://127.0.0.1:{port}"
    wait_for(lambda: get_text(f"{api}/-/ready"), timeout=30, what="Prometheus")
    yield api, work / "targets"
    children.stop_all()


@pytest.fixture
def node(lab, make_node):
    return make_node(
        f"watch-{os.getpid()}",
        lab.agent_ip,
        key=KEY,
        status=NodeStatus.ONLINE,
        exporters={"sys-manager": SYS_MANAGER_PORT},
        exporter_health={"sys-manager": True},
    )


@pytest.fixture
def sys_manager(lab, master, tmp_path):
    """start(**settings): sys-manager in the lab namespace, registered as `node`."""
    children = Children()
    host, _, port = master.removeprefix("http://").partition(":")
    node_env = tmp_path / "node.env"
    node_env.write_text(f"MASTER_IP={host}\nMAC_MASTER_PORT={port}\nMAC_NODE_KEY={KEY}\n")
    url = f"http://{lab.agent_ip}:{SYS_MANAGER_PORT}/metrics"

    def start(**settings: str) -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MAC_")}
        env.update({"MAC_NODE_ENV_FILE": str(node_env), "MAC_IPFORWARD_INTERVAL": "0.2"})
        env.update(settings)
        children.start(
            lab.exec_args(sys.executable, "-m", "exporters", "sys-manager",
                          "--bind", lab.agent_ip, "--port", str(SYS_MANAGER_PORT)),
            tmp_path / "sys-manager.log", env,
        )  # fmt: skip
        wait_for(lambda: "mac_ipforward_enabled 1.0" in get_text(url), what="sys-manager")
        return url

    sh(*lab.exec_args("sysctl", "-qw", "net.ipv4.ip_forward=1"))
    yield start
    children.stop_all()


def set_forwarding(lab, value: int) -> None:
    sh(*lab.exec_args("sysctl", "-qw", f"net.ipv4.ip_forward={value}"))


def reported(node: Node) -> int:
    events = NodeEvent.objects.filter(node=node, kind=EventKind.IP_FORWARD_RESET)
    return sum(event.data["resets"] for event in events)


def firing(api: str, hostname: str) -> list[dict]:
    alerts = (get_json(f"{api}/api/v1/alerts") or {}).get("data", {}).get("alerts", [])
    return [
        alert
        for alert in alerts
        if alert["labels"].get("alertname") == "MacIpForwardReset"
        and alert["labels"].get("hostname") == hostname
        and alert["state"] == "firing"
    ]


def test_resets_are_counted_reported_after_an_outage_and_alerted(
    lab, prometheus, node, sys_manager
):
    api, targets = prometheus
    metrics_url = sys_manager()
    write_targets([{**node.summary(), "exporters": node.exporters}], targets)
    query = f"{api}/api/v1/query?query=mac_ipforward_resets_total"
    wait_for(
        lambda: (get_json(query) or {}).get("data", {}).get("result"),
        what="Prometheus scraping sys-manager",
    )

    lab.cut()  # the master is unreachable while the flag drops, twice
    try:
        set_forwarding(lab, 0)
        time.sleep(1.5)
        set_forwarding(lab, 1)
        time.sleep(0.6)
        set_forwarding(lab, 0)
        time.sleep(2)
        assert reported(node) == 0
    finally:
        lab.restore()

    metrics = get_text(metrics_url)
    assert sample(metrics, "mac_ipforward_enabled") == 0
    assert sample(metrics, "mac_ipforward_resets_total") == 2
    assert sample(metrics, "mac_ipforward_reasserts_total") == 0
    wait_for(lambda: reported(node) == 2, timeout=90, what="both resets in the node's history")
    event = NodeEvent.objects.filter(node=node, kind=EventKind.IP_FORWARD_RESET).first()
    assert event.actor == "sys-manager" and event.data["reasserted"] is False
    assert "IPv4 forwarding was reset to 0 on the node" in event.message
    assert sample(get_text(metrics_url), "mac_ipforward_reports_pending") == 0

    [alert] = wait_for(lambda: firing(api, node.hostname), what="MacIpForwardReset firing")
    assert alert["labels"]["severity"] == "warning"
    assert alert["labels"]["job"] == "sys-manager"
    assert alert["annotations"]["runbook_url"].startswith("docs/troubleshooting.md#")


def test_reassert_sets_forwarding_back_and_the_master_hears_so(lab, master, node, sys_manager):
    metrics_url = sys_manager(MAC_IPFORWARD_REASSERT="1")
    set_forwarding(lab, 0)
    wait_for(
        lambda: sh(*lab.exec_args("cat", "/proc/sys/net/ipv4/ip_forward")).strip() == "1",
        timeout=10,
        interval=0.1,
        what="forwarding set back to 1",
    )
    metrics = get_text(metrics_url)
    assert sample(metrics, "mac_ipforward_resets_total") == 1
    assert sample(metrics, "mac_ipforward_reasserts_total") == 1
    assert sample(metrics, "mac_ipforward_enabled") == 1
    wait_for(lambda: reported(node) == 1, timeout=30, what="the reset in the node's history")
    event = NodeEvent.objects.get(node=node, kind=EventKind.IP_FORWARD_RESET)
    assert event.data["reasserted"] is True
    assert event.message.endswith("sys-manager set it back to 1")

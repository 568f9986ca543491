"""Checks of MASTER_IP / NODE_NAME placement, the master's reachability and the registration."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.checks import CheckContext, CheckStatus
from node.checks.config import check_master_ip, check_node_name
from node.checks.master import check_master_reachable, check_node_registered
from node.checks.services import service_checks
from node.config import NodeConfig
from testkit.ports import free_port


def _ctx(tmp_path: Path, environ=None, user="", shared=False, **extra) -> CheckContext:
    user_file = tmp_path / "home" / ".mac" / "env"
    user_file.parent.mkdir(parents=True, exist_ok=True)
    user_file.write_text(user)
    base = {
        "MAC_USER_ENV_FILE": str(user_file),
        "MAC_NODE_ENV_FILE": str(tmp_path / "node.env"),
        "MAC_SHARED_HOME": "1" if shared else "0",
    }
    cfg = NodeConfig.load({**base, **(environ or {})})
    return CheckContext(extra={"config": cfg, **extra})


def test_master_ip_missing_fails_with_both_commands(tmp_path):
    result = check_master_ip(_ctx(tmp_path))
    assert result.status == CheckStatus.FAIL
    assert "mac env set MASTER_IP=<master-ip>" in result.fix
    assert "sudo mac env set --node MASTER_IP=<master-ip>" in result.fix


def test_master_ip_in_a_shared_home_warns_with_the_move(tmp_path):
    result = check_master_ip(_ctx(tmp_path, user="MASTER_IP=10.0.0.5\n", shared=True))
    assert result.status == CheckStatus.WARN
    assert result.fix == "sudo mac env set --node MASTER_IP=10.0.0.5\nmac env unset MASTER_IP"


def test_master_ip_in_the_node_file_passes(tmp_path):
    (tmp_path / "node.env").write_text("MASTER_IP=10.0.0.5\n")
    result = check_master_ip(_ctx(tmp_path, shared=True))
    assert result.status == CheckStatus.PASS and "node.env" in result.detail


def test_node_name_pinned_in_a_shared_home_fails(tmp_path):
    result = check_node_name(_ctx(tmp_path, user="NODE_NAME=gpu-01\n", shared=True))
    assert result.status == CheckStatus.FAIL
    assert "mac env unset NODE_NAME" in result.fix


@pytest.mark.parametrize(
    ("environ", "hostname", "needle"),
    [({"NODE_NAME": ""}, "vm", "set but empty"), ({}, "", "host name is empty")],
)
def test_empty_node_name_fails(tmp_path, environ, hostname, needle):
    result = check_node_name(_ctx(tmp_path, environ, hostname=hostname))
    assert result.status == CheckStatus.FAIL and needle in result.detail
    assert result.fix == "mac env set NODE_NAME=<name>"


def test_host_name_passes(tmp_path):
    result = check_node_name(_ctx(tmp_path, hostname="GPU-07"))
    assert result.status == CheckStatus.PASS and result.detail == "gpu-07 (from the host name)"


def test_master_unreachable_fails_with_curl(tmp_path):
    port = free_port()
    ctx = _ctx(tmp_path, {"MASTER_IP": "127.0.0.1", "MAC_MASTER_PORT": str(port)})
    result = check_master_reachable(ctx)
    assert result.status == CheckStatus.FAIL and "no answer: connection refused" in result.detail
    assert result.fix.startswith(f"curl -m5 http://127.0.0.1:{port}/health")
    assert check_node_registered(ctx).status == CheckStatus.FAIL  # no key at all


def test_checks_skip_without_master_ip(tmp_path):
    assert check_master_reachable(_ctx(tmp_path)).status == CheckStatus.SKIP
    assert check_node_registered(_ctx(tmp_path)).status == CheckStatus.SKIP


@pytest.mark.django_db(transaction=True)
def test_master_checks_against_a_real_master(tmp_path, live_master):
    from inventory.services import Registration, register_node

    result = register_node(Registration(hostname="doc-node", ip="127.77.251.1"))
    environ = {"MASTER_IP": "127.0.0.1", "MAC_MASTER_PORT": str(live_master.port)}
    assert check_master_reachable(_ctx(tmp_path, environ)).status == CheckStatus.PASS
    good = check_node_registered(_ctx(tmp_path, {**environ, "MAC_NODE_KEY": result.node_key}))
    assert good.status == CheckStatus.PASS
    assert good.detail.startswith("registered as doc-node: unknown")
    bad = check_node_registered(_ctx(tmp_path, {**environ, "MAC_NODE_KEY": "wrong"}))
    assert bad.status == CheckStatus.FAIL and "HTTP 403" in bad.detail
    assert bad.fix == "sudo mac start agent"


def test_service_checks_report_each_service_with_its_port(tmp_path):
    port = free_port()
    ctx = _ctx(tmp_path, {"MAC_SYS_EXPORTER_PORT": str(port)}, services=["sys-exporter"])
    [result] = service_checks(ctx)
    assert result.id == "service:sys-exporter" and result.status == CheckStatus.FAIL
    assert f"http://127.0.0.1:{port}/metrics" in result.detail
    assert result.fix == "mac restart agent"  # what `mac doctor --fix` runs

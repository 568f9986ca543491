"""What `mac` sends to the master: payload, join token, node key, source address."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contract.master_api import MasterClient, route_address
from maccli.agent.hardware import nics
from maccli.agent.payload import build_payload
from maccli.agent.registration import register_with_retry
from node.config import ConfigError, NodeConfig
from testkit.fakehttp import JsonHandler, serving


class _Recorder(JsonHandler):
    seen: list = []

    def do_POST(self):
        body = self.read_json()
        self.seen.append((self.path, dict(self.headers), body, self.client_address[0]))
        self.send_json(201, {"hostname": body.get("hostname"), "node_key": "k-123"})


@pytest.fixture
def recorder():
    _Recorder.seen = []
    with serving(_Recorder) as url:
        yield url


def test_register_sends_bearer_token_node_key_and_leaves_from_the_reported_address(recorder):
    client = MasterClient(
        recorder,
        join_token="join-abc",
        node_key="key-xyz",
        source_ip="127.0.0.9",
    )
    reply = client.register({"hostname": "gpu-01"})
    assert reply.status == 201 and reply.body["node_key"] == "k-123"
    path, headers, body, source = _Recorder.seen[0]
    assert path == "/api/v1/register"
    assert headers["Authorization"] == "Bearer join-abc"
    assert headers["X-MAC-Node-Key"] == "key-xyz"
    assert body == {"hostname": "gpu-01"}
    assert source == "127.0.0.9"


def test_no_token_no_header(recorder):
    MasterClient(recorder).deregister("gpu-01")
    path, headers, body, _ = _Recorder.seen[0]
    assert path == "/api/v1/deregister" and body == {"hostname": "gpu-01"}
    assert "Authorization" not in headers and "X-MAC-Node-Key" not in headers


class _Busy(JsonHandler):
    """Answers each registration with the next of `answers`: (status, Retry-After)."""

    answers: list = []
    calls = 0

    def do_POST(self):
        self.read_json()
        status, wait = _Busy.answers[min(_Busy.calls, len(_Busy.answers) - 1)]
        _Busy.calls += 1
        body = json.dumps({"detail": "busy"} if status >= 400 else {"hostname": "a"}).encode()
        self.send_response(status)
        if wait is not None:
            self.send_header("Retry-After", wait)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _register_against(answers: list, retry_for: float = 120) -> tuple[int, list[float]]:
    _Busy.answers, _Busy.calls = answers, 0
    waits: list[float] = []
    with serving(_Busy) as url:
        reply = register_with_retry(
            MasterClient(url), {"hostname": "a"}, retry_for=retry_for, sleep=waits.append,
            jitter=lambda: 0.5,
        )  # fmt: skip
    return reply.status, waits


def test_register_retries_when_the_master_says_when_with_jitter():
    status, waits = _register_against([(429, "2"), (503, "5"), (201, None)])
    assert status == 201 and _Busy.calls == 3
    assert waits == [3.0, 7.5]  # Retry-After, plus half again (the jitter drawn)


@pytest.mark.parametrize(
    "answer",
    [(429, "300"), (429, None), (503, "soon"), (400, "1"), (403, None)],
    ids=["longer-than-the-deadline", "no-retry-after", "not-seconds", "400", "403"],
)
def test_register_gives_up_at_once_unless_a_retry_fits(answer):
    status, waits = _register_against([answer, (201, None)])
    assert status == answer[0] and _Busy.calls == 1 and waits == []


def test_route_address_is_the_local_end_towards_the_master():
    assert route_address("127.0.0.1", 28080) == "127.0.0.1"


def _pci_nic(sys_root: Path, pci: str, iface: str, ibdev: str = "", driver: str = "") -> None:
    """A NIC laid out as the kernel does: a PCI device with net/ (and infiniband/) children."""
    device = sys_root / "devices/pci0000:00" / pci
    (device / "net" / iface).mkdir(parents=True)
    (sys_root / "class/net").mkdir(parents=True, exist_ok=True)
    (sys_root / "class/net" / iface).symlink_to(device / "net" / iface)
    (device / "net" / iface / "device").symlink_to(device)
    if driver:
        (sys_root / "bus/pci/drivers" / driver).mkdir(parents=True, exist_ok=True)
        (device / "driver").symlink_to(sys_root / "bus/pci/drivers" / driver)
    if ibdev:
        (device / "infiniband" / ibdev / "ports/1").mkdir(parents=True)
        (sys_root / "class/infiniband").mkdir(parents=True, exist_ok=True)
        (sys_root / "class/infiniband" / ibdev).symlink_to(device / "infiniband" / ibdev)
        (device / "infiniband" / ibdev / "device").symlink_to(device)


def _node_config(tmp_path: Path, root: Path, **settings: str) -> NodeConfig:
    """A node whose sys, proc, dev and etc trees are under `root`."""
    trees = {f"MAC_{tree.upper()}_ROOT": str(root / tree) for tree in ("sys", "proc", "dev", "etc")}
    files = {"MAC_NODE_ENV_FILE": str(tmp_path / "n"), "MAC_USER_ENV_FILE": str(tmp_path / "u")}
    return NodeConfig.load({**trees, **files, **settings})


def test_payload_describes_the_node_from_its_trees(tmp_path: Path):
    sys_root = tmp_path / "sys"
    _pci_nic(sys_root, "0000:17:00.0", "enp1s0", ibdev="mlx5_0", driver="mlx5_core")
    (sys_root / "class/net/enp1s0/address").write_text("0c:42:a1:00:00:01\n")
    (sys_root / "class/net/enp1s0/speed").write_text("200000\n")
    _pci_nic(sys_root, "0000:18:00.0", "eno1")
    (sys_root / "class/net/eno1/speed").write_text("-1\n")  # no link: no speed reported
    (sys_root / "class/net/lo").mkdir(parents=True)
    (sys_root / "class/net/docker0").mkdir(parents=True)  # a bridge: no device behind it
    (tmp_path / "proc/driver/nvidia/gpus/0000:3b:00.0").mkdir(parents=True)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/machine-id").write_text("3d1219c7c4c5404aaa1f6d2a48adfda4\n")
    cfg = _node_config(tmp_path, tmp_path, MAC_LABELS="rack=a1, role=gpu")
    payload = build_payload(cfg, "gpu-01", "10.0.0.17", [], "host")
    assert payload["gpu_vendor"] == "nvidia" and payload["gpu_count"] == 1
    assert payload["agent_network"] == "host"
    assert payload["machine_id"] == "3d1219c7c4c5404aaa1f6d2a48adfda4"
    assert payload["labels"] == {"rack": "a1", "role": "gpu"}
    assert payload["nics"] == [
        {"name": "eno1", "mac": ""},
        {
            "name": "enp1s0",
            "mac": "0c:42:a1:00:00:01",
            "driver": "mlx5_core",
            "ibdev": "mlx5_0",
            "speed_mbps": 200000,
        },
    ]


def test_a_node_without_sysfs_reports_no_nics_and_no_machine_id(tmp_path: Path):
    cfg = _node_config(tmp_path, tmp_path / "nothing")
    assert nics(cfg) == []
    payload = build_payload(cfg, "vm-01", "10.0.0.18", [], "bridge")
    assert payload["agent_network"] == "bridge"
    assert (payload["nics"], payload["machine_id"], payload["gpu_vendor"]) == ([], "", "none")


def test_labels_go_with_the_registration_and_a_bad_one_names_the_item(tmp_path: Path):
    cfg = _node_config(tmp_path, tmp_path / "nothing", MAC_LABELS="rack=a1, role=gpu")
    assert build_payload(cfg, "vm-01", "10.0.0.18", [], "host")["labels"] == {
        "rack": "a1",
        "role": "gpu",
    }
    bad = _node_config(tmp_path, tmp_path / "nothing", MAC_LABELS="rack=a1,gpu")
    with pytest.raises(ConfigError, match="MAC_LABELS='rack=a1,gpu' has 'gpu': write key=value"):
        build_payload(bad, "vm-01", "10.0.0.18", [], "host")

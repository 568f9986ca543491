"""What `mac` sends to the master: payload, join token, node key, source address."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.master_api import MasterClient, route_address
from exporters.nodeconfig import NodeConfig
from maccli.agent import build_payload, list_nics, parse_labels
from maccli.output import CliError
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


def test_route_address_is_the_local_end_towards_the_master():
    assert route_address("127.0.0.1", 28080) == "127.0.0.1"


def test_payload_describes_the_node_from_its_trees(tmp_path: Path):
    sys_root = tmp_path / "sys"
    nic = sys_root / "class/net/enp1s0"
    (sys_root / "bus/pci/drivers/mlx5_core").mkdir(parents=True)
    (nic / "device").mkdir(parents=True)
    (nic / "device/driver").symlink_to(sys_root / "bus/pci/drivers/mlx5_core")
    (nic / "device/infiniband/mlx5_0").mkdir(parents=True)
    (nic / "address").write_text("0c:42:a1:00:00:01\n")
    (nic / "speed").write_text("200000\n")
    (sys_root / "class/net/lo").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/gpus/0000:3b:00.0").mkdir(parents=True)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/machine-id").write_text("3d1219c7c4c5404aaa1f6d2a48adfda4\n")
    cfg = NodeConfig.load(
        {
            "MAC_SYS_ROOT": str(sys_root),
            "MAC_PROC_ROOT": str(tmp_path / "proc"),
            "MAC_DEV_ROOT": str(tmp_path / "dev"),
            "MAC_ETC_ROOT": str(tmp_path / "etc"),
            "MAC_LABELS": "rack=a1, role=gpu",
            "MAC_NODE_ENV_FILE": str(tmp_path / "n"),
            "MAC_USER_ENV_FILE": str(tmp_path / "u"),
        }
    )
    payload = build_payload(cfg, "gpu-01", "10.0.0.17", [])
    assert payload["gpu_vendor"] == "nvidia" and payload["gpu_count"] == 1
    assert payload["machine_id"] == "3d1219c7c4c5404aaa1f6d2a48adfda4"
    assert payload["labels"] == {"rack": "a1", "role": "gpu"}
    assert payload["nics"] == [
        {
            "name": "enp1s0",
            "mac": "0c:42:a1:00:00:01",
            "driver": "mlx5_core",
            "ibdev": "mlx5_0",
            "speed_mbps": 200000,
        }
    ]
    assert list_nics(str(tmp_path / "nothing")) == []


def test_bad_labels_name_the_item():
    with pytest.raises(CliError, match="'rack' is not key=value"):
        parse_labels("rack")

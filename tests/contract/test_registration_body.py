"""registration_body: the one registration body, and the master's serializer accepts it."""

from __future__ import annotations

from contract import __version__
from contract.master_api import registration_body
from inventory.api.serializers import RegistrationSerializer


def test_it_builds_every_field_with_agent_defaults():
    body = registration_body("gpu-01", "10.0.0.17", {"sys-exporter": 29101})
    assert body == {
        "hostname": "gpu-01",
        "ip": "10.0.0.17",
        "gpu_vendor": "none",
        "gpu_count": 0,
        "gpu_model": "",
        "agent_network": "",
        "nics": [],
        "exporters": {"sys-exporter": 29101},
        "agent_version": __version__,
        "machine_id": "",
        "labels": {},
    }


def test_the_master_accepts_a_full_body_unchanged():
    nic = {"name": "enp1s0", "mac": "0c:42:a1:00:00:01", "driver": "mlx5_core", "ibdev": "mlx5_0"}
    body = registration_body(
        "gpu-01",
        "10.0.0.17",
        {"sys-exporter": 29101, "dcgm-exporter": 29150},
        gpu_vendor="nvidia",
        gpu_count=8,
        nics=[{**nic, "speed_mbps": 200000}],
        labels={"rack": "a1"},
        agent_version="bench",
        machine_id="3d1219c7c4c5404aaa1f6d2a48adfda4",
    )
    serializer = RegistrationSerializer(data=body)
    assert serializer.is_valid(), serializer.errors
    assert serializer.validated_data == body


def test_it_copies_what_it_is_given():
    labels = {"rack": "a1"}
    body = registration_body("gpu-01", "10.0.0.17", {}, labels=labels)
    body["labels"]["rack"] = "b2"
    assert labels == {"rack": "a1"}

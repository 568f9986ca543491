"""The GPU verdicts in the API: node list and detail, each GPU's evidence, the filters."""

from __future__ import annotations

import pytest

from contract.verdicts import Evidence, HealthAction, HealthState
from inventory.models import GpuHealth

pytestmark = pytest.mark.django_db

AT = 1_781_000_000.0
XID79 = Evidence(
    "xid", "79", "XID 79: GPU has fallen off the bus", HealthState.UNHEALTHY, HealthAction.REBOOT,
    AT, "3", "GPU-d", "1650924060123",
)  # fmt: skip


@pytest.fixture
def fleet_with_verdicts(make_node):
    sick = make_node(
        "gpu-sick", gpu_vendor="nvidia", gpu_count=8, health_state="unhealthy",
        health_action="reboot", health_evidence=XID79.words() + "; reboot", health_streak=4,
    )  # fmt: skip
    GpuHealth.objects.create(node=sick, index=3, uuid="GPU-d", serial="1650924060123",
                             vendor="nvidia", state="unhealthy", action="reboot",
                             evidence=[XID79.as_dict()])  # fmt: skip
    GpuHealth.objects.create(node=sick, index=0, uuid="GPU-a", vendor="nvidia")
    slow = make_node("gpu-slow", health_state="degraded", health_action="none")
    app = make_node("gpu-app", health_state="healthy", health_action="restart_app")
    fine = make_node("gpu-fine")
    return {"sick": sick, "slow": slow, "app": app, "fine": fine}


def hostnames(answer) -> set[str]:
    return {node["hostname"] for node in answer.json()["results"]}


def test_the_list_carries_every_nodes_verdict(auth_client, fleet_with_verdicts):
    answer = auth_client.get("/api/v1/nodes/", {"search": "gpu-sick"})
    (node,) = answer.json()["results"]
    assert (node["health_state"], node["health_action"]) == ("unhealthy", "reboot")
    assert node["health_evidence"].startswith("GPU 3 (UUID GPU-d, serial 1650924060123) XID 79")
    assert node["health_since"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"health": "unhealthy"}, {"gpu-sick"}),
        ({"health": ["degraded", "unhealthy"]}, {"gpu-sick", "gpu-slow"}),
        ({"needs_action": "true"}, {"gpu-sick"}),  # restart_app is the job owner's
        ({"needs_action": "false"}, {"gpu-slow", "gpu-app", "gpu-fine"}),
    ],
)
def test_the_health_filters(auth_client, fleet_with_verdicts, query, expected):
    assert hostnames(auth_client.get("/api/v1/nodes/", query)) == expected


@pytest.mark.parametrize(
    ("query", "field"), [({"health": "sick"}, "health"), ({"needs_action": "yes"}, "needs_action")]
)
def test_a_bad_health_filter_is_a_400_naming_it(auth_client, fleet_with_verdicts, query, field):
    answer = auth_client.get("/api/v1/nodes/", query)
    assert answer.status_code == 400
    assert field in answer.json()


def test_the_detail_lists_each_gpu_with_its_evidence_and_fix(auth_client, fleet_with_verdicts):
    sick = fleet_with_verdicts["sick"]
    node = auth_client.get(f"/api/v1/nodes/{sick.pk}/").json()
    assert node["health_streak"] == 4
    assert [gpu["index"] for gpu in node["gpus"]] == [0, 3]
    gpu3 = node["gpus"][1]
    assert (gpu3["state"], gpu3["action"], gpu3["serial"]) == (
        "unhealthy",
        "reboot",
        "1650924060123",
    )
    assert "sudo reboot" in gpu3["fix"]
    (item,) = gpu3["evidence"]
    assert item["words"] == XID79.words() and item["at"] == AT and item["code"] == "79"


def test_the_gpus_endpoint(auth_client, fleet_with_verdicts):
    from rest_framework.test import APIClient

    sick = fleet_with_verdicts["sick"]
    gpus = auth_client.get(f"/api/v1/nodes/{sick.pk}/gpus/")
    assert gpus.status_code == 200
    assert [(g["index"], g["state"]) for g in gpus.json()] == [(0, "healthy"), (3, "unhealthy")]
    assert gpus.json()[0]["fix"] == "" and gpus.json()[0]["evidence"] == []
    assert auth_client.get("/api/v1/nodes/999999/gpus/").status_code == 404
    assert APIClient().get(f"/api/v1/nodes/{sick.pk}/gpus/").status_code == 401


def test_forgetting_a_gpus_faults_is_for_staff_and_names_what_is_missing(
    auth_client, staff, fleet_with_verdicts
):
    from rest_framework.test import APIClient

    from inventory.models import GpuFault

    sick = fleet_with_verdicts["sick"]
    GpuFault.objects.create(gpu="1650924060123", fault="xid:79", boot_id="b1", node=sick,
                            hostname=sick.hostname, gpu_index=3)  # fmt: skip
    url = f"/api/v1/nodes/{sick.pk}/gpus/3/faults"
    assert APIClient().delete(url).status_code == 401
    assert auth_client.delete(url).status_code == 403  # an operator, not staff
    assert GpuFault.objects.count() == 1
    api_client = APIClient()
    api_client.force_authenticate(staff)
    missing = api_client.delete(f"/api/v1/nodes/{sick.pk}/gpus/5/faults")
    assert missing.status_code == 404
    assert missing.json() == {"index": ["gpu-sick has no GPU 5 in its verdicts (GPUs: 0, 3)"]}
    assert api_client.delete("/api/v1/nodes/999999/gpus/3/faults").status_code == 404
    assert api_client.get(url).status_code == 405
    done = api_client.delete(url)
    assert done.json()["forgotten"] == 1 and not GpuFault.objects.exists()
    assert api_client.delete(url).json()["forgotten"] == 0  # nothing left: still fine


def test_a_gpus_fix_names_the_gpu_for_the_command_to_take(auth_client, make_node):
    """Copy-paste ready: `mac gpu reset` with the GPU's UUID, not `<gpu>`."""
    node = make_node("gpu-ecc", gpu_vendor="nvidia", health_state="unhealthy",
                     health_action="reset_gpu")  # fmt: skip
    uuid = "GPU-9a41e7b2-dddd-eeee-ffff-111111111111"
    GpuHealth.objects.create(node=node, index=5, uuid=uuid, vendor="nvidia",
                             state="unhealthy", action="reset_gpu")  # fmt: skip
    (gpu,) = auth_client.get(f"/api/v1/nodes/{node.pk}/").json()["gpus"]
    assert f"sudo mac gpu reset {uuid}\n" in gpu["fix"] and "<gpu>" not in gpu["fix"]

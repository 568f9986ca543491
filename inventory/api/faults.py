"""DELETE /api/v1/nodes/<id>/gpus/<index>/faults: staff forget a GPU's fault history.

MAC escalates a fault that comes back after reboots to inspect_hardware (docs/gpu-health.md,
MAC_GPU_FAULT_REBOOTS), counting the history it keeps by the GPU's serial. After a
repair of that same GPU (reseated, its board fixed) the history would keep the node
escalated for MAC_GPU_FAULT_DAYS; this forgets it, with an event in the node's history,
and the next sweep judges the node afresh (inventory.services.changes.forget_gpu_faults).
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.generics import get_object_or_404
from rest_framework.response import Response

from inventory import services
from inventory.api.staff import StaffView, staff_responses
from inventory.models import Node


class ForgottenSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    hostname = serializers.CharField()
    index = serializers.IntegerField(help_text="the GPU's index on the node")
    gpu = serializers.CharField(help_text="the GPU's identity: its serial, else its UUID")
    forgotten = serializers.IntegerField(help_text="the boots of its fault history forgotten")


class GpuFaultsView(StaffView):
    @extend_schema(
        operation_id="gpu_faults_forget",
        summary="Forget a GPU's fault history after a repair (staff)",
        request=None,
        responses=staff_responses(
            ForgottenSerializer, e404='no node has that id, or {"index": ["..."]}'
        ),
    )
    def delete(self, request, pk: int, index: int):
        node = get_object_or_404(Node, pk=pk)
        actor = f"api:{request.user.get_username()}"
        done = services.forget_gpu_faults(node, index, actor=actor)
        if done is None:
            known = sorted(node.gpus.values_list("index", flat=True))
            return Response(
                {"index": [f"{node.hostname} has no GPU {index} in its verdicts (GPUs: "
                           f"{', '.join(map(str, known)) or 'none read yet'})"]},
                status=404,
            )  # fmt: skip
        gpu, forgotten = done
        return Response(
            {"id": node.pk, "hostname": node.hostname, "index": index, "gpu": gpu,
             "forgotten": forgotten}
        )  # fmt: skip

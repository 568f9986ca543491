"""PUT /api/v1/nodes/<id>/maintenance: staff switch a node's maintenance flag.

The change goes through inventory.services (an event, the live push, and the
`maintenance_changed` signal after commit, on which the alerting app silences or
unsilences the node in Alertmanager).
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.generics import get_object_or_404
from rest_framework.response import Response

from inventory import services
from inventory.api.serializers import StrictBooleanField
from inventory.api.staff import StaffView, staff_responses
from inventory.models import Node


class MaintenanceSerializer(serializers.Serializer):
    maintenance = StrictBooleanField(
        help_text="true: in maintenance (its alerts are silenced); false: back in service."
    )


class MaintenanceResultSerializer(MaintenanceSerializer):
    id = serializers.IntegerField()
    hostname = serializers.CharField()
    changed = serializers.BooleanField(help_text="false when it already had that value")
    deferred = serializers.CharField(
        help_text="what could not follow the change at once and is left to a poll (the "
        'silence, when the broker does not answer), in words; "" when nothing was'
    )


class NodeMaintenanceView(StaffView):
    @extend_schema(
        operation_id="node_maintenance",
        summary="Put a node in maintenance, or take it out (staff)",
        request=MaintenanceSerializer,
        responses=staff_responses(
            MaintenanceResultSerializer,
            e400='{"maintenance": ["..."]}',
            e404="no node has that id",
        ),
    )
    def put(self, request, pk: int):
        body = MaintenanceSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        node = get_object_or_404(Node, pk=pk)
        on = body.validated_data["maintenance"]
        deferred: list[str] = []
        actor = f"api:{request.user.get_username()}"
        changed = services.set_maintenance(node, on, actor=actor, deferred=deferred)
        if not changed and not Node.objects.filter(pk=node.pk).exists():
            # Deleted while this request ran: nothing was switched, and nothing is there.
            raise NotFound("No Node matches the given query.")
        return Response(
            {
                "id": node.pk,
                "hostname": node.hostname,
                "maintenance": on,
                "changed": changed,
                "deferred": "; ".join(deferred),
            }
        )

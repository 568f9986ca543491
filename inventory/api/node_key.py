"""POST /api/v1/nodes/<id>/reset-key: staff forget a node's key, as the admin's action does.

For an agent that lost its key (a re-imaged node, an env file wiped): its next
registration from the node's current address receives a new one. A script or a person
at a shell does it without the admin's pages; the event names the staff user.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.generics import get_object_or_404
from rest_framework.response import Response

from inventory import services
from inventory.api.staff import StaffView, staff_responses
from inventory.models import Node


class KeyResetSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    hostname = serializers.CharField()
    reset = serializers.BooleanField(help_text="always true: the key is forgotten")
    next_step = serializers.CharField(help_text="what to run on the node, in words")


class NodeKeyResetView(StaffView):
    @extend_schema(
        operation_id="node_reset_key",
        summary="Forget a node's key, so that its next registration gets a new one (staff)",
        request=None,
        responses=staff_responses(KeyResetSerializer, e404="no node has that id"),
    )
    def post(self, request, pk: int):
        node = get_object_or_404(Node, pk=pk)
        if not services.reset_node_keys([node], actor=f"api:{request.user.get_username()}"):
            # Deleted while this request ran: no key to forget, and no node.
            raise NotFound("No Node matches the given query.")
        return Response(
            {
                "id": node.pk,
                "hostname": node.hostname,
                "reset": True,
                "next_step": f"run `sudo mac start agent` on {node.hostname}: its "
                f"registration from {node.ip} receives a new key",
            }
        )

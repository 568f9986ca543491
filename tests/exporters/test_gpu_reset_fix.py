"""The reset_gpu fix names the real way to stop MAC's own GPU services for the reset."""

from __future__ import annotations

from pathlib import Path

from contract.verdicts import ACTION_FIXES, HealthAction
from maccli.agent.specs import GPU_SERVICES
from maccli.runtimes.supervisor import Supervisor
from node.config import DEFAULT_STATE_DIR_ROOT

FIX = ACTION_FIXES[HealthAction.RESET_GPU]
# Every agent service that opens the GPUs' library and keeps it open: the GPU exporters,
# and the inventory API once asked (exporters.mango).
HOLDERS = (*GPU_SERVICES.values(), "mango-sdk-agent")


def test_the_reset_fix_stops_macs_gpu_services_under_either_runtime():
    """nvidia-smi -r refuses while any process holds the GPU, MAC's exporter included."""
    for service in HOLDERS:
        assert f"mac-{service}" in FIX, service  # the Docker runtime's container
        assert f" {service}" in FIX, service  # the process runtime's program
    conf = Supervisor(Path(DEFAULT_STATE_DIR_ROOT) / "agent").conf
    assert f"supervisorctl -c {conf} stop" in FIX


def test_the_reset_fix_brings_the_services_back_without_deregistering():
    assert "mac restart agent" in FIX
    assert "Not mac stop agent: it deregisters the node" in FIX

"""The reset_gpu fix names `mac gpu reset`, and the real way to do it by hand."""

from __future__ import annotations

from pathlib import Path

from contract.verdicts import ACTION_FIXES, HealthAction
from maccli.agent.bundled import BUNDLE_NAME
from maccli.agent.specs import GPU_SERVICES
from maccli.gpureset import INVENTORY_SERVICE
from maccli.runtimes.supervisor import Supervisor
from node.config import DEFAULT_STATE_DIR_ROOT

FIX = ACTION_FIXES[HealthAction.RESET_GPU]
# Every agent service that opens the GPUs' library and keeps it open: the GPU exporters,
# and the inventory API once asked (exporters.mango).
HOLDERS = (*GPU_SERVICES.values(), INVENTORY_SERVICE)


def test_the_reset_fix_names_the_command_that_does_it_all_first():
    first, _, by_hand = FIX.partition("By hand")
    assert "  sudo mac gpu reset <gpu>   (" in first
    assert "the node stays registered" in first
    assert by_hand  # the manual steps stay, for a mac without the command


def test_the_manual_fix_stops_macs_gpu_services_under_either_runtime():
    """nvidia-smi -r refuses while any process holds the GPU, MAC's exporter included."""
    for service in HOLDERS:
        assert f"mac-{service}" in FIX, service  # the Docker runtime's container
        assert f" {service}" in FIX, service  # the process runtime's program
    conf = Supervisor(Path(DEFAULT_STATE_DIR_ROOT) / "agent").conf
    # The process runtime's default: the Python services as one program.
    assert f"supervisorctl -c {conf} stop {BUNDLE_NAME} " in FIX


def test_the_reset_fix_brings_the_services_back_without_deregistering():
    assert "mac restart agent" in FIX
    assert "Not mac stop agent: it deregisters the node" in FIX

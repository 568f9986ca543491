"""NVIDIA's XID catalog as MAC reads it: each XID's state and action, and who ignores it."""

from __future__ import annotations

import pytest

from contract.verdicts import HealthAction, HealthState
from node.gpu import xid_catalog

H, D, U = HealthState.HEALTHY, HealthState.DEGRADED, HealthState.UNHEALTHY
A = HealthAction


@pytest.mark.parametrize(
    ("xid", "state", "action"),
    [
        (13, H, A.RESTART_APP),  # the user's own bug: not a page
        (31, H, A.RESTART_APP),
        (43, H, A.NONE),
        (45, H, A.NONE),
        (48, U, A.RESET_GPU),  # double-bit ECC
        (63, H, A.NONE),  # a row remapped: what pending remaps say counts instead
        (64, U, A.RESET_GPU),  # remapping failed
        (74, U, A.RESET_GPU),  # NVLink
        (79, U, A.REBOOT),  # fallen off the bus
        (92, H, A.NONE),
        (94, H, A.RESTART_APP),  # contained
        (95, U, A.RESET_GPU),  # uncontained
        (54, U, A.INSPECT_HARDWARE),  # auxiliary power
        (145, D, A.RESET_GPU),  # NVLink5: the error status decides, NVML does not carry it
    ],
)
def test_each_xid_gets_the_catalogs_immediate_action(xid, state, action):
    entry = xid_catalog.lookup(xid)
    assert (entry.state, entry.action) == (state, action)


def test_the_words_are_nvidias_description():
    assert xid_catalog.lookup(79).words() == "XID 79: GPU has fallen off the bus"


def test_an_xid_the_catalog_does_not_list_is_worth_a_look_not_a_drain():
    entry = xid_catalog.lookup(999)
    assert (entry.state, entry.action) == (D, A.NONE)
    assert "not in MAC's XID catalog" in entry.words()


def test_the_application_errors_gpud_and_the_device_plugin_ignore_are_marked():
    assert xid_catalog.lookup(13).ignored_by == ("GPUd", "k8s-device-plugin")
    assert xid_catalog.lookup(43).ignored_by == ("GPUd", "k8s-device-plugin")
    assert xid_catalog.lookup(79).ignored_by == ()
    # The device plugin ignores 68 and 109; GPUd counts 68 fatal.
    assert xid_catalog.lookup(68).ignored_by == ("k8s-device-plugin",)
    assert xid_catalog.lookup(109).ignored_by == ("GPUd", "k8s-device-plugin")


def test_ignorable_xids_are_those_judged_healthy():
    ignorable = xid_catalog.ignorable_xids()
    assert {13, 31, 43, 45, 63, 92, 94} <= set(ignorable)
    assert not {48, 64, 74, 79, 95} & set(ignorable)


def test_every_entry_resolves_to_a_state_and_action():
    for entry in xid_catalog.CATALOG.values():
        assert isinstance(entry.state, HealthState) and isinstance(entry.action, HealthAction)
        assert entry.description and entry.description != "Unused"


def test_the_docs_table_is_the_catalog():
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[3] / "docs" / "gpu-health.md").read_text()
    start = docs.index("-->\n", docs.index("<!-- xid-table")) + len("-->\n")
    shown = docs[start : docs.index("\n<!-- /xid-table -->")]
    assert shown == xid_catalog.markdown_table(), (
        "docs/gpu-health.md's XID table is stale: paste `python -m node.gpu.xid_catalog` in it"
    )

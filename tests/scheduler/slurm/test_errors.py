"""Each failure Slurm's tools print (captured in tests/fixtures/slurm/errors.json) gets its type."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.slurm.errors import (
    SlurmCommandRefused,
    SlurmCredentialRefused,
    SlurmPermissionDenied,
    SlurmUnknownNode,
    SlurmUnreachable,
    classify_failure,
)

CAPTURED = json.loads(
    (Path(__file__).resolve().parents[2] / "fixtures" / "slurm" / "errors.json").read_text()
)


@pytest.mark.parametrize(
    ("case", "kind", "words"),
    [
        ("unknown_node", SlurmUnknownNode, "Invalid node name specified"),
        ("resume_idle_node", SlurmCommandRefused, "Invalid node state specified"),
        ("drain_without_reason", SlurmCommandRefused, "You must specify a reason"),
        ("drain_as_nobody", SlurmPermissionDenied, "Invalid user id"),
        ("reboot_as_nobody", SlurmPermissionDenied, "Permission denied"),
        ("update_controller_down", SlurmUnreachable, "Unable to contact slurm controller"),
        ("sacct_slurmdbd_down", SlurmUnreachable, "Problem talking to the database"),
    ],
)
def test_each_captured_failure_gets_its_type_and_keeps_slurms_words(case, kind, words):
    run = CAPTURED[case]
    error = classify_failure(run["argv"], run["returncode"], run["stderr"] + run["stdout"])
    assert type(error) is kind
    assert words in str(error)
    assert str(error).startswith(" ".join(run["argv"]))
    assert error.command == tuple(run["argv"])


def test_a_permission_refusal_says_how_to_give_the_right():
    run = CAPTURED["drain_as_nobody"]
    error = classify_failure(run["argv"], run["returncode"], run["stderr"])
    assert isinstance(error, SlurmCommandRefused)  # still a refusal to callers that ask
    assert "adminlevel=Admin" in error.fix and "SlurmUser" in error.fix


def test_a_local_permission_problem_is_not_taken_for_slurms_refusal():
    # The tool could not read its own configuration: not the controller saying no.
    output = 'error: s_p_parse_file: unable to read "/etc/slurm/slurm.conf": Permission denied'
    assert type(classify_failure(("scontrol", "update"), 1, output)) is SlurmCommandRefused


def test_an_unknown_node_is_also_a_refusal():
    """Callers that only tell refused from unreachable still catch it."""
    run = CAPTURED["unknown_node"]
    error = classify_failure(run["argv"], run["returncode"], run["stderr"])
    assert isinstance(error, SlurmCommandRefused)


def test_a_failure_that_prints_nothing_says_its_status():
    error = classify_failure(("scontrol", "update"), 3, "")
    assert "exited with status 3" in str(error)


def test_a_connection_closed_unanswered_is_a_refused_credential_with_its_fix():
    # What 22.05's scontrol says where slurmctld runs but this host's munge key is not
    # the cluster's (measured on the lab: testkit.slurmlab's conf_with_another_munge_key).
    output = "slurm_update error: Zero Bytes were transmitted or received\n"
    error = classify_failure(("scontrol", "update", "NodeName=gpu-01", "State=DRAIN"), 1, output)
    assert type(error) is SlurmCredentialRefused
    assert isinstance(error, SlurmUnreachable)  # still "retry later" to every caller
    assert "Zero Bytes were transmitted or received" in error.detail
    assert error.fix.startswith("slurmctld runs but refused this host's credential")
    assert "munge -n | ssh <controller> unmunge" in error.fix
    assert "/etc/munge/munge.key" in error.fix and "0400" in error.fix


def test_a_controller_that_cannot_be_contacted_stays_plainly_unreachable():
    output = "slurm_load_ctl_conf error: Unable to contact slurm controller (connect failure)\n"
    error = classify_failure(("scontrol", "show", "config"), 1, output)
    assert type(error) is SlurmUnreachable and not error.fix

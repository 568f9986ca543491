"""The drain's settings: one parser each, a bad value named with what to write instead."""

from __future__ import annotations

import pytest

from contract.drainpolicy import (
    DrainBudget,
    DrainMode,
    check_settings,
    parse_drain_budget,
    parse_drain_mode,
    parse_reboot,
    parse_resume_sweeps,
)


@pytest.mark.parametrize(
    ("value", "mode"),
    [(None, DrainMode.OFF), ("", DrainMode.OFF), ("off", DrainMode.OFF),
     ("dry-run", DrainMode.DRY_RUN), (" ON ", DrainMode.ON)],
)  # fmt: skip
def test_the_modes(value, mode):
    assert parse_drain_mode(value) is mode


@pytest.mark.parametrize(
    ("value", "budget"),
    [(None, DrainBudget(share=0.1)), ("10%", DrainBudget(share=0.1)),
     ("2.5 %", DrainBudget(share=0.025)), ("100%", DrainBudget(share=1.0)),
     ("3", DrainBudget(count=3))],
)  # fmt: skip
def test_the_budget_is_a_share_or_a_count(value, budget):
    assert parse_drain_budget(value) == budget


@pytest.mark.parametrize("value", ["0", "0%", "150%", "-1", "ten", "3 nodes", "10 percent"])
def test_a_bad_budget_is_refused_naming_the_setting(value):
    with pytest.raises(ValueError, match=r"MAC_DRAIN_BUDGET='.*': give a share of the fleet"):
        parse_drain_budget(value)


@pytest.mark.parametrize(
    ("parse", "value", "words"),
    [
        (parse_drain_mode, "yes", "MAC_SLURM_DRAIN='yes': use off (the default), dry-run"),
        (parse_resume_sweeps, "0", "MAC_SLURM_RESUME_SWEEPS='0': give a number of sweeps"),
        (parse_reboot, "maybe", "MAC_SLURM_REBOOT='maybe': use on to let MAC reboot"),
    ],
)
def test_other_bad_values_are_refused_naming_the_setting(parse, value, words):
    with pytest.raises(ValueError) as refused:
        parse(value)
    assert str(refused.value).startswith(words)


def test_check_settings_names_the_first_bad_one():
    values = {"MAC_SLURM_DRAIN": "on", "MAC_DRAIN_BUDGET": "0%"}
    with pytest.raises(ValueError, match="MAC_DRAIN_BUDGET='0%'"):
        check_settings(values.get)
    check_settings({"MAC_SLURM_REBOOT": "on", "MAC_SLURM_RESUME_SWEEPS": "5"}.get)


def test_check_settings_reads_the_node_maps_file_where_it_runs(tmp_path):
    """`mac start master` and `mac doctor` run on the host, where MAC_SLURM_NODE_MAP's file
    is: missing there, the start stops (the services' own check lets it pass, as their
    containers may not see the host's file)."""
    gone = {"MAC_SLURM_NODE_MAP": f"@{tmp_path / 'nodemap'}"}
    with pytest.raises(ValueError, match=f"MAC_SLURM_NODE_MAP='@{tmp_path}/nodemap': cannot"):
        check_settings(gone.get)
    (tmp_path / "nodemap").write_text("gpu-01.dc=gpu01  # the first rack\n")
    check_settings(gone.get)

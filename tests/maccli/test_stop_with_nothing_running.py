"""`mac stop agent|master` where nothing of it runs: said so, not "Stopped 8 ..."."""

from __future__ import annotations


def test_stopping_an_agent_that_does_not_run_says_there_was_nothing_to_stop(mac_env):
    mac_env.env["MAC_RUNTIME"] = "process"
    result = mac_env.run("stop", "agent")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "No agent service was running (process runtime): nothing to stop." in lines
    assert not any(line.startswith("Stopped") for line in lines)


def test_stopping_a_master_that_does_not_run_says_there_was_nothing_to_stop(mac_env):
    mac_env.env["MAC_RUNTIME"] = "process"
    result = mac_env.run("stop", "master")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "No master service was running (process runtime): nothing to stop." in lines
    assert not any(line.startswith("Stopped") for line in lines)

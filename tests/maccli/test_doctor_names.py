"""`mac doctor service:<name>`: a name no service has is a usage error, not an empty run.

Run with the mac_env fixture: every file `mac` reads is under tmp_path.
"""

from __future__ import annotations


def test_an_unknown_service_is_refused_with_the_known_ones(mac_env):
    result = mac_env.run("doctor", "service:sys-exportr")
    assert result.returncode == 2, result.stdout
    assert "Error: unknown service 'sys-exportr'." in result.stderr
    assert "service:sys-exporter" in result.stderr and "service:nic-exporter" in result.stderr
    assert "passed" not in result.stdout
    fixing = mac_env.run("doctor", "--fix", "--yes", "service:nope")
    assert fixing.returncode == 2 and "unknown service 'nope'" in fixing.stderr


def test_a_known_service_runs_its_one_check(mac_env):
    result = mac_env.run("doctor", "--json", "service:sys-exporter")
    assert result.returncode in (0, 1), result.stderr
    assert '"id": "service:sys-exporter"' in result.stdout

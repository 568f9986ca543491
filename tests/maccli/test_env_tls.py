"""`mac env set` checks MASTER_URL and MAC_MASTER_CA_SHA256 when they are written."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        (
            "MASTER_URL=10.0.0.5:28443",
            "MASTER_URL='10.0.0.5:28443' is not a usable URL: give http:// or https://"
            "<host>:<port> and no path (e.g. https://10.0.0.5:28443, from the join line",
        ),
        ("MASTER_URL=https://10.0.0.5:28443/api", "'https://10.0.0.5:28443/api' has a path"),
        (
            "MAC_MASTER_CA_SHA256=sha256:abc",
            "MAC_MASTER_CA_SHA256='sha256:abc' is not a CA pin: give the 64 hex digits",
        ),
    ],
)
def test_a_bad_value_is_refused_naming_the_key(mac_env, assignment, message):
    done = mac_env.run("env", "set", assignment)
    assert done.returncode == 1
    assert message in " ".join(done.stderr.split())
    assert not mac_env.user_file.exists() or assignment not in mac_env.user_file.read_text()


def test_the_join_lines_values_are_kept(mac_env):
    pin = "5a071d02233879aed57fe7baca2b1cd23733e46248cc232eddb3f4505cc06ee2"
    for assignment in ("MASTER_URL=https://10.0.0.5:28443", f"MAC_MASTER_CA_SHA256={pin}"):
        assert mac_env.run("env", "set", assignment).returncode == 0
    text = mac_env.user_file.read_text()
    assert "MASTER_URL=https://10.0.0.5:28443" in text and f"MAC_MASTER_CA_SHA256={pin}" in text
    shown = mac_env.run("env", "list")
    assert "MASTER_URL" in shown.stdout

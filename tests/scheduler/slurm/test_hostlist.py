"""Slurm hostlist expressions expand as Slurm's own tools write and read them."""

from __future__ import annotations

import pytest

from scheduler.slurm.hostlist import HostlistError, expand_hostlist


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("node-1", ["node-1"]),
        ("node-[7-8]", ["node-7", "node-8"]),
        ("n[1,3]", ["n1", "n3"]),
        ("gpu[01-03,10]", ["gpu01", "gpu02", "gpu03", "gpu10"]),
        ("a1,b[2-3],c", ["a1", "b2", "b3", "c"]),
        ("rack[1-2]-gpu[1-2]", ["rack1-gpu1", "rack1-gpu2", "rack2-gpu1", "rack2-gpu2"]),
        ("h[098-101]", ["h098", "h099", "h100", "h101"]),
        ("", []),
        ("None assigned", []),
        ("(null)", []),
    ],
)
def test_expressions_expand_in_the_order_written(text, names):
    assert expand_hostlist(text) == names


@pytest.mark.parametrize("text", ["n[1-3", "n1-3]", "n[a-b]", "n[3-1]", "a,,b", "n[]"])
def test_a_malformed_expression_is_an_error_that_quotes_it(text):
    with pytest.raises(HostlistError, match="hostlist"):
        expand_hostlist(text)

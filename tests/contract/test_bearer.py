"""The one bearer-token check: the join token, /metrics and http_sd parse and compare alike."""

from __future__ import annotations

import pytest

from contract.bearer import authorization, bearer_matches, bearer_token


@pytest.mark.parametrize("header", ["Bearer s3cret", "bearer s3cret", "BEARER  s3cret "])
def test_it_matches_the_token_under_any_case_of_the_scheme(header):
    assert bearer_matches(header, "s3cret")


@pytest.mark.parametrize(
    "header", ["", "Bearer", "Bearer ", "Bearer s3cre", "Bearer s3cretx", "Basic s3cret"]
)
def test_it_refuses_anything_else(header):
    assert not bearer_matches(header, "s3cret")


def test_an_unset_token_matches_nothing():
    assert not bearer_matches("Bearer ", "")
    assert not bearer_matches("Bearer x", "")


@pytest.mark.parametrize("header", ["", "Bearer", "Bearer   ", "Basic s3cret", "Token s3cret"])
def test_a_header_without_a_bearer_token_has_none(header):
    """The join token tells a malformed header (None) from a wrong token."""
    assert bearer_token(header) is None


def test_what_the_agent_writes_is_what_the_master_reads():
    assert bearer_token(authorization("s3cret")) == "s3cret"
    assert bearer_matches(authorization("s3cret"), "s3cret")

"""The one bearer-token check that /metrics and http_sd share."""

from __future__ import annotations

import pytest
from django.test import RequestFactory

from healthcheck.bearer import bearer_matches


def request_with(header: str | None):
    headers = {"HTTP_AUTHORIZATION": header} if header is not None else {}
    return RequestFactory().get("/metrics", **headers)


@pytest.mark.parametrize("header", ["Bearer s3cret", "bearer s3cret", "BEARER  s3cret "])
def test_it_matches_the_token_under_any_case_of_the_scheme(header):
    assert bearer_matches(request_with(header), "s3cret")


@pytest.mark.parametrize(
    "header", [None, "", "Bearer", "Bearer ", "Bearer s3cre", "Bearer s3cretx", "Basic s3cret"]
)
def test_it_refuses_anything_else(header):
    assert not bearer_matches(request_with(header), "s3cret")


def test_an_unset_token_matches_nothing():
    assert not bearer_matches(request_with("Bearer "), "")
    assert not bearer_matches(request_with("Bearer x"), "")

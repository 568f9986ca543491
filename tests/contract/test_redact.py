"""URLs and messages shown without the credentials they carry (contract.redact)."""

from __future__ import annotations

import pytest

from contract.redact import HIDDEN, UNREADABLE, redact, url_secrets, url_without_credentials


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://mac:s3cret@redis/2?password=other", "redis://redis/2"),
        ("http://user:pw@[::1]:29093/", "http://[::1]:29093/"),
        ("http://127.0.0.1:29090", "http://127.0.0.1:29090"),
        ("unix://:pw@/run/redis/redis.sock?db=2", "unix:///run/redis/redis.sock"),
        ("not a url", UNREADABLE),
        ("http://[::1", UNREADABLE),
    ],
)
def test_a_url_is_shown_without_user_password_or_query(url, shown):
    assert url_without_credentials(url) == shown


def test_the_secrets_of_a_url_are_found_as_written_and_decoded():
    assert url_secrets("redis://:p%40ss@h:1/0?token=abcd&db=1") == ["p%40ss", "p@ss", "abcd"]
    assert url_secrets("redis://h:1/0") == []


def test_free_text_loses_every_credential_it_carries():
    text = (
        "Error connecting to redis://:hunter22@10.0.0.5:6379/0 (also amqp://guest:guest@q/), "
        "see http://h/x?password=topsecret&db=1; the password hunter22 again"
    )
    shown = redact(text, ["hunter22", "pw"])
    assert "hunter22" not in shown and "guest:" not in shown and "topsecret" not in shown
    assert "redis://10.0.0.5:6379/0" in shown and "amqp://q/" in shown
    assert f"?password={HIDDEN}&db=1" in shown
    assert "the password <hidden> again" in shown
    assert redact("a pw is short", ["pw"]) == "a pw is short"  # too short to look for

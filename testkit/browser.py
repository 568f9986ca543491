"""The steps in a real browser (Playwright's Chromium) that tests and benches share."""

from __future__ import annotations

TEST_USER = ("operator", "operator-pass")  # tests/conftest.py's `user`


def log_in(page, base_url: str, username: str = TEST_USER[0], password: str = TEST_USER[1]):
    """Open the dashboard, meet its login form (as anyone logged out does), log in.

    Returns once the browser is on the fleet page.
    """
    page.goto(f"{base_url}/")
    assert "/accounts/login/" in page.url, f"{page.url}: not sent to the login page"
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")

"""The steps in a real browser (Playwright's Chromium) that tests and benches share."""

from __future__ import annotations

import base64
import contextlib
import re
from collections.abc import Iterator

from contract.pinning import first_certificate, spki_sha256

TEST_USER = ("operator", "operator-pass")  # tests/conftest.py's `user`
# Debian's chromium, never a downloaded browser.
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# What a link that leads nowhere shows: Django's and Go's 404s, Debian's page for a
# server shipped without its web UI, the gate's refusal.
USEFUL_TEXT = 40  # characters: fewer, and the page says next to nothing
DEAD_ENDS = re.compile(
    r"does not include a web application|Page not found|404 page not found|"
    r"is not one of the reads served here|Server Error",
    re.IGNORECASE,
)


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


@contextlib.contextmanager
def chromium_page(timeout_ms: int = 15_000, trusted_ca: bytes | None = None) -> Iterator:
    """A page of a fresh headless Chromium (outside pytest-django's browser fixture).

    `trusted_ca`: a master's CA (PEM) that this browser trusts, as a person who installed
    it would: only a chain that carries that CA's key is accepted; every other TLS error
    still fails the page."""
    from playwright.sync_api import sync_playwright

    args = list(CHROMIUM_ARGS)
    if trusted_ca is not None:
        spki = bytes.fromhex(spki_sha256(first_certificate(trusted_ca)))
        args.append(f"--ignore-certificate-errors-spki-list={base64.b64encode(spki).decode()}")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=args)
        try:
            page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
            page.set_default_timeout(timeout_ms)
            yield page
        finally:
            browser.close()


def nav_links(page) -> list[str]:
    """The targets of the page's MAC navigation bar (the dashboard's, the targets view's)."""
    return page.eval_on_selector_all("header.topbar .nav a", "links => links.map(a => a.href)")


def why_useless(page, url: str) -> str:
    """Open `url` as a person does (redirects followed); "" when it lands on a useful
    page (200, not a login form, not a dead end), else what is wrong with it."""
    # Until the page's own requests are done: some render after load (Swagger UI).
    # What the page failed to fetch, so that an empty page says why.
    failed: list[str] = []

    def note(response) -> None:
        if response.status >= 400:
            failed.append(f"{response.status} {response.url}")

    def lost(request) -> None:
        failed.append(f"failed {request.url}")

    page.on("response", note)
    page.on("requestfailed", lost)
    try:
        answer = page.goto(url, wait_until="networkidle")
        if answer is not None and answer.status == 200:
            # Swagger UI parses its 1.5 MB bundle before it asks for the schema: on a busy
            # machine the network is idle in between, with nothing drawn yet.
            _until_it_says_something(page)
    finally:
        page.remove_listener("response", note)
        page.remove_listener("requestfailed", lost)
    landed = f"{url} landed on {page.url}"
    if answer is not None and answer.status == 503 and page.url.endswith("/health"):
        # /health's own answer while something is wrong: it names what, which is its use.
        return "" if '"status"' in page.inner_text("body") else f"{landed}: 503 without a report"
    if answer is None or answer.status != 200:
        said = page.inner_text("body")[:500] if answer else ""
        return f"{landed} with status {answer.status if answer else 'none'}: {said}"
    if "/accounts/login/" in page.url:
        return f"{landed}: the login form, though logged in"
    text = page.inner_text("body")
    dead = DEAD_ENDS.search(text)
    if dead:
        return f"{landed}: {dead.group(0)!r}"
    if len(text.strip()) < USEFUL_TEXT:
        return f"{landed}: next to nothing on it ({text.strip()!r}; its requests: {failed})"
    return ""


def _until_it_says_something(page, timeout_ms: float = 10_000) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    with contextlib.suppress(PlaywrightTimeout):
        page.wait_for_function(
            f"document.body && document.body.innerText.trim().length >= {USEFUL_TEXT}",
            timeout=timeout_ms,
        )


# The pages people open under the front door's prefixes, beside the printed ones.
MONITORING_PAGES = (
    "/prometheus/",
    "/prometheus/graph",
    "/prometheus/targets",
    "/prometheus/alerts",
    "/prometheus/rules",
    "/alertmanager/",
)


def printed_urls(started: str, *loopback_ports: int) -> tuple[str, list[str]]:
    """(the dashboard's base URL, every URL of it and of 127.0.0.1:`loopback_ports`)
    that `mac start master` printed in `started`."""
    base = re.search(r"Dashboard:\s+(\S+?)/?\s", started)
    assert base, f"no Dashboard line in:\n{started}"
    mine = (base.group(1), *(f"http://127.0.0.1:{port}" for port in loopback_ports))
    urls = re.findall(r"https?://[^\s);,]+", started)
    return base.group(1), sorted({u for u in urls if u.startswith(mine)})


def dead_links(page, started: str, username: str, password: str, *loopback_ports: int) -> dict:
    """Log in as people do, then follow every URL `mac start master` printed, every
    link of the navigation bar and MONITORING_PAGES: {url: why it is no use} of those
    that do not land on a useful page (empty when all do)."""
    base, urls = printed_urls(started, *loopback_ports)
    log_in(page, base, username, password)
    urls += nav_links(page) + [base + path for path in MONITORING_PAGES]
    seen, dead = set(), {}
    while urls:
        url = urls.pop(0)
        if url in seen:
            continue
        seen.add(url)
        why = why_useless(page, url)
        if why:
            dead[url] = why
        elif url.startswith(f"{base}/prometheus/"):
            # The targets view's own pages (scale-out) carry MAC's navigation bar too.
            urls += [link for link in nav_links(page) if link.startswith(f"{base}/prometheus/")]
    return dead

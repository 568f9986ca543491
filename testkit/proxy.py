"""nginx in front of a test's API server, configured exactly as the master's `proxy` service.

`manage.py proxy_config` writes the configuration from the test's environment (its
MAC_API_* limits, its MAC_TRUSTED_PROXIES), and nginx runs in the foreground in the
test's own folder, so tests and benchmarks meet the same serving stack as an operator.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from testkit.processes import stop_process  # noqa: F401 (bench/register.py imports it here)

REPO = Path(__file__).resolve().parents[1]


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next(
        (path for path in ("/usr/sbin/nginx",) if Path(path).exists()), None
    )


def prepare_tls(env: dict[str, str], *names: str) -> str:
    """`manage.py prepare_tls` as the master runs it (MAC_TLS_DIR or MAC_DATA_DIR of `env`);
    the pin it printed."""
    argv = [sys.executable, "-m", "django", "prepare_tls"]
    for name in names:
        argv += ["--name", name]
    done = subprocess.run(
        argv, env=env, cwd=REPO, check=True, capture_output=True, text=True, timeout=120
    )
    return done.stdout.strip().splitlines()[-1].partition("=")[2]


def start_proxy(
    directory: Path,
    env: dict[str, str],
    listen_port: int,
    upstream_port: int,
    tls_port: int | None = None,
    repo: Path = REPO,
) -> subprocess.Popen:
    """nginx on 127.0.0.1:listen_port for the API server on 127.0.0.1:upstream_port, and
    HTTPS on 127.0.0.1:tls_port when given (after prepare_tls).

    `repo` is the checkout whose `manage.py proxy_config` writes the configuration (a
    benchmark's baseline runs another one)."""
    nginx = nginx_binary()
    if nginx is None:
        raise RuntimeError("nginx is not installed (scripts/bootstrap installs Debian's nginx)")
    prefix = directory / "proxy"
    conf = prefix / "nginx.conf"
    tls = ["--tls-listen", f"127.0.0.1:{tls_port}"] if tls_port else []
    subprocess.run(
        [sys.executable, "-m", "django", "proxy_config", "--out", str(conf),
         "--listen", f"127.0.0.1:{listen_port}", "--upstream", f"127.0.0.1:{upstream_port}",
         *tls],
        env=env, cwd=repo, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    log = (directory / "proxy.log").open("ab")
    process = subprocess.Popen(
        [nginx, "-p", str(prefix), "-c", str(conf), "-e", "stderr"],
        stdout=log, stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    log.close()
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", listen_port), timeout=1).close()
            return process
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                tail = (directory / "proxy.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"nginx did not start:\n{tail}") from None
            time.sleep(0.05)

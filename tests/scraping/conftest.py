"""Fixtures of the scraping tests: the sweep's targets folder, its Redis, fast probes and
the child processes (Prometheus) come from the healthcheck tests' fixtures, since the
sweep writes the targets that the scrapers read."""

from tests.healthcheck.conftest import (  # noqa: F401  (fixtures, registered by name)
    fast_probes,
    processes,
    sd_dir,
    sweep_redis,
)

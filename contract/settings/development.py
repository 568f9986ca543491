"""The settings of MAC's own scripts and tests (scripts/, tests/): never a deployed MAC's."""

from __future__ import annotations

from pathlib import Path

from contract.settings.kinds import FilePath, Flag, Integer, Text, Url
from contract.settings.model import Group, Setting, SetWith, Side

DEV = Side.DEVELOPMENT
ENV = SetWith.ENVIRONMENT


def _dev(name: str, kind, default, meaning: str) -> Setting:
    return Setting(name, kind, default, meaning, DEV, set_with=ENV)


DEVELOPMENT = Group(
    "Development and tests",
    (
        _dev(
            "MAC_SIMULATED_FLEET",
            Integer(0, 100000),
            0,
            "`scripts/run` adds this many simulated nodes on loopback addresses",
        ),
        _dev(
            "MAC_SLURM_LAB",
            Flag(),
            False,
            "`scripts/run` starts a Slurm lab beside the simulated fleet (root)",
        ),
        _dev(
            "MAC_TEST_DATABASE_URL",
            Url(("postgres", "postgresql"), host=False),
            "postgres://postgres@127.0.0.1:5432/test",
            "the PostgreSQL server `scripts/test` runs the suite on",
        ),
        _dev(
            "MAC_TEST_DB_NAME",
            Text(),
            None,
            "the test database's name, so that several runs share one server",
        ),
        _dev(
            "MAC_TEST_WORKERS",
            Integer(0, 64),
            3,
            "`scripts/test`'s pytest-xdist workers: the heavy tests, the `mac` command's slow "
            "tests and the Docker tests each on one, the quick ones beside them; 0 runs "
            "everything in one process",
        ),
        _dev(
            "MAC_TEST_REDIS_URL",
            Url(("redis",), host=False),
            "redis://127.0.0.1:6379/9",
            "the Redis database the tests use",
        ),
        _dev(
            "MAC_UPDATE_GOLDEN",
            Flag(),
            False,
            "the exporters' tests write new golden output instead of comparing",
        ),
        _dev(
            "MAC_CAPTURES_DIR",
            FilePath(),
            None,
            "output captured on real nodes, which the captured-hardware tests replay",
        ),
        _dev(
            "MAC_NEED_POSTGRES",
            Flag(),
            True,
            "`scripts/bootstrap` sets up PostgreSQL",
        ),
        _dev(
            "MAC_NEED_MARIADB",
            Flag(),
            True,
            "`scripts/bootstrap` sets up MariaDB (Slurm's accounting in the lab)",
        ),
        _dev(
            "MAC_DEBIAN_SUITE",
            Text(),
            "bookworm",
            "the Debian release `scripts/docker-base` bootstraps",
        ),
        _dev(
            "MAC_DEBIAN_MIRROR",
            Url(),
            None,
            "the Debian mirror `scripts/docker-base` uses (default: apt's own)",
        ),
        _dev(
            "MAC_DOCKER_CACHE",
            FilePath(),
            Path("/var/tmp/mac-docker-cache"),
            "where `scripts/docker-base` keeps the finished file system",
        ),
    ),
)

GROUPS = (DEVELOPMENT,)

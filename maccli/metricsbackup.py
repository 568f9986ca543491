"""`mac backup metrics DIR` / `mac restore metrics DIR`: the store's own backup tools.

Scale-out mode's store (maccli.scaleout) is backed up with vmbackup, from an instant
snapshot the running store takes (`/snapshot/create`), into a folder (`fs://`); a
second backup into the same folder copies only what changed. vmrestore puts a backup
back into the store's folder, which needs the store stopped (`mac stop master`
first). Both print the exact command they run, for a site that wants `s3://` or
another destination by hand.

Under the docker runtime the store's folder is the mac-metrics volume: the same tools
run in a throwaway container of MAC's image with that volume and the folder mounted
(and, for the snapshot, on the master's network, where the store is `store`).
"""

from __future__ import annotations

import shlex
import subprocess
import urllib.request
from pathlib import Path

from maccli import output, scaleout
from maccli.master import ROLE, data_dir
from maccli.output import CliError
from maccli.runtimes import choose_runtime
from maccli.runtimes.docker import DockerRuntime
from node.checks.docker import COMPOSE_PROJECT
from node.config import NodeConfig

BACKUP_MOUNT = "/backup"
STORE_VOLUME = f"{COMPOSE_PROJECT}_{scaleout.STORE_VOLUME}"  # as `docker volume ls` says


def _store(cfg: NodeConfig) -> tuple[str, Path]:
    if not scaleout.shards(cfg):
        raise CliError(
            "mac backup/restore metrics is for scale-out mode's store (MAC_SCRAPE_SHARDS >= 1); "
            "a single Prometheus keeps its data in var/prometheus/data.",
            commands=["mac env set MAC_SCRAPE_SHARDS=1", "mac restart master"],
        )
    if cfg.get("MAC_METRICS_STORE_URL"):
        raise CliError(
            "the store is the site's own (MAC_METRICS_STORE_URL): run vmbackup on its machine.",
        )
    return scaleout.store_url(cfg), scaleout.store_data(data_dir(cfg))


def _in_container(
    cfg: NodeConfig, program: str, folder: Path, *, network: bool
) -> list[str] | None:
    """`docker run` of `program` in MAC's image with the store's volume and `folder`
    mounted, when the master runs under Docker; None under the process runtime."""
    runtime = choose_runtime(cfg, ROLE)
    if not isinstance(runtime, DockerRuntime):
        return None
    argv = ["docker", "run", "--rm"]
    if network:
        argv += ["--network", f"{COMPOSE_PROJECT}_master"]
    return [
        *argv,
        "-v", f"{STORE_VOLUME}:{scaleout.DOCKER_STORE_DATA}",
        "-v", f"{folder}:{BACKUP_MOUNT}",
        "--entrypoint", program, runtime.image,
    ]  # fmt: skip


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=3):  # noqa: S310 (loopback)
            return True
    except OSError:
        return False


def _run(argv: list[str]) -> None:
    output.say("Running: " + shlex.join(argv))
    try:
        result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=3600)
    except FileNotFoundError:
        raise CliError(
            f"{argv[0]} is missing: it comes with Debian's victoria-metrics package.",
            commands=["sudo apt-get install victoria-metrics"],
        ) from None
    if result.returncode != 0:
        last = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise CliError(f"{Path(argv[0]).name} failed: {' '.join(last)}")


def backup(folder: str) -> int:
    cfg = NodeConfig.load()
    store, data = _store(cfg)
    target = Path(folder).expanduser().resolve()
    if not _answers(store):
        raise CliError(
            f"the store at {store} does not answer: a backup is a snapshot of the running store.",
            commands=["mac start master", f"mac backup metrics {target}"],
        )
    target.mkdir(parents=True, exist_ok=True)
    docker = _in_container(cfg, "/usr/bin/vmbackup", target, network=True)
    if docker:
        inside = f"http://store:{store.rsplit(':', 1)[1]}"
        argv = [
            *docker,
            f"-storageDataPath={scaleout.DOCKER_STORE_DATA}",
            f"-snapshot.createURL={inside}/snapshot/create",
            f"-dst=fs://{BACKUP_MOUNT}",
        ]
    else:
        argv = [
            cfg.get("MAC_VMBACKUP_BIN") or "/usr/bin/vmbackup",
            f"-storageDataPath={data}",
            f"-snapshot.createURL={store}/snapshot/create",
            f"-dst=fs://{target}",
        ]
    _run(argv)
    output.ok(f"Backed up the metrics store into {target}.")
    output.say(f"Restore it with: mac stop master && mac restore metrics {target}")
    return 0


def restore(folder: str) -> int:
    cfg = NodeConfig.load()
    store, data = _store(cfg)
    source = Path(folder).expanduser().resolve()
    if not source.is_dir():
        raise CliError(f"{source} is not a folder holding a backup (mac backup metrics DIR).")
    if _answers(store):
        raise CliError(
            f"the store at {store} is running: it must be stopped while its folder is restored.",
            commands=["mac stop master", f"mac restore metrics {source}", "mac start master"],
        )
    docker = _in_container(cfg, "/usr/bin/vmrestore", source, network=False)
    if docker:
        data = Path(STORE_VOLUME)
        argv = [
            *docker,
            f"-src=fs://{BACKUP_MOUNT}",
            f"-storageDataPath={scaleout.DOCKER_STORE_DATA}",
        ]
    else:
        argv = [
            cfg.get("MAC_VMRESTORE_BIN") or "/usr/bin/vmrestore",
            f"-src=fs://{source}",
            f"-storageDataPath={data}",
        ]
    _run(argv)
    output.ok(f"Restored the metrics store from {source} into {data}.")
    output.say("Start the master again: mac start master")
    return 0

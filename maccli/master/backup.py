"""`mac backup metrics DIR` / `mac restore metrics DIR`: the store's own backup tools.

Scale-out mode's store (maccli.master.scaleout) is backed up with vmbackup, from an instant
snapshot the running store takes (`/snapshot/create`), into a folder (`fs://`); a
second backup into the same folder copies only what changed. vmrestore puts a backup
back into the store's folder, which needs the store stopped (`mac stop master`
first). Both print the exact command they run, for a site that wants `s3://` or
another destination by hand.

Where the store's folder is depends on the runtime, which runs the tools beside the
store (Runtime.one_off): on this host, or under Docker in a throwaway container of MAC's
image with the mac-metrics volume and the folder mounted (and, for the snapshot, on
the master's network, where the store is `store`).

The store takes snapshots only with its snapshot key (maccli.master.scaleout.store_keys):
vmbackup gets the snapshot URL with the key from its environment (-envflag.enable),
never on its command line, and the command printed reads the key from its file.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import urllib.request
from pathlib import Path

from maccli import output
from maccli.master import scaleout
from maccli.master.layout import Layout, master_layout
from maccli.master.preflight import ROLE, data_dir
from maccli.output import CliError
from maccli.runtimes import Runtime, choose_runtime
from node.config import NodeConfig

SNAPSHOT_KEY = "snapshotAuthKey"
# vmbackup's -snapshot.createURL, read from the environment (the URL holds the key).
CREATE_URL = scaleout.envflag_variable("snapshot.createURL")


def _store(cfg: NodeConfig) -> tuple[str, Runtime, Layout]:
    """The store's URL from this host, the runtime that runs it, and its layout."""
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
    runtime = choose_runtime(cfg, ROLE)
    return scaleout.store_url(cfg), runtime, master_layout(cfg, own_network=runtime.own_network)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=3):  # noqa: S310 (loopback)
            return True
    except OSError:
        return False


def _run(argv: list[str], env: dict[str, str] | None = None, shown: str = "") -> None:
    """Run `argv` with `env` added to this environment; `shown` is how the command line
    prints those variables (without the secrets in them)."""
    output.say("Running: " + (f"{shown} " if shown else "") + shlex.join(argv))
    try:
        result = subprocess.run(
            argv, capture_output=True, text=True, check=False, timeout=3600,
            env={**os.environ, **(env or {})},
        )  # fmt: skip
    except FileNotFoundError:
        raise CliError(
            f"{argv[0]} is missing: it comes with Debian's victoria-metrics package.",
            commands=["sudo apt-get install victoria-metrics"],
        ) from None
    if result.returncode != 0:
        last = " ".join((result.stderr or result.stdout).strip().splitlines()[-3:])
        if "authKey" in last:
            raise CliError(
                f"the store refused the snapshot key: {last}",
                hint="The running store has another key than the one kept for it; restart "
                "the master so that it reads the kept one, then run again:",
                commands=["mac restart master"],
            )
        raise CliError(f"{Path(argv[0]).name} failed: {last}")


def backup(folder: str) -> int:
    cfg = NodeConfig.load()
    store, runtime, layout = _store(cfg)
    target = Path(folder).expanduser().resolve()
    if not _answers(store):
        raise CliError(
            f"the store at {store} does not answer: a backup is a snapshot of the running store.",
            commands=["mac start master", f"mac backup metrics {target}"],
        )
    target.mkdir(parents=True, exist_ok=True)
    work = scaleout.folder(data_dir(cfg))
    key = scaleout.store_keys(work)[scaleout.envflag_variable(SNAPSHOT_KEY)]
    # The store as the tool reaches it: on the loopback, or by name on the master's network.
    create = f"http://{layout.host('store')}:{store.rsplit(':', 1)[1]}/snapshot/create"
    argv = runtime.one_off(
        [
            scaleout.binary(cfg, layout, "MAC_VMBACKUP_BIN", "vmbackup"),
            *scaleout.ENVFLAG_ARGS,
            f"-storageDataPath={layout.store_data}",
            f"-dst=fs://{target}",
        ],
        volumes={scaleout.STORE_VOLUME: layout.store_data},
        folders=[target],
        programs=_program(cfg, layout, "MAC_VMBACKUP_BIN"),
        env_names=[CREATE_URL],
        network=True,
    )
    key_file = scaleout.store_key_file(work, SNAPSHOT_KEY)
    shown = f'{CREATE_URL}="{create}?authKey=$(cat {shlex.quote(str(key_file))})"'
    _run(argv, {CREATE_URL: f"{create}?authKey={key}"}, shown)
    output.ok(f"Backed up the metrics store into {target}.")
    output.say(f"Restore it with: mac stop master && mac restore metrics {target}")
    return 0


def _program(cfg: NodeConfig, layout: Layout, setting: str) -> list[Path]:
    """The host's own vmbackup or vmrestore (MAC_*_BIN), for the tool's container to
    mount; none under the process runtime, which runs it where it is."""
    if not layout.docker or not cfg.get(setting):
        return []
    return [Path(scaleout.host_program(cfg, setting))]


def restore(folder: str) -> int:
    cfg = NodeConfig.load()
    store, runtime, layout = _store(cfg)
    source = Path(folder).expanduser().resolve()
    if not source.is_dir():
        raise CliError(f"{source} is not a folder holding a backup (mac backup metrics DIR).")
    if _answers(store):
        raise CliError(
            f"the store at {store} is running: it must be stopped while its folder is restored.",
            commands=["mac stop master", f"mac restore metrics {source}", "mac start master"],
        )
    argv = runtime.one_off(
        [
            scaleout.binary(cfg, layout, "MAC_VMRESTORE_BIN", "vmrestore"),
            f"-src=fs://{source}",
            f"-storageDataPath={layout.store_data}",
        ],
        volumes={scaleout.STORE_VOLUME: layout.store_data},
        folders=[source],
        programs=_program(cfg, layout, "MAC_VMRESTORE_BIN"),
    )
    _run(argv)
    output.ok(f"Restored the metrics store from {source} into {layout.store_data}.")
    output.say("Start the master again: mac start master")
    return 0

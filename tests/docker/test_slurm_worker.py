"""mac-worker talks to the host's Slurm: the Compose file `mac start master` writes for a
host with a slurm.conf mounts it (with a file it includes from another folder) and
munge's socket, and MAC's image brings Slurm's tools.

A Slurm lab runs on the host (slurmctld, three slurmd, munged), its controller named
by the host's end of the engine's link, as a site names its controller by an address
the master's containers can reach. The worker's service, exactly as written, runs MAC's
own Slurm client in a container of the real engine: it pings the controller, reads the
nodes and drains one, and Slurm on the host shows the drain. Nothing else of the master
is started (`docker-compose run --no-deps`), so the session's master is left alone.
"""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from maccli.master import compose
from maccli.runtimes.docker import find_compose
from node.config import NodeConfig
from testkit.docker_engine import HOST_IP
from testkit.slurmlab import SlurmLab, SlurmLabUnavailable, lab_folder

pytestmark = [pytest.mark.docker, pytest.mark.netns, pytest.mark.slow]

# Run in the worker's container: MAC's client, as the drain pass and the job read use it.
IN_WORKER = """
import json, os
from scheduler.slurm import SlurmClient
client = SlurmClient(os.environ["SLURM_CONF"])
controller = client.ping()
names = sorted(node.name for node in client.nodes())
client.drain("node-2", "MAC: drained from mac-worker")
print(json.dumps({"controller": controller.host, "nodes": names, "jobs": len(client.jobs())}))
"""


@pytest.fixture(scope="module")
def lab(engine):
    """A Slurm lab whose controller the engine's containers reach at HOST_IP."""
    here = socket.gethostname().split(".")[0]
    try:
        with lab_folder() as root:
            started = SlurmLab.start(
                root, ["node-1", "node-2"], 1, extra_config={"SlurmctldHost": f"{here}({HOST_IP})"}
            )
            try:
                yield started
            finally:
                started.stop()
    except SlurmLabUnavailable as exc:
        pytest.skip(str(exc))


def _worker_run(engine, written: Path, *argv: str) -> subprocess.CompletedProcess:
    tool = find_compose()
    base = [*tool, "-p", "macslurm", "-f", str(written)]
    try:
        return subprocess.run(
            [*base, "run", "--rm", "--no-deps", "-T", "worker", *argv],
            capture_output=True, text=True, env=engine.env(), timeout=180, check=False,
        )  # fmt: skip
    finally:
        subprocess.run(
            [*base, "down", "-v"], capture_output=True, env=engine.env(), timeout=120, check=False
        )


def test_mac_worker_drains_a_node_of_the_hosts_slurm(engine, images, lab, tmp_path):
    # A site's file included from another folder: Slurm's tools in the container must
    # open it too (unmounted, they retry for a minute and then give up).
    site = tmp_path / "site"
    site.mkdir()
    (site / "extra.conf").write_text("# the site's own part, kept outside slurm.conf's folder\n")
    with lab.conf.open("a") as conf:
        conf.write(f"Include {site}/extra.conf\n")
    cfg = NodeConfig(
        environ={"SLURM_CONF": str(lab.conf)}, node_values={}, user_values={},
        node_file=tmp_path / "node-env", user_file=tmp_path / "user-env",
    )  # fmt: skip
    written = compose.write(cfg, tmp_path / "data")
    worker = yaml.safe_load(written.read_text())["services"]["worker"]
    assert worker["environment"]["SLURM_CONF"] == str(lab.conf)
    assert f"{lab.conf.parent}:{lab.conf.parent}:ro" in worker["volumes"]
    assert f"{lab.munge_socket.parent}:{lab.munge_socket.parent}:ro" in worker["volumes"]
    assert f"{site}:{site}:ro" in worker["volumes"]

    done = _worker_run(engine, written, "python", "-c", IN_WORKER)

    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said == {
        "controller": socket.gethostname().split(".")[0],
        "nodes": ["node-1", "node-2"],
        "jobs": 0,
    }
    states = lab.node_states()
    assert states["node-2"].startswith("drain"), states
    assert states["node-1"] == "idle", states
    assert "MAC: drained from mac-worker" in lab.scontrol("show", "node", "node-2")

"""Faults on demand in a running simulated fleet: its control server and the commands.

    python -m testkit.simfleet inject <host> xid=79 gpu=3
    python -m testkit.simfleet inject <host> gpu_lost gpu=3
    python -m testkit.simfleet heal <host>
    python -m testkit.simfleet reboot <host>
    python -m testkit.simfleet nodes

Every fleet (each process of a large one, and a test's FleetThread given a control_dir)
serves a small HTTP API on 127.0.0.1 and writes where, with a random token, into a file
of its own under ``<MAC_STATE_DIR>/simfleet/`` (mode 0600): the fleet ``scripts/run``
starts with MAC_SIMULATED_FLEET writes under ./var/state. The commands read those files,
ask each fleet, and print what happened and what to do next. A host is named by its host
name (sim-127-100-0-17) or its address.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import socket
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from contract.atomicfile import write_atomically
from contract.verdicts import parse_verdicts, worst_action, worst_state
from testkit.simfleet.model import Fault

TOKEN_HEADER = "X-Simfleet-Token"
REPO = Path(__file__).resolve().parents[2]
RECOVERY_NAMES = {"gpu_reset": 1, "node_reboot": 2, "drain_p2p": 3, "drain_and_reset": 4}


@dataclass(frozen=True)
class FaultSpec:
    fault: Fault
    words: str
    vendors: tuple[str, ...] = ("nvidia", "amd")
    needs_value: bool = False
    on_nic: bool = False
    condition: bool = False  # lasts until healed; else an event that happened


FAULTS: dict[str, FaultSpec] = {
    "xid": FaultSpec(Fault.XID, "an XID event, e.g. xid=79", ("nvidia",), needs_value=True),
    "ecc": FaultSpec(Fault.ECC, "an uncorrectable (double-bit) ECC error (NVIDIA: with XID 48)"),
    "dbe": FaultSpec(Fault.ECC, "the same as ecc"),
    "sbe": FaultSpec(Fault.SBE, "a burst of 100 correctable (single-bit) ECC errors"),
    "gpu_lost": FaultSpec(
        Fault.GPU_LOST, "the GPU falls off the bus (NVIDIA: XID 79)", condition=True
    ),
    "remap_pending": FaultSpec(
        Fault.REMAP_PENDING, "a row remap waits for a GPU reset", ("nvidia",), condition=True
    ),
    "remap_failure": FaultSpec(
        Fault.REMAP_FAILURE, "row remapping failed", ("nvidia",), condition=True
    ),
    "thermal": FaultSpec(Fault.THERMAL, "hardware thermal slowdown", ("nvidia",), condition=True),
    "nvlink": FaultSpec(Fault.NVLINK, "a burst of 100 NVLink CRC errors", ("nvidia",)),
    "recovery_action": FaultSpec(
        Fault.RECOVERY,
        "the driver's recovery action, e.g. recovery_action=node_reboot "
        f"({', '.join(f'{k}={v}' for k, v in RECOVERY_NAMES.items())})",
        ("nvidia",),
        needs_value=True,
        condition=True,
    ),
    "amd_health": FaultSpec(
        Fault.AMD_HEALTH, "AMD's GPU_HEALTH flag turns unhealthy", ("amd",), condition=True
    ),
    "link_flap": FaultSpec(
        Fault.LINK_FLAP, "an RDMA port goes down (nic=N)", on_nic=True, condition=True
    ),
}


class ControlError(Exception):
    """A request the fleet cannot carry out; the message says why and what to do."""


# --- the fleet's side ---------------------------------------------------------------------


class ControlServer:
    """The control API of one fleet, on its own event loop."""

    def __init__(self, fleet, folder: str | os.PathLike) -> None:
        self.fleet = fleet
        self.folder = Path(folder)
        self.token = secrets.token_hex(16)
        self.file = self.folder / f"fleet-{os.getpid()}-{id(fleet):x}.json"
        self.runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application(middlewares=[self._auth])
        app.router.add_get("/nodes", self._nodes)
        app.router.add_post("/inject", self._inject)
        app.router.add_post("/heal", self._heal)
        app.router.add_post("/reboot", self._reboot)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        await web.SockSite(self.runner, sock).start()
        nodes = self.fleet.nodes
        self.folder.mkdir(parents=True, exist_ok=True)
        record = {
            "url": f"http://127.0.0.1:{port}",
            "token": self.token,
            "pid": os.getpid(),
            "nodes": len(nodes),
            "first": nodes[0].hostname if nodes else "",
            "last": nodes[-1].hostname if nodes else "",
        }
        write_atomically(self.file, json.dumps(record).encode(), mode=0o600)

    async def stop(self) -> None:
        self.file.unlink(missing_ok=True)
        if self.runner is not None:
            await self.runner.cleanup()

    @web.middleware
    async def _auth(self, request: web.Request, handler):
        if not secrets.compare_digest(request.headers.get(TOKEN_HEADER, ""), self.token):
            return web.json_response({"error": "wrong or missing token"}, status=403)
        try:
            return await handler(request)
        except ControlError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        except KeyError as exc:
            return web.json_response({"error": f"no node {exc.args[0]!r} here"}, status=404)

    def _verdicts(self, node) -> dict:
        hardware = node.hardware
        if hardware is None or hardware.verdicts is None:
            return {}
        found = parse_verdicts(hardware.verdict_page(node.hostname))
        return {gpu.index: (str(gpu.state), str(gpu.action)) for gpu in found.gpus}

    def _node(self, body: dict):
        node = self.fleet.node(str(body.get("host", "")))
        if node.hardware is None:
            raise ControlError(
                f"{node.hostname} is a plain node without hardware; start the fleet with "
                "--profiles to have GPUs and NICs that can fail"
            )
        return node

    async def _nodes(self, _request: web.Request) -> web.Response:
        rows = []
        for node in self.fleet.nodes:
            verdicts = self._verdicts(node)
            rows.append(
                {
                    "hostname": node.hostname,
                    "ip": node.ip,
                    "profile": node.hardware.profile.name if node.hardware else "plain",
                    "state": str(worst_state(state for state, _ in verdicts.values())),
                    "action": str(worst_action(action for _, action in verdicts.values())),
                }
            )
        return web.json_response(rows)

    async def _inject(self, request: web.Request) -> web.Response:
        body = await request.json()
        node = self._node(body)
        spec = FAULTS[str(body["fault"])]
        profile = node.hardware.profile
        if spec.on_nic:
            count, what = profile.nic_count, "NIC"
        else:
            count, what = profile.gpu_count, "GPU"
            if profile.gpu_vendor not in spec.vendors:
                raise ControlError(
                    f"{body['fault']} is a fault of {' and '.join(spec.vendors)} GPUs; "
                    f"{node.hostname} is of the {profile.name} profile ({profile.description})"
                )
        target = int(body.get("target", 0))
        if not 0 <= target < count:
            raise ControlError(
                f"{node.hostname} has {count} {what}s (0 to {count - 1}); {target} is not one"
                if count
                else f"{node.hostname} has no {what}"
            )
        length = math.inf if spec.condition else None
        self.fleet.inject(node.hostname, spec.fault, target, int(body.get("value", 0)), length)
        verdict = self._verdicts(node).get(str(target))
        return web.json_response(
            {"hostname": node.hostname, "ip": node.ip, "profile": profile.description,
             "what": what, "target": target, "verdict": verdict}
        )  # fmt: skip

    async def _heal(self, request: web.Request) -> web.Response:
        node = self._node(await request.json())
        ended = self.fleet.heal(node.hostname)
        return web.json_response(
            {"hostname": node.hostname,
             "ended": [[str(e.fault), "NIC" if FAULTS[str(e.fault)].on_nic else "GPU", e.target]
                       for e in ended],
             "window": node.hardware.window}
        )  # fmt: skip

    async def _reboot(self, request: web.Request) -> web.Response:
        node = self._node(await request.json())
        boot_id = self.fleet.reboot(node.hostname)
        return web.json_response({"hostname": node.hostname, "boot_id": boot_id})


# --- the commands -------------------------------------------------------------------------


def control_dir(explicit: str | None = None) -> Path:
    """Where a fleet started now leaves its control file: --state-dir, else MAC_STATE_DIR,
    else the node's own state folder (node.config), under simfleet/."""
    from node.config import NodeConfig

    if explicit:
        return Path(explicit) / "simfleet"
    return NodeConfig.load(os.environ).state_dir / "simfleet"


def state_dirs(explicit: str | None = None) -> list[Path]:
    """Where running fleets leave their control files: --state-dir alone when given, else
    MAC_STATE_DIR's (or the node's), then scripts/run's (./var/state)."""
    if explicit:
        return [control_dir(explicit)]
    return list(dict.fromkeys([control_dir(), REPO / "var" / "state" / "simfleet"]))


def running_fleets(explicit: str | None = None) -> tuple[list[dict], list[Path]]:
    """The control records of live fleets (a file left by a dead one is skipped)."""
    folders = state_dirs(explicit)
    fleets = []
    for folder in folders:
        for path in sorted(folder.glob("fleet-*.json")):
            try:
                record = json.loads(path.read_text())
                os.kill(int(record["pid"]), 0)
            except (OSError, ValueError, KeyError):
                continue
            fleets.append(record)
    return fleets, folders


def _ask(fleet: dict, method: str, path: str, body: dict | None = None) -> tuple[int, object]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(fleet["url"] + path, data=data, method=method)
    request.add_header(TOKEN_HEADER, fleet["token"])
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _on_its_fleet(fleets: list[dict], path: str, body: dict) -> dict:
    """POST to the fleet that has the host; ControlError naming the host otherwise."""
    for fleet in fleets:
        status, answer = _ask(fleet, "POST", path, body)
        if status == 404:
            continue
        if status != 200:
            raise ControlError(answer.get("error", f"HTTP {status}"))
        return answer
    ranges = "; ".join(f"{f['first']} .. {f['last']} ({f['nodes']} nodes)" for f in fleets)
    raise ControlError(
        f"no simulated node is called {body['host']!r} (running: {ranges}). "
        "List them: python -m testkit.simfleet nodes"
    )


def parse_fault(words: list[str]) -> tuple[str, int, int]:
    """["xid=79", "gpu=3"] -> ("xid", 79, 3): the fault, its value and its target."""
    fault, value, target = "", 0, 0
    for word in words:
        key, sep, raw = word.partition("=")
        if key in ("gpu", "nic"):
            if not raw.isdigit():
                raise ControlError(f"{word!r}: {key}= takes an index, e.g. {key}=3")
            target = int(raw)
            continue
        if key not in FAULTS:
            raise ControlError(f"unknown fault {key!r}. Faults: {fault_list()}")
        if fault:
            raise ControlError(f"one fault at a time: {fault!r} and {key!r} given")
        fault = key
        if FAULTS[key].needs_value:
            value = RECOVERY_NAMES.get(raw) if key == "recovery_action" else None
            if value is None and not raw.isdigit():
                raise ControlError(f"{key} needs a value: {FAULTS[key].words}")
            value = int(raw) if value is None else value
        elif sep:
            raise ControlError(f"{key} takes no value ({FAULTS[key].words})")
    if not fault:
        raise ControlError(f"name a fault. Faults: {fault_list()}")
    return fault, value, target


def fault_list() -> str:
    return "; ".join(f"{name} ({spec.words})" for name, spec in FAULTS.items())


def _inject(fleets: list[dict], host: str, words: list[str]) -> None:
    fault, value, target = parse_fault(words)
    spec = FAULTS[fault]
    done = _on_its_fleet(
        fleets, "/inject", {"host": host, "fault": fault, "value": value, "target": target}
    )
    name = done["hostname"]
    what = f"XID {value}" if spec.fault is Fault.XID else fault + (f"={value}" if value else "")
    print(f"Injected {what} on {done['what']} {target} of {name} ({done['profile']}).")
    if done.get("verdict"):
        state, action = done["verdict"]
        print(f"GPU {target}'s verdict on the node is now {state}, action {action}.")
    print(
        "The master shows it after its next sweep (within MAC_PROBE_INTERVAL + "
        "MAC_PROBE_TIMEOUT): the node's page, or GET /api/v1/nodes/?search=" + name + "."
    )
    if spec.condition:
        print(f"It lasts until healed: python -m testkit.simfleet heal {name}")
    else:
        print(
            "An event: it counts for the evidence window after it happened; "
            f"python -m testkit.simfleet reboot {name} clears it at once."
        )


def _heal(fleets: list[dict], host: str) -> None:
    done = _on_its_fleet(fleets, "/heal", {"host": host})
    ended = ", ".join(f"{fault} on {what} {target}" for fault, what, target in done["ended"])
    print(f"Healed {done['hostname']}: ended {ended or 'nothing (no fault was going on)'}.")
    print(
        f"Past events (XIDs, error counts) leave the verdict {done['window']:g} s after they "
        "happened (the evidence window); a reboot clears them at once: "
        f"python -m testkit.simfleet reboot {done['hostname']}"
    )


def _reboot(fleets: list[dict], host: str) -> None:
    done = _on_its_fleet(fleets, "/reboot", {"host": host})
    print(f"Rebooted {done['hostname']}: boot_id {done['boot_id']}; every fault ended.")
    print(
        "The same fault after this reboot escalates the GPU's action to inspect_hardware "
        "(MAC_GPU_FAULT_REBOOTS)."
    )


def _nodes(fleets: list[dict]) -> None:
    print(f"{'host':<24} {'address':<16} {'profile':<11} verdict")
    for fleet in fleets:
        _, rows = _ask(fleet, "GET", "/nodes")
        for row in rows:
            verdict = f"{row['state']}, {row['action']}" if row["profile"] != "plain" else "-"
            print(f"{row['hostname']:<24} {row['ip']:<16} {row['profile']:<11} {verdict}")


COMMANDS = ("inject", "heal", "reboot", "nodes")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testkit.simfleet",
        description="Act on a running simulated fleet: inject a fault, heal, reboot, list.",
        epilog=f"faults: {fault_list()}",
    )
    parser.add_argument("command", choices=COMMANDS)
    parser.add_argument("host", nargs="?", help="host name (sim-127-100-0-17) or address")
    parser.add_argument("fault", nargs="*", help="inject: the fault and gpu=N or nic=N")
    parser.add_argument("--state-dir", help="where the fleet's control files are")
    args = parser.parse_args(argv)
    if args.command != "nodes" and not args.host:
        parser.error(f"{args.command} needs the host, e.g. {args.command} sim-127-100-0-17")
    fleets, folders = running_fleets(args.state_dir)
    if not fleets:
        print(
            "Error: no simulated fleet is running here (no control file in "
            f"{', '.join(str(f) for f in folders)}). Start one: MAC_SIMULATED_FLEET=20 "
            "scripts/run, or python -m testkit.simfleet --nodes 20 --profiles; pass "
            "--state-dir when its MAC_STATE_DIR differs.",
            file=sys.stderr,
        )
        return 1
    try:
        if args.command == "inject":
            _inject(fleets, args.host, args.fault)
        elif args.command == "heal":
            _heal(fleets, args.host)
        elif args.command == "reboot":
            _reboot(fleets, args.host)
        else:
            _nodes(fleets)
    except ControlError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    return 0

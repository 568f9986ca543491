"""A stand-in `docker` executable for hosts without a Docker engine (tests only).

It keeps a small container table in $FAKE_DOCKER_STATE and answers the calls `mac`
makes: `docker info` (its Runtimes from runtimes.json, else runc alone), `docker ps -a
--filter name=^/mac- --format ...`, `docker rm -f`, `docker save -o FILE IMAGE`,
`docker ps -aq --filter label=...`, `docker inspect`, `docker image inspect`, `docker logs`,
`docker network rm` and `docker compose version|-p P -f FILE [-f FILE...] [--profile X]
up -d|down` (later files override a service's keys, as Compose merges them; a container
whose network changed is recreated; `up` keeps the MAC_* variables it was given in
compose-env.json).
Like the real engine, `compose up` refuses a container name held by another project with
Docker's own Conflict message, and (with a file no-nvidia-driver) the `nvidia` profile's
GPU request with its "could not select device driver" error. Every call is appended to
calls.log.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import yaml

STATE = Path(os.environ["FAKE_DOCKER_STATE"])
TABLE = STATE / "containers.json"


def load() -> list[dict]:
    return json.loads(TABLE.read_text()) if TABLE.exists() else []


def save(rows: list[dict]) -> None:
    TABLE.write_text(json.dumps(rows))


def compose(args: list[str]) -> int:
    project, files, profiles = "", [], set()
    rest = []
    while args:
        arg = args.pop(0)
        if arg == "-p":
            project = args.pop(0)
        elif arg == "-f":
            files.append(args.pop(0))
        elif arg == "--profile":
            profiles.add(args.pop(0))
        else:
            rest.append(arg)
    if rest == ["version"]:
        print("Docker Compose version v2.29.7 (fake)")
        return 0
    services: dict[str, dict] = {}
    for file in files:
        for name, spec in yaml.safe_load(Path(file).read_text())["services"].items():
            services[name] = {**services.get(name, {}), **spec}
    wanted = {
        name: spec
        for name, spec in services.items()
        if not spec.get("profiles") or profiles & set(spec["profiles"])
    }
    rows = load()
    if rest[0] == "up" and "nvidia" in profiles and (STATE / "no-nvidia-driver").exists():
        print(
            'Error response from daemon: could not select device driver "nvidia" with '
            "capabilities: [[gpu]]",
            file=sys.stderr,
        )
        return 1
    if rest[0] == "up":
        # What Compose would substitute into the files' ${MAC_...}.
        seen = {k: v for k, v in os.environ.items() if k.startswith("MAC_")}
        (STATE / "compose-env.json").write_text(json.dumps(seen))
        for spec in wanted.values():
            cname = spec["container_name"]
            for row in rows:
                if row["name"] == cname and row["project"] != project:
                    print(
                        f'Error response from daemon: Conflict. The container name "/{cname}" is '
                        f'already in use by container "{row["id"]}". You have to remove (or rename)'
                        " that container to be able to reuse that name.",
                        file=sys.stderr,
                    )
                    return 1
        for name, spec in wanted.items():
            cname = spec["container_name"]
            network = (
                spec.get("network_mode") or f"{project}_{(spec.get('networks') or ['default'])[0]}"
            )
            old = next((row for row in rows if row["name"] == cname), {})
            rows = [row for row in rows if row["name"] != cname]  # created or recreated
            rows.append(
                {
                    **old,
                    "id": f"id-{cname}",
                    "name": cname,
                    "project": project,
                    "service": name,
                    "network": network,
                }
            )
        save(rows)
        return 0
    if rest[0] == "down":
        save([row for row in rows if row["project"] != project])
        return 0
    if rest[0] == "ps":
        for row in rows:
            if row["project"] == project:
                state = {"Service": row["service"], "Name": row["name"], "State": "running"}
                print(json.dumps({**state, "Status": "Up 2 minutes"}))
        return 0
    return 0


def logs(args: list[str]) -> int:
    """`docker logs [--tail N] [-f] NAME`: three stdout lines and one stderr line per container."""
    tail = int(args[args.index("--tail") + 1]) if "--tail" in args else None
    name = args[-1]
    if not any(row["name"] == name for row in load()):
        print(f"Error response from daemon: No such container: {name}", file=sys.stderr)
        return 1
    lines = [f"{name} stdout line {n}" for n in (1, 2, 3)]
    for line in lines if tail is None else lines[len(lines) - tail :]:
        print(line)
    print(f"{name} stderr line", file=sys.stderr)
    return 0


def _inspect(row: dict) -> dict:
    labels = {
        "com.docker.compose.project": row["project"],
        "com.docker.compose.service": row["service"],
    }
    state = {"Status": "running", "Pid": 4242, "StartedAt": "2026-01-01T00:00:00.000000000Z"}
    if row.get("health"):
        state["Health"] = {"Status": row["health"]}
    host_config = {"NetworkMode": row.get("network", "default")}
    return {
        "Name": f"/{row['name']}",
        "Config": {"Labels": labels},
        "State": state,
        "HostConfig": host_config,
    }


def main() -> int:
    args = sys.argv[1:]
    with (STATE / "calls.log").open("a") as log:
        log.write(" ".join(args) + "\n")
    if (STATE / "engine-down").exists():
        print(
            "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
            "Is the docker daemon running?",
            file=sys.stderr,
        )
        return 1
    if (STATE / "engine-refuses").exists():  # a user outside the docker group
        print(
            "permission denied while trying to connect to the Docker daemon socket at "
            'unix:///var/run/docker.sock: Get "http://%2Fvar%2Frun%2Fdocker.sock/v1.41/info": '
            "dial unix /var/run/docker.sock: connect: permission denied",
            file=sys.stderr,
        )
        return 1
    command = args[0]
    if command == "info" and ".Runtimes" in " ".join(args):
        runtimes = STATE / "runtimes.json"
        print(runtimes.read_text() if runtimes.exists() else '{"runc":{"path":"runc"}}')
        return 0
    if command == "info":
        print("27.3.1")
        return 0
    if command == "save":  # docker save -o FILE IMAGE; with save-fails: half a file, an error
        path = Path(args[args.index("-o") + 1])
        if (STATE / "save-fails").exists():
            path.write_text("half a tar")
            print("write /x: no space left on device", file=sys.stderr)
            return 1
        path.write_text(f"tar of {args[-1]}")
        return 0
    if command == "ps" and "-aq" in args:  # docker ps -aq --filter label=<project label>=P
        project = args[args.index("--filter") + 1].rpartition("=")[2]
        for row in load():
            if row["project"] == project:
                print(row["id"])
        return 0
    if command == "ps":
        for row in load():
            if row["name"].startswith("mac-"):
                print(f"{row['name']}\t{row['project']}")
        return 0
    if command == "image":  # docker image inspect: every image is there
        return 0
    if command == "rm":
        names = set(args[2:])
        save([row for row in load() if row["name"] not in names and row["id"] not in names])
        return 0
    if command == "inspect":
        rows = {row["id"]: row for row in load()}
        print(json.dumps([_inspect(rows[i]) for i in args[1:] if i in rows]))
        return 0
    if command == "compose":
        if (STATE / "no-compose-plugin").exists() and os.environ.get("FAKE_COMPOSE_V1") != "1":
            print("docker: 'compose' is not a docker command.", file=sys.stderr)
            return 1
        return compose(args[1:])
    if command == "logs":
        return logs(args[1:])
    if command == "network" and args[1] == "rm":
        print(args[2])
        return 0
    print(f"fake docker: unsupported {args}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

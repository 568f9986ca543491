"""`mac`: argument parsing and dispatch; expected failures end as messages, not tracebacks."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence

from contract import __version__
from contract.pinning import UntrustedMaster
from maccli import output
from maccli.output import CliError
from node.config import ConfigError
from node.envfile import EnvFileError

EXAMPLES = """\
examples:
  mac env set MASTER_IP=10.0.0.5          join this master (per-user ~/.mac/env)
  sudo mac env set --node MASTER_IP=10.0.0.5   per-node /etc/mango/mac/env (shared homes)
  mac start agent                          start the exporters and register
  mac start agent --network bridge         ... behind published ports (default: host)
  mac status                               services, health, and what the master says
  mac doctor                               every check of the troubleshooting guide
  sudo mac doctor --fix ip_forward         apply a check's fix (asks first), check again
  mac stop agent                           deregister and stop
  mac start master                         api-server, worker, beat, prometheus
  mac logs api-server | grep /api/v1/register   (master) which agents registered
  mac logs sys-exporter -n 50 -f           the end of a service's log, then follow it
  mac probe 10.0.0.17                      what the master's probe sees of a node, and why
  sudo mac gpu reset 1                     reset GPU 1, MAC's GPU services stopped meanwhile
"""


def _add_runtime(parser: argparse.ArgumentParser, stale: bool = False) -> None:
    parser.add_argument(
        "--runtime",
        choices=["auto", "docker", "process"],
        help="docker (Compose project mac) or process; default: MAC_RUNTIME, else auto",
    )
    if stale:
        parser.add_argument(
            "--remove-stale",
            action="store_true",
            help="remove mac-* containers of another Compose project instead of stopping",
        )


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="mac",
        description="MAC on this node: configuration, agent and master services, diagnosis.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--version", action="version", version=f"mac {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")

    env = sub.add_parser("env", help="show or change the configuration files")
    env_sub = env.add_subparsers(dest="env_command", metavar="ACTION")
    env_set = env_sub.add_parser("set", help="save KEY=VALUE (per-user file unless --node)")
    env_set.add_argument("assignment", metavar="KEY=VALUE")
    env_set.add_argument("--node", action="store_true", help="write /etc/mango/mac/env (root)")
    env_set.add_argument(
        "--force", action="store_true", help="allow MASTER_IP in a shared per-user file"
    )
    env_get = env_sub.add_parser("get", help="print the value in effect")
    env_get.add_argument("key")
    env_unset = env_sub.add_parser("unset", help="remove a key from the per-user file")
    env_unset.add_argument("key")
    env_unset.add_argument("--node", action="store_true", help="from the per-node file")
    env_list = env_sub.add_parser("list", help="every value in effect and where it comes from")
    env_list.add_argument("--json", action="store_true")

    for verb, text in (
        ("start", "start the services (agent: and register with the master)"),
        ("stop", "stop the services (agent: deregister first)"),
        ("restart", "restart the services, keeping the registration"),
    ):
        cmd = sub.add_parser(verb, help=text)
        cmd.add_argument("role", choices=["agent", "master"])
        _add_runtime(cmd, stale=verb != "stop")
        if verb == "start":
            cmd.add_argument(
                "--network",
                choices=["host", "bridge"],
                help="agent under Docker: host (every exporter on the host network, the "
                "default for new installs) or bridge (published ports); saved in the "
                "per-node file as MAC_AGENT_NETWORK",
            )

    # Scale-out mode's store (maccli.master.backup): vmbackup / vmrestore.
    for verb, text in (
        ("backup", "back up the metrics store (MAC_SCRAPE_SHARDS) into a folder"),
        ("restore", "restore the metrics store from a folder (master stopped)"),
    ):
        cmd = sub.add_parser(verb, help=text)
        cmd.add_argument("what", choices=["metrics"])
        cmd.add_argument("folder", help="the backup's folder, e.g. /srv/backups/mac-metrics")

    st = sub.add_parser("status", help="services, their health, and the master's view")
    st.add_argument("role", nargs="?", choices=["agent", "master"], default="agent")
    st.add_argument("--json", action="store_true")
    _add_runtime(st)

    doc = sub.add_parser(
        "doctor",
        help="run the troubleshooting guide's checks (--fix: apply their fixes)",
        description="Run the troubleshooting guide's checks and print the fix of each "
        "problem. With --fix, show the exact commands of each failing or warning check "
        "(or of the CHECKs named), ask, apply them, and check again; exit 0 only when "
        "everything asked for passes.",
    )
    doc.add_argument("checks", nargs="*", metavar="CHECK", help="only these checks (ids)")
    doc.add_argument("--json", action="store_true", help='{"ok": ..., "checks": [...]}')
    doc.add_argument("--fix", action="store_true", help="apply the fixes, after asking")
    doc.add_argument("--yes", action="store_true", help="with --fix: apply without asking")
    doc.add_argument(
        "--dry-run", action="store_true", help="with --fix: show the commands, change nothing"
    )

    logs = sub.add_parser(
        "logs",
        help="a service's log (docker logs mac-<service>, or its log file)",
        description="Print a service's log: `docker logs mac-<service>` under the docker "
        "runtime, the service's log file under the process runtime.",
    )
    logs.add_argument("service", help="e.g. sys-exporter, nic-exporter, api-server, worker")
    logs.add_argument(
        "--role", choices=["agent", "master"], help="default: the role the service belongs to"
    )
    logs.add_argument(
        "-n", "--lines", type=_count, metavar="N", help="only the last N lines (default: all)"
    )
    logs.add_argument(
        "-f", "--follow", action="store_true", help="keep printing new lines until Ctrl-C"
    )
    _add_runtime(logs)

    probe = sub.add_parser(
        "probe",
        help="probe a node as the master does: each service, then the diagnosis",
        description="Probe every agent service on ADDRESS with the master's own probe, print "
        "what answered, and judge the node as the master would (Online or Offline, why, and "
        "the fix). Exit 0 when sys-exporter answers.",
    )
    probe.add_argument("address", help="the agent's address or host name")
    probe.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="seconds per probe (default: MAC_PROBE_TIMEOUT, else 3, as the master)",
    )
    probe.add_argument("--json", action="store_true", help="results and diagnosis as JSON")
    probe.add_argument(
        "--network",
        choices=["host", "bridge"],
        help="the node's network mode, on which the diagnosis depends (default: what the "
        "master registered, asked with this node's key for its own address and with "
        "MAC_API_TOKEN for any other; else unknown)",
    )

    gpu = sub.add_parser("gpu", help="act on one of this node's GPUs (reset)")
    gpu_sub = gpu.add_subparsers(dest="gpu_command", metavar="ACTION")
    gpu_reset = gpu_sub.add_parser(
        "reset",
        help="reset a GPU (the reset_gpu action), with MAC's GPU services stopped meanwhile",
        description="Reset one GPU (root): stop MAC's services that hold the GPUs open "
        "(the GPU exporter and mango-sdk-agent; the node stays registered), run "
        "nvidia-smi -r -i GPU (AMD: amd-smi reset --gpureset -g GPU), "
        "record the reset in the kernel log (NVIDIA), start the services again, and say "
        "what is left to do. A failed reset starts them again too.",
    )
    gpu_reset.add_argument(
        "gpu",
        metavar="GPU",
        help="its index as nvidia-smi numbers them, its UUID (GPU-...) or its PCI bus id "
        "(00000000:3B:00.0 or 0000:3b:00.0); AMD: the index only",
    )
    _add_runtime(gpu_reset)
    return ap


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of lines (0 or more)")
    return int(text)


def _acts_on_the_agent(args: argparse.Namespace) -> bool:
    """Whether the command reads or changes this node's agent (its services, its logs).
    `mac doctor` and `mac gpu reset` say it their own way (maccli.doctor, maccli.gpureset)."""
    if args.command in {"start", "stop", "restart"}:
        return args.role == "agent"
    if args.command == "status":
        return args.role != "master"
    if args.command == "logs":
        from maccli.logs import role_of

        try:
            return role_of(args.service, args.role)[1] == "agent"
        except CliError:
            return False  # the command says what is wrong with the name
    return False


def _warn_if_the_users_agent_is_meant(args: argparse.Namespace, words: list[str]) -> None:
    """`sudo mac status` (and the agent's other commands) where root has no agent and the
    user who ran sudo has one (maccli.agent.sudo_owner): said before the command runs."""
    if os.geteuid() != 0 or not os.environ.get("SUDO_USER") or not _acts_on_the_agent(args):
        return
    from maccli.agent.sudo_owner import acting_as_root_warning
    from node.config import NodeConfig

    warning = acting_as_root_warning(NodeConfig.load(), shlex.join(words))
    if warning:
        output.warn(warning)


def dispatch(args: argparse.Namespace, ap: argparse.ArgumentParser) -> int:
    from maccli import agent, doctor, envcmd
    from maccli import logs as logscmd
    from maccli import probe as probecmd
    from maccli.master import commands as master

    if args.command == "env":
        if args.env_command == "set":
            return envcmd.env_set(args.assignment, node=args.node, force=args.force)
        if args.env_command == "get":
            return envcmd.env_get(args.key)
        if args.env_command == "unset":
            return envcmd.env_unset(args.key, node=args.node)
        if args.env_command == "list":
            return envcmd.env_list(as_json=args.json)
        raise CliError("mac env needs an action.", commands=["mac env list", "mac env --help"])
    if args.command == "doctor":
        if not args.fix:
            if args.yes or args.dry_run:
                ap.error("--yes and --dry-run go with --fix")
            return doctor.doctor(as_json=args.json, names=args.checks)
        if args.json:
            ap.error("--fix prints what it does; it has no --json form")
        return doctor.fix(args.checks, yes=args.yes, dry_run=args.dry_run, mac=main)
    if args.command == "logs":
        return logscmd.logs(args.service, args.role, args.lines, args.follow, args.runtime)
    if args.command == "probe":
        return probecmd.probe(
            args.address, timeout=args.timeout, as_json=args.json, network=args.network
        )
    if args.command == "gpu":
        if args.gpu_command == "reset":
            from maccli import gpureset

            return gpureset.reset(args.gpu, args.runtime)
        raise CliError("mac gpu needs an action.", commands=["mac gpu reset --help"])
    if args.command in {"backup", "restore"}:
        from maccli.master import backup

        return getattr(backup, args.command)(args.folder)
    if args.command == "status":
        if args.role == "master":
            return master.status(args.runtime)
        return agent.status(args.runtime, as_json=args.json)
    if args.command in {"start", "stop", "restart"}:
        module = agent if args.role == "agent" else master
        if args.command == "stop":
            return module.stop(args.runtime)
        if args.command == "restart":
            return module.restart(args.runtime, remove_stale=args.remove_stale)
        if args.role == "agent":
            return agent.start(args.runtime, args.remove_stale, args.network)
        if args.network:
            raise CliError(
                "--network is the agent's network mode; the master has none.",
                commands=["mac start master"],
                code=2,
            )
        return master.start(args.runtime, remove_stale=args.remove_stale)
    ap.print_help()
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    ap = parser()
    words = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(words)
    try:
        _warn_if_the_users_agent_is_meant(args, words)
        return dispatch(args, ap)
    except CliError as exc:
        if exc.rerun:
            exc.commands.append(shlex.join(["mac", *words]))
        output.print_error(exc)
        return exc.code
    except (ConfigError, EnvFileError) as exc:
        # An env file `mac` cannot read or write comes with its own fix (the node key's write
        # at registration among them); `mac env list` would fail too.
        commands = getattr(exc, "commands", None) or ["mac env list"]
        output.print_error(CliError(str(exc), commands=commands))
        return 1
    except UntrustedMaster as exc:
        from maccli.agent.errors import untrusted_master_error

        output.print_error(untrusted_master_error(exc))
        return 1
    except KeyboardInterrupt:
        output.err().print("Interrupted.")
        return 130


if __name__ == "__main__":
    sys.exit(main())

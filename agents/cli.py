"""Command line: `python -m agents run | facts | pair | check` (see docs/PROBES.md, docs/OPERATIONS.md)."""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import socket
import sys
from typing import Any

from agents import contract
from agents.options import add_env_options, local_node_name

EXIT_CODES = {"ok": 0, "degraded": 1}  # anything else: 2
_SIZE_RE = re.compile(r"^(\d+)([KMG]?)(i?B)?$", re.I)


def parse_size(text: str) -> int:
    """'1K', '64MiB', '4096' -> bytes (K, M, G are powers of 1024)."""
    m = _SIZE_RE.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (examples: 4096, 64K, 16M)")
    return int(m.group(1)) << (10 * " KMG".index((m.group(2) or " ").upper()))


def parse_sizes(text: str) -> list[int]:
    return [parse_size(s) for s in text.split(",") if s.strip()]


def parse_timeout(text: str) -> tuple[str, float]:
    stage, _, seconds = text.partition("=")
    if stage not in contract.DEFAULT_TIMEOUTS or not seconds:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected STAGE=SECONDS, stages {', '.join(contract.DEFAULT_TIMEOUTS)}"
        )
    return stage, float(seconds)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m agents", description="cluster-health node agent")
    sub = parser.add_subparsers(dest="action", required=True)

    run = sub.add_parser("run", help="serve this node's probe queue (a Celery worker)")
    run.add_argument(
        "--broker",
        help="Redis URL of the broker, without a password (default: CLUSTER_HEALTH_BROKER_URL, which may hold one)",
    )
    add_env_options(
        run,
        ("--name", "CLUSTER_HEALTH_NODE_NAME", None, "node name (queue agent.NAME)"),
        (
            "--address",
            "CLUSTER_HEALTH_NODE_ADDRESS",
            None,
            "address peers use to reach this node (default: the interface that routes to the broker)",
        ),
        (
            "--broker-file",
            "CLUSTER_HEALTH_BROKER_URL_FILE",
            None,
            "a file holding the broker URL, password included (mode 0600)",
        ),
        (
            "--key-file",
            "CLUSTER_HEALTH_AGENT_KEY_FILE",
            None,
            "this node's key from `manage.py enroll` (mode 0600); every message is signed with it",
        ),
    )
    run.add_argument("--loglevel", default="INFO")

    sub.add_parser("facts", help="print this node's facts as JSON")

    add_pair_parser(sub)

    from agents import check

    check.build_parser(sub)
    return parser


def add_pair_parser(sub: Any) -> None:
    """`pair`: one rank of a probe run by hand."""
    pair = sub.add_parser("pair", help="probe a pair by hand: rank 0 prints ADDR:PORT, rank 1 joins it")
    pair.add_argument("--rank", type=int, choices=(0, 1), required=True)
    pair.add_argument("--bind", help="rank 0: the address to listen on (printed as ADDR:PORT)")
    pair.add_argument("--port", type=int, default=0, help="rank 0: port to bind (default: any free port)")
    pair.add_argument("--connect", help="rank 1: ADDR:PORT that rank 0 printed")
    pair.add_argument("--name", default=local_node_name(), help="this host's name in hints")
    pair.add_argument("--backend", choices=contract.BACKENDS, default="gloo")
    pair.add_argument("--sizes", type=parse_sizes, help="comma-separated message sizes, e.g. 1K,1M,64M")
    pair.add_argument("--iterations", type=int, default=contract.DEFAULT_ITERATIONS)
    pair.add_argument("--warmup", type=int, default=contract.DEFAULT_WARMUP)
    pair.add_argument(
        "--timeout",
        type=parse_timeout,
        action="append",
        default=[],
        metavar="STAGE=SECONDS",
        help="override one stage's timeout (repeatable)",
    )
    pair.add_argument(
        "--wait", type=float, default=120.0, help="rank 0: seconds to wait for rank 1 to join (the store stage)"
    )
    pair.add_argument("--multi-group", action="store_true", help="also run collectives on a second process group")
    pair.add_argument("--collective-only", action="store_true", help="stop after the small all_reduce")


def pair_command(args: argparse.Namespace) -> tuple[dict[str, Any], int | None]:
    timeouts = dict(contract.DEFAULT_TIMEOUTS)
    timeouts.update(dict(args.timeout))
    command = {
        "v": contract.VERSION,
        "kind": "pair",
        "probe_id": 0,
        "rendezvous": "manual-" + secrets.token_hex(6),
        "node": args.name,
        "rank": args.rank,
        "world_size": 2,
        "backend": args.backend,
        "iterations": args.iterations,
        "warmup": args.warmup,
        "multi_group": args.multi_group,
        "last_stage": "collective" if args.collective_only else "bandwidth",
    }
    if args.sizes:
        command["sizes"] = args.sizes
    if args.rank == 0:
        if not args.bind:
            raise SystemExit("pair --rank 0 needs --bind ADDR")
        timeouts["store"] = min(args.wait, contract.MAX_STAGE_TIMEOUT_S)
        command.update(bind_address=args.bind, master_address=args.bind, master_port=args.port or None)
        port = None
    else:
        if not args.connect or ":" not in args.connect:
            raise SystemExit("pair --rank 1 needs --connect ADDR:PORT (what rank 0 printed)")
        host, _, port_text = args.connect.rpartition(":")
        from agents import netinfo

        try:
            bind = netinfo.source_address_towards(socket.gethostbyname(host))
        except OSError:
            bind = host  # the probe's resolve stage reports the real problem
        # Rank 0 by hand is known by its address alone; its name only keys a broker rendezvous, unused here.
        command.update(bind_address=bind, master_address=host, peers=[{"name": "rank0", "address": host}])
        port = int(port_text)
    command["timeouts"] = timeouts
    command["deadline_s"] = contract.default_deadline(timeouts)
    return command, port


def run_pair(args: argparse.Namespace) -> int:
    from agents.runner import run_probe

    command, port = pair_command(args)

    def announce(event: dict[str, Any]) -> None:
        if event.get("event") == "listening":
            print(f"{event['address']}:{event['port']}", flush=True)
            print(
                f"waiting up to {args.wait:.0f}s for: python -m agents pair --rank 1 --connect "
                f"{event['address']}:{event['port']}",
                file=sys.stderr,
                flush=True,
            )

    try:
        result = run_probe(command, port=port, on_event=announce)
    except contract.ContractError as e:
        print(f"invalid probe parameters: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2), flush=True)
    return EXIT_CODES.get(result["status"], 2)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.action == "facts":
        from agents import facts

        print(json.dumps(facts.collect(), indent=2))
        return 0
    if args.action == "pair":
        return run_pair(args)
    if args.action == "check":
        from agents import check

        return check.main(args)
    from agents import broker, liveness, signing

    try:
        broker_url = broker.read_broker_url(args.broker, args.broker_file)
    except broker.BrokerConfigError as e:
        print(str(e), file=sys.stderr)
        return 2
    if not args.name or not broker_url:
        print(
            "run needs --name (or CLUSTER_HEALTH_NODE_NAME) and the broker URL "
            "(CLUSTER_HEALTH_BROKER_URL, --broker-file, or --broker without a password)",
            file=sys.stderr,
        )
        return 2
    from agents.worker import run_agent

    try:
        contract.check_node_name(args.name)
        key = signing.load_key_file(args.key_file, args.name) if args.key_file else None
        deaf_after_s = liveness.deaf_after_s()
    except ValueError as e:  # a ContractError, or a setting that is not a number in range
        print(str(e), file=sys.stderr)
        return 2
    if key is None and os.environ.get("CLUSTER_HEALTH_ALLOW_UNSIGNED_AGENTS", "").lower() not in ("1", "true", "yes"):
        print(
            "run needs --key-file (or CLUSTER_HEALTH_AGENT_KEY_FILE): enrol the node with "
            "`python manage.py enroll NAME --out DIR` (CLUSTER_HEALTH_ALLOW_UNSIGNED_AGENTS=1 for development)",
            file=sys.stderr,
        )
        return 2
    try:
        return run_agent(args.name, args.address, broker_url, args.loglevel, key=key, deaf_after_s=deaf_after_s) or 0
    except broker.BrokerConfigError as e:
        print(f"agent {args.name} cannot use the broker: {e}", file=sys.stderr)
        return 2

"""`python -m agents check`: this node's own health in seconds, for a scheduler's health check or prolog.

Local only, and no torch import in the common case: versions come from package
metadata and torch/version.py; torch is asked (in a child process) only when the
cluster expects an NCCL version that the metadata cannot tell. The expected set
comes from the server (``GET /api/expected``) or a file (``--expect``).

Exit status: 0 when nothing failed (warnings included, so a prolog never drains a
node for a warning), 1 when a check failed (the reasons on stderr), 2 for bad usage.
Only the node's own evidence fails a check: the server unreachable, or not hearing this
node's heartbeats, is a warning (a server outage must never drain the fleet).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agents import netinfo
from agents.options import add_env_options, local_node_name

PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"
NCCL_DISTRIBUTIONS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")
_CUDA_LINE = re.compile(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", re.M)
SERVER_TIMEOUT_S = 5.0


def check(name: str, status: str, detail: str) -> dict[str, Any]:
    return {"name": name, "status": status, "detail": detail}


# -- what this node has, without importing torch ------------------------------------


def local_versions() -> dict[str, Any]:
    """torch, CUDA (torch's build) and NCCL versions from installed metadata; None where unknown."""
    out: dict[str, Any] = {"torch": None, "cuda": None, "nccl": None}
    try:
        out["torch"] = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return out
    spec = importlib.util.find_spec("torch")  # finds the package without running its __init__
    for location in (spec.submodule_search_locations or []) if spec else []:
        try:
            match = _CUDA_LINE.search((Path(location) / "version.py").read_text())
        except OSError:
            continue
        if match:
            out["cuda"] = match.group(1)
            break
    for dist in NCCL_DISTRIBUTIONS:
        try:
            out["nccl"] = importlib.metadata.version(dist)
            break
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def agent_processes(proc_root: str = "/proc", name: str | None = None) -> list[int]:
    """Pids of running agents (``python -m agents run`` or the ``cluster-health-agent run`` script).

    With ``name``, an agent started with another ``--name`` is not this node's (agents of
    several nodes share one process table in containers and test beds); one named by its
    environment counts.
    """
    pids = []
    for entry in os.listdir(proc_root):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            argv = Path(proc_root, entry, "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv if a]
        for i, word in enumerate(words[:-1]):
            if (word == "agents" and i and words[i - 1] == "-m" or word.endswith("cluster-health-agent")) and words[
                i + 1
            ] == "run":
                if name is None or _named(words[i + 2 :]) in (None, name):
                    pids.append(int(entry))
                break
    return pids


def _named(args: list[str]) -> str | None:
    """The value of ``--name`` among an agent's arguments, or None."""
    for i, arg in enumerate(args):
        if arg == "--name" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--name="):
            return arg.split("=", 1)[1]
    return None


# -- the checks: pure functions of what was gathered ------------------------------


def interface_checks(interfaces: Sequence[Mapping[str, Any]], expected_ifname: str | None) -> list[dict[str, Any]]:
    up = [i for i in interfaces if i.get("up") and not i.get("loopback") and i.get("addresses")]
    out = [
        check(
            "interfaces",
            PASS if up else FAIL,
            f"up with an address: {', '.join(i['name'] for i in up)}"
            if up
            else "no non-loopback interface is up with an address",
        )
    ]
    if expected_ifname:
        found = next((i for i in interfaces if i["name"] == expected_ifname), None)
        if found is None:
            out.append(check("expected_interface", FAIL, f"{expected_ifname} (the cluster's interface) is missing"))
        elif not found.get("up") or not found.get("addresses"):
            out.append(check("expected_interface", FAIL, f"{expected_ifname} is down or has no address"))
        else:
            out.append(check("expected_interface", PASS, f"{expected_ifname} up: {', '.join(found['addresses'][:3])}"))
    return out


def hostname_check(host: dict[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    environ = os.environ if environ is None else environ
    if host.get("error"):
        return check("hostname", FAIL, f"{host['hostname']} does not resolve: {host['error']}")
    if host.get("loopback") and environ.get("GLOO_SOCKET_IFNAME"):
        return check(
            "hostname",
            WARN,
            f"{host['hostname']} resolves only to loopback; GLOO_SOCKET_IFNAME="
            f"{environ['GLOO_SOCKET_IFNAME']} keeps Gloo off it",
        )
    if host.get("loopback"):
        return check("hostname", FAIL, host.get("warning") or f"{host['hostname']} resolves only to loopback")
    return check("hostname", PASS, f"{host['hostname']} resolves to {', '.join(host.get('resolves_to') or [])}")


def version_checks(have: dict[str, Any], expected: dict[str, Any]) -> list[dict[str, Any]]:
    """Each version against what the cluster expects: one value, or several while an upgrade is declared."""
    out = []
    for key in ("torch", "cuda", "nccl"):
        want = expected.get(key)
        accepted = [str(v) for v in (want if isinstance(want, list) else [want]) if v]
        if not accepted:
            continue
        runs = " or ".join(accepted) + (" (a declared upgrade)" if len(accepted) > 1 else "")
        got = have.get(key)
        if got is None:
            out.append(check(f"{key}_version", FAIL, f"{key} {runs} expected; none found on this node"))
        elif str(got) not in accepted:
            out.append(check(f"{key}_version", FAIL, f"{key} {got} here, the cluster runs {runs}"))
        else:
            out.append(check(f"{key}_version", PASS, f"{key} {got}"))
    return out


def gpu_check(gpus: dict[str, Any], expected_count: int | None) -> dict[str, Any] | None:
    if not expected_count:
        return None
    seen = len(gpus.get("devices") or [])
    if seen >= expected_count:
        return check("gpus", PASS, f"{seen} GPU(s) visible")
    why = f" ({gpus['error']})" if gpus.get("error") else ""
    return check("gpus", FAIL, f"{seen} of {expected_count} expected GPU(s) visible{why}")


def agent_checks(pids: list[int], node: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The agent's own process (local evidence: fails), and what the server says of its heartbeats.

    The server's view is never more than a warning: a server worker restarting, a database
    failing over or an ingest consumer stalled for longer than the online window makes
    every node look silent at once, and a check that failed on it would drain the fleet.
    Only what this node shows of itself may fail the check.
    """
    out = [
        check(
            "agent_process",
            PASS if pids else FAIL,
            f"running (pid {', '.join(map(str, pids))})" if pids else "no cluster-health agent is running",
        )
    ]
    if node is not None:
        if not node.get("registered"):
            out.append(check("agent_heartbeat", WARN, "the server does not know this node (not acted on here)"))
        elif node.get("online"):
            out.append(check("agent_heartbeat", PASS, f"last heartbeat {node.get('heartbeat_age_s', 0):.0f}s ago"))
        else:
            age = node.get("heartbeat_age_s") or 0
            out.append(
                check(
                    "agent_heartbeat",
                    WARN,
                    f"the server heard no heartbeat for {age:.0f}s: the server's view, not acted on here",
                )
            )
    return out


def verdict(checks: list[dict[str, Any]]) -> str:
    statuses = {c["status"] for c in checks}
    return FAIL if FAIL in statuses else WARN if WARN in statuses else PASS


# -- gathering and the command -----------------------------------------------------


class ServerAnswerError(ValueError):
    """The server's answer is not the expected set (a proxy's page, a truncated body, a server bug)."""


def _optional(doc: dict[str, Any], name: str, kinds: tuple[type, ...]) -> Any:
    value = doc.get(name)
    if value is not None and (not isinstance(value, kinds) or isinstance(value, bool) and bool not in kinds):
        raise ServerAnswerError(f"{name}: expected {' or '.join(k.__name__ for k in kinds)}")
    return value


def expected_from_answer(doc: Any) -> dict[str, Any]:
    """GET /api/expected's answer checked field by field, as the expected set the checks read: versions
    (each one value, or the values a declared upgrade accepts), interface, GPU count, and the node's
    registration and heartbeat as the server sees them. Anything else raises ServerAnswerError."""
    if not isinstance(doc, dict):
        raise ServerAnswerError("expected a JSON object")
    versions = _optional(doc, "versions", (dict,)) or {}
    accepted = _optional(doc, "accepted", (dict,)) or {}
    want: dict[str, Any] = {}
    for key in ("torch", "cuda", "nccl", "driver"):
        one = _optional(versions, key, (str,))
        several = _optional(accepted, key, (list,))
        if several is not None and not all(isinstance(v, str) for v in several):
            raise ServerAnswerError(f"accepted.{key}: expected a list of strings")
        want[key] = several or one
    out: dict[str, Any] = {
        "versions": want,
        "interface": _optional(doc, "interface", (str,)),
        "gpu_count": _optional(doc, "gpu_count", (int,)),
    }
    node = _optional(doc, "node", (dict,))
    if node is not None:
        out["node"] = {
            "registered": _optional(node, "registered", (bool,)),
            "online": _optional(node, "online", (bool,)),
            "heartbeat_age_s": _optional(node, "heartbeat_age_s", (int, float)),
        }
    return out


def fetch_expected(server: str, node: str, token: str | None) -> dict[str, Any]:
    url = server.rstrip("/") + "/api/expected?node=" + urllib.parse.quote(node)
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=SERVER_TIMEOUT_S) as resp:
        return expected_from_answer(json.load(resp))


def _token(args: argparse.Namespace) -> str | None:
    path = args.token_file or os.environ.get("CLUSTER_HEALTH_API_TOKEN_FILE")
    if path:
        return Path(path).read_text().strip()
    return os.environ.get("CLUSTER_HEALTH_API_TOKEN")


def run_checks(args: argparse.Namespace) -> list[dict[str, Any]]:
    from agents import facts, gpu

    checks: list[dict[str, Any]] = []
    expected: dict[str, Any] = {}
    node_status = None
    if args.expect:
        expected = json.loads(Path(args.expect).read_text())
    elif args.server:
        try:
            expected = fetch_expected(args.server, args.name, _token(args))
            node_status = expected.get("node")
        except Exception as exc:
            # Whatever went wrong talking to the server (down, a truncated body, a proxy's page, an answer
            # of the wrong shape) is the server's trouble: a warning, and the local checks decide alone.
            why = f"{type(exc).__name__}: {exc}"[:300]
            checks.append(check("server", WARN, f"expected set not fetched from {args.server}: {why}"))
    versions = local_versions()
    want = expected.get("versions") or {}
    if want.get("nccl") and versions["torch"] and versions["nccl"] is None:
        versions.update(
            {
                k: v
                for k, v in facts.torch_versions_in_subprocess(timeout=60).items()
                if k in ("torch", "cuda", "nccl") and v
            }
        )  # the uncommon case: ask torch itself
    checks += interface_checks(netinfo.interfaces(), args.interface or expected.get("interface"))
    checks.append(hostname_check(facts.hostname_facts()))
    checks += version_checks(versions, want)
    gpus = gpu.collect() if expected.get("gpu_count") else {}
    gc = gpu_check(gpus, expected.get("gpu_count"))
    if gc:
        checks.append(gc)
    if not args.no_agent:
        checks += agent_checks(agent_processes(name=args.name), node_status)
    return checks


def build_parser(sub: Any) -> None:  # argparse's subparsers action
    p = sub.add_parser("check", help="this node's health in seconds (scheduler health check / prolog)")
    p.add_argument("--json", action="store_true", help='print {"checks": [...], "verdict": ...}')
    add_env_options(
        p,
        (
            "--server",
            "CLUSTER_HEALTH_SERVER_URL",
            None,
            "server URL to fetch the expected versions and interface from (GET /api/expected)",
        ),
        ("--name", "CLUSTER_HEALTH_NODE_NAME", local_node_name(), "this node's name on the server"),
    )
    p.add_argument("--expect", help="a JSON file with the expected set instead of the server")
    p.add_argument("--token-file", help="API token for --server (env CLUSTER_HEALTH_API_TOKEN[_FILE])")
    p.add_argument("--interface", help="the interface the cluster uses (default: the expected set's)")
    p.add_argument("--no-agent", action="store_true", help="do not require a running agent")


def main(args: argparse.Namespace) -> int:
    started = time.monotonic()
    checks = run_checks(args)
    result = verdict(checks)
    if args.json:
        print(
            json.dumps(
                {
                    "node": args.name,
                    "checks": checks,
                    "verdict": result,
                    "elapsed_s": round(time.monotonic() - started, 3),
                },
                indent=2,
            )
        )
    else:
        for c in checks:
            print(f"{c['status']:4}  {c['name']}: {c['detail']}")
    for c in checks:
        if c["status"] == FAIL:
            print(f"cluster-health check: {c['name']}: {c['detail']}", file=sys.stderr)
    return 1 if result == FAIL else 0

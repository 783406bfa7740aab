"""A sweep request: validated and bounded before any row exists, then stored pending and started after the commit."""

from __future__ import annotations

import secrets

from django.db import transaction

from agents import contract
from cluster_health import vocabulary
from cluster_health.core import planner
from cluster_health.models import Node, Sweep
from cluster_health.queues import dispatch
from cluster_health.sweeps import confirming

MAX_NODES = contract.MAX_WORLD_SIZE
MAX_PAIRS = 10000  # explicit pairs in one "pairs" sweep
MAX_SEED = 2**31 - 1


class SweepRequestError(ValueError):
    """A sweep request is out of bounds; the text names the parameter."""


def _int(params: dict, key: str, lo: int, hi: int):
    val = params.get(key)
    if val is None:
        return None
    if isinstance(val, bool) or not isinstance(val, int) or not lo <= val <= hi:
        raise SweepRequestError(f"{key}: expected a whole number in {lo}..{hi}, got {val!r}")
    return val


def _seconds(params: dict, key: str, lo: float, hi: float) -> float | None:
    """A number of seconds in lo..hi (an int or a float, never a bool or NaN), as a float; None when not given."""
    val = params.get(key)
    if val is None:
        return None
    if isinstance(val, bool) or not isinstance(val, (int, float)) or not lo <= val <= hi:  # NaN fails both
        raise SweepRequestError(f"{key}: expected seconds in {lo:g}..{hi:g}, got {val!r}")
    return float(val)


def clean_request(kind: str = "full", backend: str = "gloo", nodes=None, **params) -> dict:
    """Validate and bound a sweep request; returns the fields to store, or raises SweepRequestError."""
    if kind not in vocabulary.SWEEP_KINDS:
        raise SweepRequestError(f"kind: {kind!r} is not one of {', '.join(vocabulary.SWEEP_KINDS)}")
    if backend not in contract.BACKENDS:
        raise SweepRequestError(f"backend: {backend!r} is not one of {', '.join(contract.BACKENDS)}")
    try:
        clean = _clean_nodes(nodes)
        clean.update(_clean_probe_params(params))
        if kind == "pairs":
            clean["pairs"] = _clean_pairs(params.get("pairs"))
        if params.get("stalest_first") is not None:
            if params["stalest_first"] is not True or kind != "quick":
                raise SweepRequestError("stalest_first: only a quick sweep takes it, as true")
            clean["stalest_first"] = True  # its rounds prefer the pairs measured longest ago (a gang check's)
        clean.update(_clean_sampling(kind, params))
    except contract.ContractError as exc:
        raise SweepRequestError(str(exc)) from None
    if kind == "preflight" and clean.get("master_port") is None:
        raise SweepRequestError("master_port: a launch rehearsal needs the MASTER_PORT the job will use")
    if params.get("baseline") is not None:
        clean["baseline"] = _clean_baseline_spec(params["baseline"])
    if params.get("confirm_after_s") is not None:
        clean["confirm_after_s"] = _seconds(params, "confirm_after_s", 0, confirming.MAX_AFTER_S)
    _check_deadline(kind, clean)
    return {"kind": kind, "backend": backend, "params": clean}


def _check_deadline(kind: str, clean: dict) -> None:
    """Each stage timeout may pass on its own and still sum past the probe deadline cap: refuse that here,
    not when the first command is built (which would fail the sweep after it started)."""
    if clean.get("deadline_s") is not None:
        return  # an explicit deadline is bounded above and caps the stages itself
    settings = dispatch.probe_settings(clean, "bandwidth", kind="discover" if kind == "discover" else "pair")
    if settings["deadline_s"] > contract.MAX_DEADLINE_S:
        raise SweepRequestError(
            f"timeouts: the stages add up to a {settings['deadline_s']:.0f}s probe deadline, "
            f"at most {contract.MAX_DEADLINE_S:.0f}s allowed"
        )


def _clean_nodes(nodes) -> dict:
    if not nodes:
        return {}
    if not isinstance(nodes, list) or len(nodes) > MAX_NODES:
        raise SweepRequestError(f"nodes: expected a list of at most {MAX_NODES} node names")
    names = [contract.check_node_name(n, "nodes") for n in nodes]
    if len(set(names)) != len(names):
        raise SweepRequestError("nodes: a node is listed twice")
    return {"nodes": names}


def _clean_probe_params(params: dict) -> dict:
    """The probe parameters of a request, each bounded as the contract bounds a command's."""
    clean: dict = {}
    if params.get("sizes") is not None:
        clean["sizes"] = contract.validate_sizes(params["sizes"])
    if params.get("timeouts") is not None:
        clean["timeouts"] = contract.validate_timeouts(params["timeouts"])
    for key, lo, hi in (
        ("iterations", 1, contract.MAX_ITERATIONS),
        ("warmup", 0, contract.MAX_WARMUP),
        ("latency_iterations", 1, contract.MAX_ITERATIONS),
        ("master_port", 1, 65535),
    ):
        val = _int(params, key, lo, hi)
        if val is not None:
            clean[key] = val
    if params.get("deadline_s") is not None:
        clean["deadline_s"] = _seconds(params, "deadline_s", 1, contract.MAX_DEADLINE_S)
    if params.get("last_stage") is not None:
        if params["last_stage"] not in contract.LAST_STAGES:
            raise SweepRequestError(f"last_stage: expected one of {', '.join(contract.LAST_STAGES)}")
        clean["last_stage"] = params["last_stage"]
    if params.get("multi_group"):
        clean["multi_group"] = True
    if params.get("env"):
        clean["env"] = contract.validate_env(params["env"])
    if params.get("master") is not None:
        clean["master"] = contract.check_node_name(params["master"], "master")
    return clean


def _clean_sampling(kind: str, params: dict) -> dict:
    """A sampled sweep's rounds and seed; the seed is drawn here when none is given, and kept, so that
    the same pairs can be run again. Other kinds take neither."""
    given = [key for key in ("rounds", "seed") if params.get(key) is not None]
    if kind != "sampled":
        if given:
            raise SweepRequestError(f"{given[0]}: only a sampled sweep takes {given[0]}")
        return {}
    rounds = _int(params, "rounds", 1, MAX_NODES)
    seed = _int(params, "seed", 0, MAX_SEED)
    return {
        "rounds": planner.SAMPLED_ROUNDS if rounds is None else rounds,
        "seed": secrets.randbelow(MAX_SEED + 1) if seed is None else seed,
    }


def _clean_pairs(raw) -> list[list[str]]:
    if not isinstance(raw, list) or not raw or len(raw) > MAX_PAIRS:
        raise SweepRequestError(f"pairs: a pairs sweep needs a list of 1..{MAX_PAIRS} [a, b] pairs")
    try:
        return [[contract.check_node_name(a, "pairs"), contract.check_node_name(b, "pairs")] for a, b in raw]
    except (TypeError, ValueError) as exc:
        raise SweepRequestError(f"pairs: expected [a, b] node-name pairs ({exc})") from None


def _clean_baseline_spec(spec) -> str:
    spec = str(spec)
    if spec in ("none", "rolling") or (spec.startswith(("sweep:", "baseline:")) and spec.split(":", 1)[1].isdecimal()):
        return spec
    raise SweepRequestError(f"baseline: {spec!r} is not none, rolling, sweep:<id> or baseline:<id>")


def _refuse_retired(params: dict) -> None:
    """A sweep that names a retired node is refused: it left the fleet, and its silence would fail the sweep."""
    named = set(params.get("nodes") or ()) | {n for pair in params.get("pairs") or () for n in pair}
    if params.get("master"):
        named.add(params["master"])
    retired = sorted(Node.objects.filter(name__in=named, active=False).values_list("name", flat=True))
    if retired:
        raise SweepRequestError(
            f"nodes: {', '.join(retired[:20])} retired (python manage.py nodes activate "
            f"NAME puts a node back in the fleet)"
        )


def request_sweep(*, source: str, user=None, marks: dict | None = None, **request) -> Sweep:
    """Create a pending sweep and ask the server worker to start it once the row is committed.

    ``marks``: what the server itself notes in its params (the Slurm job a gang check is for,
    the hold an idle sweep runs under); never from a request.
    """
    fields = clean_request(**request)
    _refuse_retired(fields["params"])
    fields["params"].update(marks or {})
    with transaction.atomic():
        sweep = Sweep.objects.create(
            source=source, requested_by=user if user and user.is_authenticated else None, **fields
        )
        transaction.on_commit(lambda: dispatch.send_to_server(vocabulary.TASK_START_SWEEP, sweep_id=sweep.pk))
    return sweep

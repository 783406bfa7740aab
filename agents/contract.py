"""The message contract between the server and the node agents.

Plain data only: no Django, no torch, no Celery. Both sides import this module,
so a field renamed here is renamed everywhere. Every message is a JSON object
with a version field ``v``; validators return a normalised copy or raise
``ContractError`` with a message that names the offending field.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
from collections.abc import Callable
from typing import Any, NamedTuple

VERSION = 1

# Queues and task names (Celery routes by these strings; nothing else is shared).
# Agents' probe halves and heartbeats (tasks TASK_RESULT, TASK_HEARTBEAT) travel on a queue of
# their own, which the server's ingest consumers drain in batches (cluster_health/ingest/consumer.py),
# not one Celery task each.
# Each node sends on a list of its own, ingest_queue(node) = "server.ingest.NODE", which only that node's
# broker user may append to; the server drains every node's list fairly and caps each
# (docs/CONTROL_PLANE.md, "Ingest"). INGEST_QUEUE, the one list the whole fleet shared before, is still
# drained, for agents of the previous version during an upgrade.
INGEST_QUEUE = "server.ingest"
INGEST_QUEUE_PREFIX = INGEST_QUEUE + "."
AGENT_QUEUE_PREFIX = "agent."
TASK_PROBE = "agent.probe"  # server -> agent: run one probe half (kwargs: command)
TASK_RESULT = "server.result"  # agent -> server: a probe half finished (kwargs: result)
TASK_HEARTBEAT = "server.heartbeat"  # agent -> server: alive, with facts (kwargs: heartbeat)

# Redis keys under which rank 0 publishes the real port of its TCPStore: PREFIX + rank 0's node + ":" + the
# probe's rendezvous id (rendezvous_key), so a node's broker user writes only its own (cluster_health.queues.acl).
RENDEZVOUS_KEY_PREFIX = "cluster-health:rdv:"

# Vocabulary (docs/VOCABULARY.md): stable words used by the CLI JSON, the API and the tests.
STATUSES = ("ok", "degraded", "failed", "timeout", "offline", "skipped")
PASSED_STATUSES = ("ok", "degraded")  # a pair that worked; its measurements count
HARMLESS_STATUSES = (*PASSED_STATUSES, "skipped")  # a half that reports no failure
# Worst first: merging two halves keeps the one that ranks worse.
STATUS_SEVERITY = {"offline": 5, "timeout": 4, "failed": 3, "degraded": 2, "skipped": 1, "ok": 0}
STAGES = ("resolve", "connect", "store", "init", "collective", "bandwidth")
REASONS = (
    "dns",
    "refused",
    "unreachable",
    "connect_timeout",
    "store_timeout",
    "transport",
    "collective_timeout",
    "collective_error",
    "data_mismatch",
    "port_in_use",
    "version_mismatch",
    "backend_unavailable",
    "agent_offline",
    "probe_crashed",
    "below_baseline",
    "interface_missing",
    "cancelled",
    "no_gpu",  # the gpu check on a node without a usable NVIDIA GPU (skipped, not failed)
    "gpu_error",  # a CUDA error, a failed allocation or a wrong result in the gpu check
    "duplicate_gpu",  # NCCL: two ranks on one GPU
    # Gray failures, named from the evidence rather than from one exception:
    "lossy",  # connections form but TCP retransmits a share of its segments
    "size_stall",  # small messages pass, transfers from some size on never complete (MTU, black hole)
    "inbound_blocked",  # a node accepts no inbound connection while it connects out fine
    "segment",  # every pair between two groups of nodes fails or slows, each group fine inside
    "below_peers",  # set by the server: far below the same sweep's links of the same kind
)
BACKENDS = ("gloo", "nccl")
PROBE_KINDS = ("pair", "group", "discover", "preflight")
LAST_STAGES = ("collective", "bandwidth")  # where a probe may be asked to stop

# Bounds on every probe parameter: a command outside them is refused, not clamped.
MAX_MESSAGE_BYTES = 256 * 1024 * 1024  # one all_reduce buffer
MIN_MESSAGE_BYTES = 4
MAX_SIZES = 24
MAX_ITERATIONS = 200
MAX_WARMUP = 50
MAX_STAGE_TIMEOUT_S = 300.0
MAX_DEADLINE_S = 900.0
MAX_BANDWIDTH_BUDGET_S = 120.0
MAX_WORLD_SIZE = 1024
MAX_TEXT = 4096  # hints, details
MAX_STDERR_TAIL = 16384
# Facts and other free-form objects an agent sends: bounded in depth, entries, string length
# and encoded size, so one node cannot make every page that lists nodes slow.
MAX_FACTS_BYTES = 256 * 1024
MAX_FACTS_DEPTH = 6
MAX_FACTS_ENTRIES = 512  # in any one object or list (interfaces on a host with many veths)
MAX_FACTS_ENV = 256  # the launch variables a node reports
MAX_FACTS_STRING = 4096
MAX_DETAIL_ENTRIES = 64  # versions, stage_times, timings, extra of a result
MAX_DETAIL_BYTES = 8 * 1024  # each of those, encoded (a real one is under 1 KiB)
# A half, encoded as UTF-8: a full stderr tail and evidence fit; a real one is about 5 KiB.
MAX_RESULT_BYTES = 64 * 1024
# A half's evidence (agents/evidence.py): bounded so a result stays a small message.
MAX_EVIDENCE_KEYS = 32
MAX_EVIDENCE_BYTES = 8192
MAX_EVIDENCE_DEPTH = 16

DEFAULT_SIZES = tuple(1024 * 4**k for k in range(9))  # 1 KiB .. 64 MiB, factor 4
DEFAULT_TIMEOUTS = {
    "resolve": 2.0,
    "connect": 3.0,
    "store": 5.0,
    "init": 8.0,
    "collective": 5.0,
    "bandwidth": 6.0,  # the bandwidth stage's time budget; sizes stop growing before it is spent
}
# A discover probe tries at most this many interface combinations, each Gloo attempt
# bounded by DISCOVER_ATTEMPT_S, then waits in lockstep for the peer.
MAX_DISCOVER_COMBINATIONS = 9
DISCOVER_ATTEMPT_S = 3.0
DISCOVER_LOCKSTEP_S = 3.0
DEADLINE_SLACK_S = 15.0  # process start and result reporting on top of the stages' budgets
MAX_ENV_VARS = 32
MAX_ENV_VALUE = 256
DEFAULT_ITERATIONS = 10
DEFAULT_WARMUP = 2
DEFAULT_LATENCY_ITERATIONS = 20

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_RDV_RE = re.compile(r"^[A-Za-z0-9_-]{8,64}$")
# The secret a probe's ranks sign their rendezvous values with (the server's, in the signed command).
_RDV_KEY_RE = re.compile(r"^[0-9a-f]{32,64}$")


class ContractError(ValueError):
    """A message does not follow the contract; the text names the field."""


_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlong = 2, 80, 80, 40


def shown(val: Any) -> str:
    """A short repr for an error message: a huge or deeply nested value from the wire is cut, never recursed into."""
    return _SHOWN.repr(val)


def agent_queue(node_name: str) -> str:
    return AGENT_QUEUE_PREFIX + check_node_name(node_name)


def ingest_queue(node_name: str) -> str:
    """The list a node sends its halves and heartbeats on: its own, so that no node can delay another's."""
    return INGEST_QUEUE_PREFIX + check_node_name(node_name)


def agent_unacked_keys(node_name: str) -> dict[str, str]:
    """The Redis keys where a node's agent keeps the commands it took and has not acked (kombu's
    transport options): its own, so that one node's broker user never writes the server's."""
    queue = agent_queue(node_name)
    return {
        "unacked_key": f"unacked.{queue}",
        "unacked_index_key": f"unacked_index.{queue}",
        "unacked_mutex_key": f"unacked_mutex.{queue}",
    }


def rendezvous_key(master_node: str, rendezvous_id: str) -> str:
    """Where rank 0 of a probe, on ``master_node``, publishes its store's port (``*``: every such key of that node)."""
    return f"{RENDEZVOUS_KEY_PREFIX}{check_node_name(master_node)}:{rendezvous_id}"


def master_node(command: dict[str, Any]) -> str:
    """The node of a probe command's rank 0: this node at rank 0, else the first of its peers (listed in rank order)."""
    return str(command["node"] if command["rank"] == 0 else command["peers"][0]["name"])


def agent_transport_options(node_name: str) -> dict[str, Any]:
    """kombu's Redis transport options for a node's agent: its own unacked keys, and one list for its
    queue (no priority lists beside it, whose names a Redis ACL pattern could not tell from another
    node's queue); commands are sent without a priority."""
    return {**agent_unacked_keys(node_name), "priority_steps": [0]}


def is_node_name(name: Any) -> bool:
    return isinstance(name, str) and bool(_NAME_RE.match(name))


def check_node_name(name: Any, field: str = "node") -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ContractError(
            f"{field}: {shown(name)} is not a valid node name (letters, digits, '.', '_', '-', at most 63 characters)"
        )
    return name


def _object(val: Any, where: str, expected: str = "an object") -> dict[str, Any]:
    """val, when it is a JSON object; where names it in the error."""
    if not isinstance(val, dict):
        raise ContractError(f"{where}: expected {expected}")
    return val


def _obj(msg: Any, what: str) -> dict[str, Any]:
    obj = _object(msg, what, f"a JSON object, got {type(msg).__name__}")
    v = obj.get("v")
    if v != VERSION:
        raise ContractError(f"{what}.v: unsupported contract version {shown(v)} (this side speaks {VERSION})")
    return obj


def _num(
    msg: dict[str, Any],
    field: str,
    lo: float,
    hi: float,
    *,
    integer: bool = False,
    optional: bool = False,
    default: Any = None,
) -> Any:
    val = msg.get(field, default)
    kind = type(val)
    # The usual case first, in one test: a plain int, or a finite float where a float may be.
    if (kind is int or (kind is float and not integer and math.isfinite(val))) and lo <= val <= hi:
        return val
    if val is None:
        if optional:
            return None
        raise ContractError(f"{field}: required")
    if isinstance(val, bool) or not isinstance(val, (int, float)):
        raise ContractError(f"{field}: expected a number, got {shown(val)}")
    if integer and (not isinstance(val, int)):
        if isinstance(val, float) and val.is_integer():
            val = int(val)
        else:
            raise ContractError(f"{field}: expected an integer, got {shown(val)}")
    if isinstance(val, float):
        _finite(val, field)
    if not lo <= val <= hi:
        raise ContractError(f"{field}: {val} is outside the allowed range {lo}..{hi}")
    return val


def _choice(msg: dict[str, Any], field: str, choices: Any, *, optional: bool = False, default: Any = None) -> Any:
    val = msg.get(field, default)
    if val is None and optional:
        return None
    if val not in choices:
        raise ContractError(f"{field}: {shown(val)} is not one of {', '.join(map(str, choices))}")
    return val


def _text(msg: dict[str, Any], field: str, limit: int = MAX_TEXT) -> str | None:
    """An optional text field, NUL removed and cut to limit characters (a stderr tail keeps its end)."""
    val = msg.get(field)
    if val is None:
        return None
    if not isinstance(val, str):
        raise ContractError(f"{field}: expected a string, got {type(val).__name__}")
    val = storable(val)  # real probe output can hold NUL; PostgreSQL text cannot
    return val[-limit:] if field == "stderr_tail" else val[:limit]


def storable(text: str) -> str:
    """Text as a database can keep it: NUL removed, lone surrogates (no UTF-8 for them) as U+FFFD.

    PostgreSQL refuses both in text and jsonb, and a driver cannot encode a lone surrogate
    at all: one such string from a node would make every write that carries it fail.
    """
    if "\x00" in text:
        text = text.replace("\x00", "")
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    return text


def _finite(val: float, field: str) -> float:
    if not math.isfinite(val):
        raise ContractError(f"{field}: {shown(val)} is not finite")
    return val


class JsonBounds(NamedTuple):
    """How deep a free-form JSON value may nest, how many entries each object or list may hold, how long a string."""

    depth: int
    entries: int
    string: int


FACTS_BOUNDS = JsonBounds(MAX_FACTS_DEPTH, MAX_FACTS_ENTRIES, MAX_FACTS_STRING)
DETAIL_BOUNDS = JsonBounds(4, MAX_DETAIL_ENTRIES, MAX_TEXT)  # versions, stage_times, timings, extra of a result
EVIDENCE_BOUNDS = JsonBounds(MAX_EVIDENCE_DEPTH, MAX_EVIDENCE_BYTES, MAX_EVIDENCE_BYTES)  # the size check comes first


def bounded_json(val: Any, field: str, bounds: JsonBounds = FACTS_BOUNDS) -> Any:
    """A copy of a free-form JSON value with NUL removed; refuses NaN, odd types and anything too deep or long."""
    return _bounded(val, field, bounds.depth, bounds)


def _where(at: Any) -> str:
    """The path of a value in an error message: ``at`` is a field name, or (parent path, key or index)."""
    if isinstance(at, str):
        return at
    parent, step = at
    return f"{_where(parent)}[{step}]" if isinstance(step, int) else f"{_where(parent)}.{step[:64]}"


_JSON_TYPES: tuple[type, ...] = (str, int, float, dict, list)


def _plain(val: Any) -> Any:
    """A subclass of a JSON type as that type (None for anything else)."""
    for json_type in _JSON_TYPES:
        if isinstance(val, json_type):
            return json_type(val)
    return None


def _bounded(val: Any, at: Any, depth: int, bounds: JsonBounds) -> Any:
    # Every agent message's free-form parts pass here (a real probe half has about 90 values): the
    # path of a value is built only for an error message, never on the way through.
    kind = type(val)
    if kind is str:
        if len(val) > bounds.string:
            raise ContractError(f"{_where(at)}: a string of {len(val)} characters, at most {bounds.string} allowed")
        return storable(val)
    if kind is float:
        return val if math.isfinite(val) else _finite(val, _where(at))
    if kind is int:
        if abs(val) > 2**63:
            raise ContractError(f"{_where(at)}: integer out of range")
        return val
    if val is None or kind is bool:
        return val
    if kind is not dict and kind is not list:
        plain = _plain(val)  # a subclass (an IntEnum, a defaultdict): checked as its base type
        if plain is not None:
            return _bounded(plain, at, depth, bounds)
        raise ContractError(f"{_where(at)}: {type(val).__name__} is not a JSON value")
    if depth <= 0:
        raise ContractError(f"{_where(at)}: nested too deep")
    if len(val) > bounds.entries:
        raise ContractError(f"{_where(at)}: {len(val)} entries, at most {bounds.entries} allowed")
    if kind is list:
        return [
            v if _plain_leaf(v, bounds.string) else _bounded(v, (at, i), depth - 1, bounds) for i, v in enumerate(val)
        ]
    out = {}
    string = bounds.string
    for k, v in val.items():
        if not isinstance(k, str) or len(k) > 256:
            raise ContractError(f"{_where(at)}: keys must be strings of at most 256 characters")
        key = k if "\x00" not in k and k.isascii() else storable(k)
        # _plain_leaf, written out: a call per value was most of this walk's time.
        leaf = type(v)
        if (
            (leaf is str and len(v) <= string and "\x00" not in v and v.isascii())
            or (leaf is float and math.isfinite(v))
            or (leaf is int and -(2**63) <= v <= 2**63)
            or v is None
            or leaf is bool
        ):
            out[key] = v
        else:
            out[key] = _bounded(v, (at, key), depth - 1, bounds)
    return out


def _plain_leaf(val: Any, string: int) -> bool:
    """Whether a value passes _bounded as it is: a finite float, an int in range, a boolean, null, or a
    short ASCII string without NUL (most of a half's values), so that they cost no call of _bounded."""
    kind = type(val)
    if kind is str:
        return len(val) <= string and "\x00" not in val and val.isascii()
    if kind is float:
        return math.isfinite(val)
    if kind is int:
        return bool(-(2**63) <= val <= 2**63)
    return val is None or kind is bool


FACTS_VERSION_KEYS = ("torch", "cuda", "nccl", "driver", "cuda_driver", "python")


def _facts_shape(facts: dict[str, Any]) -> None:
    """The parts of facts the server compares across nodes have the shapes agents/facts.py gives them:
    one node's odd value is refused here, never an error for every node that reads the fleet's."""
    versions = facts.get("versions")
    if versions is not None:
        for key, value in _object(versions, "facts.versions").items():
            wanted = (str,) if key in FACTS_VERSION_KEYS else (str, int, float, bool)
            if value is not None and not isinstance(value, wanted):
                raise ContractError(f"facts.versions.{key}: expected {'a string' if wanted == (str,) else 'a value'}")
    interfaces = facts.get("interfaces")
    if interfaces is not None and not isinstance(interfaces, list):
        raise ContractError("facts.interfaces: expected a list")
    for i, iface in enumerate(interfaces or []):
        if (
            not isinstance(iface, dict)
            or not isinstance(iface.get("name"), str)
            or not isinstance(iface.get("addresses", []), list)
            or not all(isinstance(a, str) for a in iface.get("addresses") or [])
        ):
            raise ContractError(f"facts.interfaces[{i}]: expected an object with a name and a list of addresses")


def validate_facts(facts: Any) -> dict[str, Any]:
    """A node's facts: a bounded JSON object (depth, entries, strings, encoded size), env at most MAX_FACTS_ENV."""
    out: dict[str, Any] = bounded_json(_object(facts, "facts"), "facts")
    env = out.get("env")
    if env is not None and (not isinstance(env, dict) or len(env) > MAX_FACTS_ENV):
        raise ContractError(f"facts.env: expected an object of at most {MAX_FACTS_ENV} variables")
    _facts_shape(out)
    size = len(json.dumps(out, separators=(",", ":")))
    if size > MAX_FACTS_BYTES:
        raise ContractError(f"facts: {size} bytes, at most {MAX_FACTS_BYTES} allowed")
    return out


# Encoders made once: json.dumps with any option builds a new encoder at every call, and a half is
# measured several times on its way in.
_COMPACT = json.JSONEncoder(separators=(",", ":"))
_STRICT = json.JSONEncoder(allow_nan=False)


def validate_details(msg: dict[str, Any], field: str) -> dict[str, Any]:
    """One of a result's free-form objects (versions, stage_times, ...): small, flat-ish, bounded."""
    details = _detail_object(msg, field)
    _detail_size(details, field)
    return details


def _detail_object(msg: dict[str, Any], field: str) -> dict[str, Any]:
    val = msg.get(field) or {}
    if not isinstance(val, dict) or len(val) > MAX_DETAIL_ENTRIES:
        raise ContractError(f"{field}: expected an object of at most {MAX_DETAIL_ENTRIES} entries")
    details: dict[str, Any] = bounded_json(val, field, DETAIL_BOUNDS)
    return details


def _detail_size(details: dict[str, Any], field: str) -> None:
    size = len(_COMPACT.encode(details))
    if size > MAX_DETAIL_BYTES:
        raise ContractError(f"{field}: {size} bytes encoded, at most {MAX_DETAIL_BYTES} allowed")


def _address(msg: dict[str, Any], field: str, optional: bool = False) -> str | None:
    val = msg.get(field)
    if val is None and optional:
        return None
    if not isinstance(val, str) or not val or len(val) > 253 or not val.isprintable() or any(c.isspace() for c in val):
        raise ContractError(f"{field}: {shown(val)} is not a host name or address")
    return val


def validate_sizes(sizes: Any) -> list[int]:
    if not isinstance(sizes, (list, tuple)) or not sizes:
        raise ContractError("sizes: expected a non-empty list of message sizes in bytes")
    if len(sizes) > MAX_SIZES:
        raise ContractError(f"sizes: {len(sizes)} sizes requested, at most {MAX_SIZES} allowed")
    out = []
    for s in sizes:
        if isinstance(s, bool) or not isinstance(s, int):
            raise ContractError(f"sizes: {shown(s)} is not a whole number of bytes")
        if not MIN_MESSAGE_BYTES <= s <= MAX_MESSAGE_BYTES:
            raise ContractError(
                f"sizes: {s} bytes is outside {MIN_MESSAGE_BYTES}..{MAX_MESSAGE_BYTES} "
                f"({MAX_MESSAGE_BYTES // 2**20} MiB)"
            )
        out.append(s)
    return sorted(set(out))


def validate_timeouts(timeouts: Any) -> dict[str, float]:
    """A probe's per-stage timeouts: the defaults, with the given ones (None: none) in their place."""
    return merged_timeouts(timeouts, DEFAULT_TIMEOUTS, {"bandwidth": MAX_BANDWIDTH_BUDGET_S})


def merged_timeouts(given: Any, defaults: dict[str, float], limits: dict[str, float] | None = None) -> dict[str, float]:
    """defaults (stage -> seconds, in stage order) with the given stages' timeouts in their place.

    Each given timeout is at most its stage's entry in limits, else MAX_STAGE_TIMEOUT_S; given is None for none.
    """
    merged = dict(defaults)
    if given is None:
        return merged
    if not isinstance(given, dict):
        raise ContractError("timeouts: expected an object of stage -> seconds")
    for stage in given:
        if stage not in defaults:
            raise ContractError(f"timeouts.{stage}: unknown stage (stages: {', '.join(defaults)})")
        merged[stage] = float(_num(given, stage, 0.1, (limits or {}).get(stage, MAX_STAGE_TIMEOUT_S)))
    return merged


def default_deadline(timeouts: dict[str, float]) -> float:
    """Whole-probe wall-clock deadline: every stage's budget plus process start and slack."""
    return round(sum(timeouts.values()) + DEADLINE_SLACK_S, 1)


def discover_budget_s(init_timeout_s: float, combinations: int = MAX_DISCOVER_COMBINATIONS) -> float:
    """Time the discover step may take: each combination's Gloo attempt, plus the lockstep wait after it."""
    return combinations * (min(DISCOVER_ATTEMPT_S, init_timeout_s) + DISCOVER_LOCKSTEP_S) + 2.0


# Launch variables a probe may set: names that tune the transport, nothing that names a
# file, a directory or a library to load (NCCL_NET_PLUGIN=/tmp/x.so would run code on
# every GPU node; NCCL_DEBUG_FILE would write wherever the agent may write).
_ENV_EXACT = frozenset(
    {
        "MASTER_ADDR",
        "MASTER_PORT",
        "GLOO_SOCKET_IFNAME",
        "GLOO_DEVICE_TRANSPORT",
        "NCCL_SOCKET_IFNAME",
        "NCCL_SOCKET_FAMILY",
        "NCCL_SOCKET_NTHREADS",
        "NCCL_NSOCKS_PERTHREAD",
        "NCCL_DEBUG",
        "NCCL_DEBUG_SUBSYS",
        "NCCL_ALGO",
        "NCCL_PROTO",
        "NCCL_MIN_NCHANNELS",
        "NCCL_MAX_NCHANNELS",
        "NCCL_MIN_CTAS",
        "NCCL_MAX_CTAS",
        "NCCL_BUFFSIZE",
        "NCCL_NTHREADS",
        "NCCL_CROSS_NIC",
        "NCCL_SHM_DISABLE",
        "NCCL_CUMEM_ENABLE",
        "NCCL_NVLS_ENABLE",
        "NCCL_COLLNET_ENABLE",
        "NCCL_LAUNCH_MODE",
        "NCCL_CHECKS_DISABLE",
        "NCCL_ASYNC_ERROR_HANDLING",
        "NCCL_BLOCKING_WAIT",
    }
)
_ENV_PREFIXES = ("NCCL_IB_", "NCCL_P2P_", "NCCL_NET_GDR_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_DEBUG")
_ENV_NAME_RE = re.compile(r"^[A-Z][A-Z0-9_]{1,62}$")
_ENV_FILEISH = ("_FILE", "_PLUGIN", "_PATH", "_DIR", "_LIB", "_SO", "_CONF", "_CONFIG")
_ENV_VALUE_RE = re.compile(r"^[A-Za-z0-9 ._,:=+^@-]*$")


def env_name_allowed(name: Any) -> bool:
    """Whether a probe may set this variable: an allow-listed transport knob that names no file."""
    if not (isinstance(name, str) and _ENV_NAME_RE.match(name)):
        return False
    if any(name.endswith(s) or (s + "_") in name for s in _ENV_FILEISH):
        return False
    if any(word in name for word in ("FILE", "PLUGIN", "DUMP", "TRACE")):  # dumps and traces land in files
        return False
    return name in _ENV_EXACT or name.startswith(_ENV_PREFIXES)


def validate_env(env: Any) -> dict[str, str]:
    """Launch variables a probe may set: allow-listed transport knobs, short values without paths."""
    if not isinstance(env, dict) or len(env) > MAX_ENV_VARS:
        raise ContractError(f"env: expected an object of at most {MAX_ENV_VARS} launch variables")
    for k, val in env.items():
        if not env_name_allowed(k):
            raise ContractError(
                f"env.{str(k)[:80]}: not an allowed launch variable (transport settings such as "
                "GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME, NCCL_IB_*, NCCL_DEBUG; nothing naming a file, "
                "directory, path or plugin)"
            )
        if not isinstance(val, str) or len(val) > MAX_ENV_VALUE:
            raise ContractError(f"env.{k}: expected a string of at most {MAX_ENV_VALUE} characters")
        if "/" in val or "\\" in val or not _ENV_VALUE_RE.match(val):
            raise ContractError(
                f"env.{k}: {val[:80]!r} is not allowed (no paths: letters, digits and . _ , : = + ^ @ - only)"
            )
    return dict(env)


def validate_command(msg: Any) -> dict[str, Any]:
    """Validate a probe command sent to one agent (one half of a pair, or one rank of a group)."""
    msg, out = addressed(msg, "command", PROBE_KINDS)
    rdv = msg.get("rendezvous")
    if not isinstance(rdv, str) or not _RDV_RE.match(rdv):
        raise ContractError(f"rendezvous: {shown(rdv)} is not a rendezvous id (8-64 of [A-Za-z0-9_-])")
    out["rendezvous"] = rdv
    key = msg.get("rendezvous_key")
    if key is not None and (not isinstance(key, str) or not _RDV_KEY_RE.match(key)):
        raise ContractError("rendezvous_key: expected 32 to 64 lowercase hex digits")
    out["rendezvous_key"] = key
    out["world_size"] = _num(msg, "world_size", 2, MAX_WORLD_SIZE, integer=True, default=2)
    out["rank"] = _num(msg, "rank", 0, out["world_size"] - 1, integer=True)
    out["backend"] = _choice(msg, "backend", BACKENDS, default="gloo")
    out["bind_address"] = _address(msg, "bind_address")
    out["master_address"] = _address(msg, "master_address")
    out["master_port"] = _num(msg, "master_port", 1, 65535, integer=True, optional=True)
    peers = msg.get("peers", [])
    if not isinstance(peers, list) or len(peers) > MAX_WORLD_SIZE:
        raise ContractError("peers: expected a list of {name, address}")
    out["peers"] = []
    for i, p in enumerate(peers):
        _object(p, f"peers[{i}]")
        out["peers"].append(
            {"name": check_node_name(p.get("name"), f"peers[{i}].name"), "address": _address(p, "address")}
        )
    if out["rank"] > 0 and not out["peers"]:
        raise ContractError("peers: a rank other than 0 needs its peers, rank 0 first (it reads rank 0's rendezvous)")
    out["last_stage"] = _choice(msg, "last_stage", LAST_STAGES, default="bandwidth")
    out["sizes"] = validate_sizes(msg.get("sizes", list(DEFAULT_SIZES)))
    out["iterations"] = _num(msg, "iterations", 1, MAX_ITERATIONS, integer=True, default=DEFAULT_ITERATIONS)
    out["warmup"] = _num(msg, "warmup", 0, MAX_WARMUP, integer=True, default=DEFAULT_WARMUP)
    out["latency_iterations"] = _num(
        msg, "latency_iterations", 1, MAX_ITERATIONS, integer=True, default=DEFAULT_LATENCY_ITERATIONS
    )
    out["timeouts"] = validate_timeouts(msg.get("timeouts"))
    out["deadline_s"] = float(_num(msg, "deadline_s", 1.0, MAX_DEADLINE_S, default=default_deadline(out["timeouts"])))
    out["multi_group"] = bool(msg.get("multi_group", False))
    out["env"] = validate_env(msg.get("env", {}))
    out["expires_at"] = _num(msg, "expires_at", 0, 1e11, optional=True)
    out["lifetime_s"] = _num(msg, "lifetime_s", 1, MAX_DEADLINE_S, optional=True)
    return out


def addressed(
    msg: Any, what: str, kinds: tuple[str, ...], default_kind: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Check a message's version and kind; return it with the validated fields that address it (probe, node)."""
    msg = _obj(msg, what)
    out: dict[str, Any] = {"v": VERSION, "kind": _choice(msg, "kind", kinds, default=default_kind)}
    out["probe_id"] = _num(msg, "probe_id", 0, 2**62, integer=True)
    out["sweep_id"] = _num(msg, "sweep_id", 0, 2**62, integer=True, optional=True)
    out["node"] = check_node_name(msg.get("node"))
    return msg, out


def validate_outcome(msg: dict[str, Any], stages: tuple[str, ...], needs_reason: tuple[str, ...]) -> dict[str, Any]:
    """A result's status, stage, reason (required for the statuses in needs_reason), hint, detail and stderr tail."""
    out = {
        "status": _choice(msg, "status", STATUSES),
        "stage": _choice(msg, "stage", stages),
        "reason": _choice(msg, "reason", REASONS, optional=True),
    }
    if out["status"] in needs_reason and out["reason"] is None:
        raise ContractError(f"reason: required when status is {out['status']}")
    out["hint"] = _text(msg, "hint")
    out["detail"] = _text(msg, "detail")
    out["stderr_tail"] = _text(msg, "stderr_tail", MAX_STDERR_TAIL)
    return out


def validate_list(
    msg: dict[str, Any], field: str, limit: int, what: str, validate_entry: Callable[[Any, int], dict[str, Any]]
) -> list[dict[str, Any]]:
    """A result's list of objects (per-size results, GPUs): at most limit, each passed to validate_entry(entry, i)."""
    entries = msg.get(field) or []
    if not isinstance(entries, list) or len(entries) > limit:
        raise ContractError(f"{field}: expected a list of at most {limit} {what}")
    return [validate_entry(e, i) for i, e in enumerate(entries)]


def validate_size_result(entry: Any, i: int) -> dict[str, Any]:
    entry = _object(entry, f"sizes[{i}]")
    return {
        "bytes": _num(entry, "bytes", MIN_MESSAGE_BYTES, MAX_MESSAGE_BYTES, integer=True),
        "time_us": _num(entry, "time_us", 0, 1e12),
        "algbw_gbps": _num(entry, "algbw_gbps", 0, 1e5),
        "busbw_gbps": _num(entry, "busbw_gbps", 0, 1e5),
        "ok": bool(entry.get("ok", True)),
    }


def validate_result(msg: Any) -> dict[str, Any]:
    """Validate one agent's half of a probe result."""
    msg, out = addressed(msg, "result", PROBE_KINDS, default_kind="pair")
    out["rank"] = _num(msg, "rank", 0, MAX_WORLD_SIZE - 1, integer=True)
    out.update(validate_outcome(msg, STAGES, ("failed", "timeout")))
    out["interface"] = _text(msg, "interface", 64)
    out["latency_us_p50"] = _num(msg, "latency_us_p50", 0, 1e10, optional=True)
    out["latency_us_p99"] = _num(msg, "latency_us_p99", 0, 1e10, optional=True)
    out["sizes"] = validate_list(msg, "sizes", MAX_SIZES, "per-size results", validate_size_result)
    out["algbw_gbps"] = _num(msg, "algbw_gbps", 0, 1e5, optional=True)
    out["busbw_gbps"] = _num(msg, "busbw_gbps", 0, 1e5, optional=True)
    details = ("versions", "peer_versions", "stage_times", "timings", "extra")
    for field in details:
        out[field] = _detail_object(msg, field)
    # One encoding of the five bounds each of them: sized one by one only when together they are over.
    if len(_COMPACT.encode([out[field] for field in details])) > MAX_DETAIL_BYTES:
        for field in details:
            _detail_size(out[field], field)
    out["evidence"] = validate_evidence(msg.get("evidence"))
    out["duration_s"] = _num(msg, "duration_s", 0, 1e5, optional=True)
    out["finished_at"] = _num(msg, "finished_at", 0, 1e11, optional=True)
    # Escaped (ASCII) JSON is never shorter than the same text in UTF-8: measured in UTF-8 only when over.
    if len(_COMPACT.encode(out)) > MAX_RESULT_BYTES:
        size = len(json.dumps(out, separators=(",", ":"), ensure_ascii=False).encode())
        if size > MAX_RESULT_BYTES:  # it is stored on its pair row, and read with every pair page
            raise ContractError(f"result: {size} bytes encoded, at most {MAX_RESULT_BYTES} allowed")
    return out


def validate_evidence(evidence: Any) -> dict[str, Any]:
    """A half's evidence object (what its classification rests on), bounded in keys and encoded size."""
    if evidence is None:
        return {}
    if not isinstance(evidence, dict) or len(evidence) > MAX_EVIDENCE_KEYS:
        raise ContractError(f"evidence: expected an object of at most {MAX_EVIDENCE_KEYS} entries")
    try:
        size = len(_STRICT.encode(evidence))
    except (TypeError, ValueError, RecursionError) as e:
        raise ContractError(f"evidence: not plain JSON ({type(e).__name__})") from None
    if size > MAX_EVIDENCE_BYTES:
        raise ContractError(f"evidence: {size} bytes encoded, at most {MAX_EVIDENCE_BYTES} allowed")
    # A copy without NUL (a stack dump may hold one; PostgreSQL's jsonb cannot).
    cleaned: dict[str, Any] = bounded_json(evidence, "evidence", EVIDENCE_BOUNDS)
    return cleaned


def validate_heartbeat(msg: Any) -> dict[str, Any]:
    msg = _obj(msg, "heartbeat")
    facts = validate_facts(msg.get("facts") or {})
    return {
        "v": VERSION,
        "node": check_node_name(msg.get("node")),
        "address": _address(msg, "address"),
        "facts": facts,
        "agent_version": _text(msg, "agent_version", 64),
        "sent_at": _num(msg, "sent_at", 0, 1e11, optional=True),
        "busy": bool(msg.get("busy", False)),
    }


def busbw_factor(world_size: int) -> float:
    """all_reduce bus bandwidth factor, as nccl-tests defines it: 2(n-1)/n."""
    return 2.0 * (world_size - 1) / world_size

"""GET /api/expected: what a node of this fleet should look like, for `python -m agents check`.

A version is expected when an operator pinned it (``CLUSTER_HEALTH_EXPECTED_VERSIONS``, a declared
rolling upgrade accepting several values until its window ends), or else when a strong majority of
the fleet reports it: at least two thirds of the active nodes and at least three. A plurality is
never enough: half a rolling upgrade, or one stolen node key in a small fleet, would otherwise set
what every other node is failed against. The interface and the GPU count follow the same rule. With
``?node=NAME``, that node's registration and heartbeat.
"""

from __future__ import annotations

from collections import Counter

from django.conf import settings
from django.http import JsonResponse
from django.utils import timezone

from cluster_health.models import Node
from cluster_health.web.api import api_view, error

VERSION_KEYS = ("torch", "cuda", "nccl", "driver")
STRONG_MAJORITY_NODES = 3


def strong_majority(values, fleet: int) -> object | None:
    """The value at least two thirds of the fleet's ``fleet`` nodes report, and at least three; else None."""
    counted = Counter(v for v in values if isinstance(v, str | int) and not isinstance(v, bool) and v != "")
    if not counted:
        return None
    value, count = counted.most_common(1)[0]
    return value if count >= STRONG_MAJORITY_NODES and 3 * count >= 2 * fleet else None


def _part(facts: dict, name: str) -> dict:
    found = facts.get(name) if isinstance(facts, dict) else None
    return found if isinstance(found, dict) else {}


def _interface_of(address: str, facts: dict) -> str | None:
    found = facts.get("interfaces") if isinstance(facts, dict) else None
    for iface in found if isinstance(found, list) else []:
        addresses = iface.get("addresses") if isinstance(iface, dict) else None
        if isinstance(addresses, list) and address in addresses:
            return iface.get("name")
    return None


def _gpu_count(facts: dict) -> int | None:
    devices = _part(facts, "gpus").get("devices", [])
    return len(devices) if isinstance(devices, list) and _part(facts, "gpus") else None


def accepted_versions(pinned: dict[str, list[str]], until, now) -> dict[str, list[str]]:
    """The pinned values each key accepts now: all of them within a declared upgrade's window, then the first."""
    over = until is not None and now >= until
    return {key: values[:1] if over else list(values) for key, values in pinned.items() if values}


def _one(values: list[str]) -> str | None:
    return values[0] if len(values) == 1 else None


def expected_set(nodes, fleet: int, pinned: dict[str, list[str]] | None = None) -> dict:
    """What a node should run (pure over Node rows): ``fleet`` the active nodes' count, ``pinned`` the values
    each pinned key accepts now. ``versions`` holds one value per key (None where none is expected, or while
    a declared upgrade accepts several, so an agent that reads only it never fails either); ``accepted``
    every value a key accepts."""
    pinned = pinned or {}
    facts = [(n.address, n.facts or {}) for n in nodes]
    accepted: dict[str, list[str]] = {}
    for key in VERSION_KEYS:
        if key in pinned:
            accepted[key] = pinned[key]
        elif (value := strong_majority((_part(f, "versions").get(key) for _, f in facts), fleet)) is not None:
            accepted[key] = [str(value)]
    return {
        "versions": {key: _one(accepted.get(key, [])) for key in VERSION_KEYS},
        "accepted": accepted,
        "pinned": sorted(pinned),
        "interface": strong_majority((_interface_of(a, f) for a, f in facts), fleet),
        "gpu_count": strong_majority((_gpu_count(f) for _, f in facts), fleet) or 0,
        "nodes": len(facts),
        "fleet": fleet,
    }


@api_view()
def expected(request):
    active = Node.objects.filter(active=True)
    pinned = accepted_versions(settings.EXPECTED_VERSIONS, settings.EXPECTED_UPGRADE_UNTIL, timezone.now())
    out = expected_set(active.exclude(facts={}).only("address", "facts"), active.count(), pinned)
    name = request.GET.get("node")
    if name is not None:
        if len(name) > 63:
            return error(400, "node: at most 63 characters")
        node = Node.objects.filter(name=name).first()
        now = timezone.now()
        out["node"] = {
            "name": name,
            "registered": node is not None,
            "online": bool(node and node.is_online(now)),
            "heartbeat_age_s": round((now - node.last_heartbeat).total_seconds(), 1)
            if node and node.last_heartbeat
            else None,
        }
    return JsonResponse(out)

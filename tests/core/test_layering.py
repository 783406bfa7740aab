"""The house's rules, read from the code's own imports (docs/ARCHITECTURE.md, "Layering"): no import
circles, no package importing one on a higher floor, the agent never importing the server."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# cluster_health's packages and top-level modules, from the ground floor up. A module may import
# those on its own floor or below, never above.
FLOORS = [
    {"core", "vocabulary", "env", "bulk", "jsontext", "shared_redis", "defaults", "settings"},
    {"models", "celery"},
    {"nodes", "queues", "coverage"},
    {"shapes"},
    {"actions"},
    {"sweeps"},
    {"ingest"},
    {
        "retention",
        "hang_diagnoses",
        "operator_states",
        "tasks",
        "web",
        "management",
        "admin",
        "apps",
        "urls",
        "asgi",
        "__init__",
        "migrations",
    },
]
FLOOR_OF = {room: level for level, rooms in enumerate(FLOORS) for room in rooms}


def modules(package: str) -> dict[str, Path]:
    out = {}
    for path in (ROOT / package).rglob("*.py"):
        if "migrations" in path.parts:
            continue
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        out[name] = path
    return out


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """Every module of ours that ``path`` imports, at module level or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            # ``from pkg import mod`` imports pkg.mod; ``from mod import name`` imports mod.
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module for a in node.names
            ]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def graph() -> dict[str, set[str]]:
    known = modules("agents") | modules("cluster_health")
    edges = {}
    for name, path in known.items():
        package = name.rpartition(".")[0] if path.name == "__init__.py" else None
        # A package's own __init__ importing its modules is how it hands names on, not an arrow.
        edges[name] = {
            m for m in imports(path, known) if m != name and not (package is None and m.startswith(name + "."))
        }
    return edges


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_there_is_no_import_circle():
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                circles.append(sorted(members))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    assert circles == []


def test_no_package_imports_one_on_a_higher_floor():
    upward = []
    for module, targets in graph().items():
        if not module.startswith("cluster_health"):
            continue
        for target in targets:
            if target.startswith("cluster_health") and FLOOR_OF[room(target)] > FLOOR_OF[room(module)]:
                upward.append(f"{module} -> {target}")
    assert upward == []


def test_every_room_of_cluster_health_has_a_floor():
    rooms = {room(m) for m in modules("cluster_health")}
    assert rooms <= set(FLOOR_OF), rooms - set(FLOOR_OF)


def test_the_agent_never_imports_the_server():
    crossing = [
        f"{m} -> {t}"
        for m, ts in graph().items()
        if m.startswith("agents")
        for t in ts
        if t.startswith("cluster_health")
    ]
    assert crossing == []

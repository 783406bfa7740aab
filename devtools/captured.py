"""The probe commands among the tasks ``cluster_health.queues.dispatch.capture()`` recorded."""

from __future__ import annotations

from typing import Any

from agents import contract


def take_probe_commands(
    sent: list[tuple[str, str, dict[str, Any], Any]], server_tasks: list[tuple[str, dict[str, Any]]] | None = None
) -> list[dict[str, Any]]:
    """The recorded probe commands, in the order sent; the record is emptied so the next call sees only new ones.

    The other tasks recorded (to the server queue) are added to ``server_tasks`` as (task, kwargs) when it is given.
    """
    commands = []
    for task, _queue, kwargs, _expires in sent:
        if task == contract.TASK_PROBE:
            commands.append(kwargs["command"])
        elif server_tasks is not None:
            server_tasks.append((task, kwargs))
    sent.clear()
    return commands


def by_probe(commands: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """The commands grouped by probe id (a pair's two ranks under one key), in order."""
    out: dict[int, list[dict[str, Any]]] = {}
    for command in commands:
        out.setdefault(command["probe_id"], []).append(command)
    return out

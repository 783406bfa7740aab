"""Declared topology: the group (rack, leaf switch, rail) an operator gives each node. Pure.

A topology file maps groups to nodes, one group a line::

    # group: nodes (separated by spaces or commas)
    rack-a: gpu001 gpu002 gpu003
    leaf:7: gpu004, gpu005

Blank lines and ``#`` comments are skipped; a group may take several lines. A group
name ends at the first ``": "``, so it may hold ``:`` itself. The file is the whole
declared topology: applied, it also clears the group of every node it does not list.
"""

from __future__ import annotations

import re

GROUP_MAX_CHARS = 64
GROUP_RE = re.compile(rf"\A[A-Za-z0-9._:-]{{1,{GROUP_MAX_CHARS}}}\Z")
GROUP_RULE = f"1 to {GROUP_MAX_CHARS} letters, digits, '.', '_', ':' or '-'"


class TopologyError(ValueError):
    """A topology file or group label that cannot be applied; the message says where and why."""


def check_group(label: str) -> str:
    """The label if it is a valid group name, else TopologyError."""
    if not GROUP_RE.match(label):
        raise TopologyError(f"bad group {label!r}: a group is {GROUP_RULE}")
    return label


def parse(text: str) -> dict[str, str]:
    """Node name -> group from a topology file's text; TopologyError naming the line on anything wrong."""
    groups: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        label, sep, names = (line + " ").partition(": ")  # the space: a final ':' ends a group too
        if not sep:
            raise TopologyError(f"line {number}: expected 'GROUP: NODE [NODE ...]', got {raw.strip()!r}")
        label = label.strip()
        try:
            check_group(label)
        except TopologyError as exc:
            raise TopologyError(f"line {number}: {exc}") from None
        for name in (n for n in re.split(r"[\s,]+", names) if n):
            if groups.setdefault(name, label) != label:
                raise TopologyError(f"line {number}: {name} is in both {groups[name]} and {label}")
    if not groups:
        raise TopologyError("the file names no node (to clear every group: nodes unlabel NAME ...)")
    return groups

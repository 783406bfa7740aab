"""Declared topology: the group (rack, leaf switch, rail) an operator gives each node. Pure.

A topology file maps groups to nodes, one group a line::

    # group: nodes (separated by spaces or commas)
    rack-a: gpu001 gpu002 gpu003
    leaf:7: gpu004, gpu005

Blank lines and ``#`` comments are skipped; a group may take several lines. A group
name ends at the first ``": "``, so it may hold ``:`` itself. The file is the whole
declared topology: applied, it also clears the group of every node it does not list.

A Slurm ``topology.conf`` (topology/tree) is read as well: each leaf switch's ``Nodes=``
hostlist (``gpu[001-004,007]``) is a group named after the switch; switches of switches
(``Switches=``) group no node directly and are skipped. ``slurm_conf`` writes one back.
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
    """Node name -> group from a topology file's text; TopologyError naming the line on anything wrong.

    A text whose first setting line starts ``SwitchName=`` is a Slurm topology.conf (``parse_slurm``).
    """
    if is_slurm(text):
        return parse_slurm(text)
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


_SLURM_LINE = re.compile(r"\A(?:SwitchName|BlockName|BlockSizes)=", re.IGNORECASE)
_RANGE = re.compile(r"\A(\d+)(?:-(\d+))?\Z")
MAX_HOSTLIST_NAMES = 100_000  # a hostlist expanding past this is a typo, not a fleet


def is_slurm(text: str) -> bool:
    """Whether a topology text is a Slurm topology.conf: its first setting line starts ``SwitchName=``."""
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            return bool(_SLURM_LINE.match(line))
    return False


def _split_outside_brackets(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise TopologyError(f"hostlist {text!r}: brackets inside brackets")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise TopologyError(f"hostlist {text!r}: ']' without '['")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise TopologyError(f"hostlist {text!r}: '[' without ']'")
    parts.append(text[start:])
    return [p for p in parts if p]


def _expand_one(name: str, whole: str) -> list[str]:
    open_at = name.find("[")
    if open_at < 0:
        return [name]
    close_at = name.index("]", open_at)
    head, body, tail = name[:open_at], name[open_at + 1 : close_at], name[close_at + 1 :]
    values: list[str] = []
    for piece in body.split(","):
        found = _RANGE.match(piece.strip())
        if not found:
            raise TopologyError(f"hostlist {whole!r}: {piece!r} is not a number or a range like 001-004")
        low, high = found.group(1), found.group(2) or found.group(1)
        if int(high) < int(low):
            raise TopologyError(f"hostlist {whole!r}: range {piece!r} runs backwards")
        if int(high) - int(low) >= MAX_HOSTLIST_NAMES:
            raise TopologyError(f"hostlist {whole!r}: range {piece!r} names more than {MAX_HOSTLIST_NAMES} nodes")
        width = len(low) if low.startswith("0") else 0
        values.extend(str(v).zfill(width) for v in range(int(low), int(high) + 1))
    rest = _expand_one(tail, whole)
    if len(values) * len(rest) > MAX_HOSTLIST_NAMES:
        raise TopologyError(f"hostlist {whole!r} names more than {MAX_HOSTLIST_NAMES} nodes")
    return [head + v + r for v in values for r in rest]


def expand_hostlist(text: str) -> list[str]:
    """The names of a Slurm hostlist: ``gpu[001-003,007],login1`` -> gpu001 gpu002 gpu003 gpu007 login1.

    Leading zeros keep their width; several brackets in one name multiply (``r[1-2]n[1-2]``: four names).
    """
    names: list[str] = []
    for part in _split_outside_brackets(text.strip()):
        names.extend(_expand_one(part, text))
    return names


def compress_hostlist(names: list[str]) -> str:
    """A Slurm hostlist for ``names``: runs of one prefix and consecutive numbers of one width in brackets."""
    runs: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    order: list[tuple[str, int] | str] = []
    for name in names:
        found = re.match(r"\A(.*?)(\d+)\Z", name)
        if not found:
            plain.append(name)
            order.append(name)
            continue
        digits = found.group(2)
        key = (found.group(1), len(digits) if digits.startswith("0") else 0)
        if key not in runs:
            runs[key] = []
            order.append(key)
        runs[key].append(int(digits))
    out = []
    for item in order:
        if isinstance(item, str):
            out.append(item)
            continue
        prefix, width = item
        numbers = sorted(set(runs[item]))
        if len(numbers) == 1:
            out.append(f"{prefix}{str(numbers[0]).zfill(width)}")
            continue
        spans, first, last = [], numbers[0], numbers[0]
        for v in numbers[1:] + [None]:
            if v is not None and v == last + 1:
                last = v
                continue
            a, b = str(first).zfill(width), str(last).zfill(width)
            spans.append(a if first == last else f"{a}-{b}")
            if v is not None:
                first = last = v
        out.append(f"{prefix}[{','.join(spans)}]")
    return ",".join(out)


def parse_slurm(text: str) -> dict[str, str]:
    """Node name -> its leaf switch from a Slurm topology.conf (topology/tree); TopologyError naming the line."""
    groups: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        settings: dict[str, str] = {}
        for word in line.split():
            key, sep, value = word.partition("=")
            if not sep:
                raise TopologyError(f"line {number}: expected KEY=VALUE settings, got {word!r}")
            settings[key.lower()] = value
        if "switchname" not in settings:
            block = "blockname" in settings or "blocksizes" in settings
            what = "a block topology (topology/block) is not read" if block else "no SwitchName="
            raise TopologyError(f"line {number}: {what}: {raw.strip()!r}")
        switch = settings["switchname"]
        try:
            check_group(switch)
        except TopologyError as exc:
            raise TopologyError(f"line {number}: {exc}") from None
        if "nodes" not in settings:
            continue  # a switch of switches: no node hangs on it directly
        try:
            names = expand_hostlist(settings["nodes"])
        except TopologyError as exc:
            raise TopologyError(f"line {number}: {exc}") from None
        for name in names:
            if groups.setdefault(name, switch) != switch:
                raise TopologyError(f"line {number}: {name} is on both {groups[name]} and {switch}")
    if not groups:
        raise TopologyError("the topology.conf names no node (no SwitchName= line with Nodes=)")
    return groups


def slurm_conf(groups: list[tuple[str, list[str]]], spine: str = "spine", note: str = "") -> str:
    """A Slurm topology.conf (topology/tree): one leaf switch per group with its nodes, and a spine over them."""
    lines = [f"# {line}" for line in note.splitlines()] if note else []
    for name, members in groups:
        lines.append(f"SwitchName={check_group(name)} Nodes={compress_hostlist(members)}")
    if len(groups) > 1:
        while spine in {name for name, _ in groups}:
            spine += "-top"
        lines.append(f"SwitchName={check_group(spine)} Switches={','.join(name for name, _ in groups)}")
    return "\n".join(lines) + "\n"

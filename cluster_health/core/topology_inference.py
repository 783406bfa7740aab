"""Topology from the matrix: the groups (racks, leaves) one full sweep's measurements show. Pure: no Django.

Pairs inside a rack share a lower latency and a higher bandwidth than pairs across it. Each
pair's dissimilarity is how much worse than the sweep's best pair it measured, in log units
summed over the figures it has: ``log(latency / best latency) + log(best busbw / busbw)``. A log
ratio reads the same for both figures (0.1 is about 10 % worse), so a figure without structure
adds only its own noise (a bed shaped by bandwidth alone, whose latencies all agree, still groups
by bandwidth). A pair with no figure (it failed) takes the median dissimilarity, so a broken link
neither joins nor splits two nodes; a node with fewer than half its pairs measured is left
unplaced.

The nodes are clustered with scipy's hierarchical clustering (``scipy.cluster.hierarchy``: average
linkage over the condensed dissimilarities, ``fcluster`` to cut the tree): the standard,
well-kept implementation, not one of our own (docs/TOPOLOGY.md says why). The number of groups
comes from the data: the cuts at the largest gaps between successive merge distances are the
candidates, and the one whose groups have the highest mean silhouette wins. The answer is

- ``groups`` when the groups differ (the median pair across groups at least MIN_EFFECT worse than
  the median pair inside, and a mean silhouette of at least MIN_SILHOUETTE);
- ``one group`` when they do not: no structure, nothing to compare labels with;
- ``low confidence`` when they differ but the spread inside the groups is close to the gap
  between them (the median node's confidence under MIN_CONFIDENCE): the groups are shown, no
  label is called wrong on their strength.

A node's confidence is how sure the measurements are that it belongs with its group rather than
the next nearest: its mean dissimilarity to the next group minus that to its own, over the
standard error of that difference given the spread inside groups, mapped to [0, 1)
(``erf(z / sqrt 2)``: 0 is a coin toss, 0.9 is 1.64 standard errors).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.cluster import hierarchy

from cluster_health.core.finding_row import finding
from cluster_health.core.matrix import natural_key

MIN_EFFECT = math.log(1.2)  # across groups at least 20 % worse than inside (latency and busbw together)
MIN_SILHOUETTE = 0.4  # below this mean silhouette the best grouping is noise
MIN_CONFIDENCE = 0.9  # a node is called mislabelled only this sure; the answer is "low confidence" below it
MIN_SEPARATION = 3.0  # the gap between groups in units of the noise inside them, for a sure answer
SPREAD_FLOOR = 0.02  # the smallest spread assumed inside a group: a 2 % measurement resolution
CANDIDATE_CUTS = 8  # cuts tried: at the largest gaps between merge distances
MAX_MISMATCH_FINDINGS = 50
MIN_OVERLAP = 0.8  # an uplink round's pairs measured together at least this share of their time: a sum of rates

GROUPS, ONE_GROUP, LOW_CONFIDENCE = "groups", "one group", "low confidence"


class InferenceError(ValueError):
    """The matrix cannot be grouped (too few nodes measured); the message says why."""


@dataclass
class Inference:
    """The groups a matrix shows. ``groups`` hold node names; ``order`` is every placed node, group by group."""

    nodes: list[str]  # the matrix's nodes, in its order
    answer: str  # GROUPS, ONE_GROUP or LOW_CONFIDENCE
    groups: list[list[str]]
    confidence: dict[str, float | None]  # per placed node; None when the answer is one group
    unplaced: list[str]
    metrics: list[str]  # "latency_us", "busbw_gbps": the figures the dissimilarity used
    effect: float  # median across minus median inside, log units (0 for one group)
    spread: float  # the standard deviation of the dissimilarities inside groups, log units
    silhouette: float
    cut: float | None  # the merge distance the tree was cut at
    linkage: Any = field(repr=False)  # scipy's linkage matrix over ``placed`` (the dendrogram draws it)
    placed: list[str] = field(default_factory=list)  # the clustered nodes, in the linkage's leaf numbering
    latency: Any = field(default=None, repr=False)  # n x n, NaN where unmeasured
    busbw: Any = field(default=None, repr=False)

    @property
    def order(self) -> list[str]:
        return [n for g in self.groups for n in g]

    def group_index(self) -> dict[str, int]:
        return {n: g for g, members in enumerate(self.groups) for n in members}


def square(values: Any, n: int) -> Any:
    """An n x n symmetric matrix (NaN diagonal) from a condensed upper triangle (matrix.pair_index order)."""
    out = np.full((n, n), np.nan)
    if n > 1:
        i, j = np.triu_indices(n, 1)
        out[i, j] = out[j, i] = np.asarray(values, dtype=float)
    return out


def from_pairs(nodes: Sequence[str], pairs: Iterable[Mapping[str, Any]]) -> tuple[Any, Any]:
    """Condensed latency and busbw arrays (NaN unmeasured) from pair dicts with a, b, latency_us, busbw_gbps."""
    pos = {name: i for i, name in enumerate(nodes)}
    n = len(nodes)
    count = n * (n - 1) // 2
    latency, busbw = np.full(count, np.nan), np.full(count, np.nan)
    listed = pairs if isinstance(pairs, list) else list(pairs)
    if not listed:
        return latency, busbw
    i = np.fromiter((pos.get(p["a"], -1) for p in listed), dtype=np.int64, count=len(listed))
    j = np.fromiter((pos.get(p["b"], -1) for p in listed), dtype=np.int64, count=len(listed))
    lat = np.fromiter((_number(p.get("latency_us")) for p in listed), dtype=float, count=len(listed))
    bw = np.fromiter((_number(p.get("busbw_gbps")) for p in listed), dtype=float, count=len(listed))
    known = (i >= 0) & (j >= 0) & (i != j)
    low, high = np.minimum(i, j)[known], np.maximum(i, j)[known]
    k = low * (2 * n - low - 1) // 2 + (high - low - 1)
    latency[k], busbw[k] = lat[known], bw[known]
    return latency, busbw


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


def _log_worse(values: Any, higher_is_better: bool) -> Any:
    """log(best / value) for bandwidth, log(value / best) for latency; NaN where unmeasured or not positive."""
    v = np.where(np.asarray(values, dtype=float) > 0, values, np.nan)
    if not np.isfinite(v).any():
        return v
    logs = np.log(v)
    return (np.nanmax(logs) - logs) if higher_is_better else (logs - np.nanmin(logs))


def _figures_worse(latency: Any, busbw: Any) -> list[tuple[str, Any]]:
    """Each figure measured for at least half the pairs, as its per-pair log ratio to the best pair."""
    out = []
    for name, values, better_high in (("latency_us", latency, False), ("busbw_gbps", busbw, True)):
        worse = _log_worse(values, better_high)
        if worse.size and np.isfinite(worse).mean() >= 0.5:
            out.append((name, worse))
    return out


def dissimilarity(latency: Any, busbw: Any) -> tuple[Any, list[str]]:
    """Per pair (condensed): the summed log ratios to the best pair, over the figures measured for most pairs."""
    parts = _figures_worse(latency, busbw)
    if not parts:
        return np.full(np.asarray(latency).shape, np.nan), []
    return sum((w for _, w in parts[1:]), parts[0][1].copy()), [name for name, _ in parts]


def _silhouettes(dist: Any, labels: Any) -> Any:
    """Each node's silhouette (scikit-learn's definition; 0 for a node alone in its group)."""
    groups = np.unique(labels)
    onehot = (labels[:, None] == groups[None, :]).astype(float)
    sizes = onehot.sum(axis=0)
    sums = dist @ onehot  # node x group: summed dissimilarity to the group's members
    own = np.argmax(onehot, axis=1)
    rows = np.arange(len(labels))
    own_size = sizes[own]
    a = np.where(own_size > 1, sums[rows, own] / np.maximum(own_size - 1, 1), 0.0)
    means = sums / sizes[None, :]
    means[rows, own] = np.inf
    b = means.min(axis=1)
    s = np.where(own_size > 1, (b - a) / np.maximum(np.maximum(a, b), 1e-12), 0.0)
    return s


def _candidates(heights: Any, n: int) -> list[int]:
    """Group counts worth trying: the cuts at the largest gaps between successive merge distances."""
    if n < 3:
        return []
    gaps = np.diff(heights)  # gaps[i]: between merge i and i + 1; cutting there leaves n - 1 - i groups
    order = np.argsort(gaps)[::-1][:CANDIDATE_CUTS]
    most = max(2, n // 2)  # more groups than half the nodes is no topology: most would be a node alone
    return sorted({int(n - 1 - i) for i in order if 2 <= n - 1 - i <= most})


_ANSWER_RANK = {ONE_GROUP: 0, LOW_CONFIDENCE: 1}  # GROUPS: 2


def infer(nodes: Sequence[str], latency: Any, busbw: Any) -> Inference:
    """The groups the matrix of ``nodes`` shows, from condensed latency and busbw arrays (NaN unmeasured).

    Tried on both figures summed, then on each alone: a figure whose noise on this fleet is as large
    as the gap the other shows (latency on a loaded host, say) must not hide the other's structure.
    The surest answer wins (groups, then low confidence, then one group), then the widest gap in
    spreads; on a tie, both figures together.
    """
    names = list(nodes)
    n = len(names)
    parts = _figures_worse(latency, busbw)
    if not parts:
        raise InferenceError("no pair of this sweep measured a latency or a bandwidth: nothing to group by")
    lat_sq, bw_sq = square(latency, n), square(busbw, n)
    tries = [parts] + ([[p] for p in parts] if len(parts) > 1 else [])
    found: list[Inference] = []
    failed: list[InferenceError] = []
    for chosen in tries:
        d = sum((w for _, w in chosen[1:]), chosen[0][1].copy())
        try:
            found.append(_infer_from(names, d, [name for name, _ in chosen], lat_sq, bw_sq))
        except InferenceError as exc:
            failed.append(exc)
            continue
        if found[0].answer == GROUPS:
            return found[0]  # both figures together are sure: no figure alone is tried (a fleet's common case)
    if not found:
        raise failed[0]
    return max(found, key=lambda r: (_ANSWER_RANK.get(r.answer, 2), r.effect / r.spread))


def _infer_from(names: list[str], d: Any, metrics: list[str], lat_sq: Any, bw_sq: Any) -> Inference:
    """``infer`` on one dissimilarity (condensed, NaN where unmeasured)."""
    n = len(names)
    full = square(d, n)
    measured = np.isfinite(full).sum(axis=1)
    keep = [i for i in range(n) if measured[i] >= (n - 1) / 2]
    unplaced = [names[i] for i in range(n) if measured[i] < (n - 1) / 2]
    if len(keep) < 3:
        raise InferenceError(
            f"{len(keep)} node(s) measured with at least half their peers: at least 3 are needed to find groups"
        )
    sub = full[np.ix_(keep, keep)]
    fill = float(np.nanmedian(sub[np.triu_indices(len(keep), 1)]))
    sub = np.where(np.isfinite(sub), sub, fill)
    np.fill_diagonal(sub, 0.0)
    placed = [names[i] for i in keep]
    m = len(placed)
    condensed = sub[np.triu_indices(m, 1)]
    profile = _profiles(sub)
    tree = hierarchy.linkage(profile[np.triu_indices(m, 1)], method="average")
    heights = tree[:, 2]
    best: tuple[float, int, Any] | None = None
    for k in _candidates(heights, m):
        labels = hierarchy.fcluster(tree, k, criterion="maxclust")
        if len(np.unique(labels)) < 2:
            continue
        score = float(_silhouettes(profile, labels).mean())
        if best is None or score > best[0]:
            best = (score, k, labels)
    one = Inference(
        names, ONE_GROUP, [sorted(placed, key=natural_key)], dict.fromkeys(placed), unplaced, metrics, 0.0,
        _spread(condensed), 0.0, None, tree, placed, lat_sq, bw_sq,
    )  # fmt: skip
    if best is None:
        return one
    score, k, labels = best
    same = labels[:, None] == labels[None, :]
    upper = np.triu(np.ones((m, m), dtype=bool), 1)
    inside, across = sub[same & upper], sub[~same & upper]
    effect = float(np.median(across) - np.median(inside)) if inside.size and across.size else 0.0
    spread = max(_noise(sub, profile, labels), SPREAD_FLOOR)
    one.spread, one.effect, one.silhouette = spread, effect, score
    if effect < MIN_EFFECT or score < MIN_SILHOUETTE:
        return one
    confidence = _keyed(_confidence(sub, labels, spread), placed)
    members: dict[int, list[str]] = {}
    for node, label in zip(placed, labels, strict=True):
        members.setdefault(int(label), []).append(node)
    groups = sorted((sorted(g, key=natural_key) for g in members.values()), key=lambda g: natural_key(g[0]))
    merged = sorted(heights)
    cut = float(merged[m - k]) if m - k < len(merged) else None  # the first merge the cut undoes
    typical = float(np.median(list(confidence.values())))
    sure = typical >= MIN_CONFIDENCE and effect >= MIN_SEPARATION * spread
    return Inference(
        names, GROUPS if sure else LOW_CONFIDENCE, groups,
        {n: confidence[n] for n in placed}, unplaced, metrics, effect, spread, score, cut, tree, placed,
        lat_sq, bw_sq,
    )  # fmt: skip


def _profiles(dist: Any) -> Any:
    """Node x node: the root mean square difference of two nodes' rows of dissimilarities (their profiles).

    Two nodes of one rack see every third node alike, so their rows agree; the rows are compared
    on measurements each pair did not make together, which noise alone cannot make agree by chance.
    """
    m = len(dist)
    sq = (dist * dist).sum(axis=1)
    gram = dist @ dist.T
    out = np.sqrt(np.maximum(sq[:, None] + sq[None, :] - 2 * gram, 0.0) / m)
    np.fill_diagonal(out, 0.0)
    return out


def _noise(dist: Any, profile: Any, labels: Any) -> float:
    """The measurement noise (standard deviation of one dissimilarity) from nodes the grouping puts together.

    Two members i, j of one group should see each third node k alike: d(i, k) - d(j, k) is the
    difference of two independent measurements of one figure, whose variance is twice the noise's.
    Their summed squares over every k are the profile distance's square times m, less the two
    columns i and j (2 d(i, j) squared).
    """
    m = len(dist)
    same = np.triu(labels[:, None] == labels[None, :], 1)
    pairs = int(same.sum())
    if not pairs or m < 3:
        return 0.0
    total = float((profile[same] ** 2).sum() * m - 2 * (dist[same] ** 2).sum())
    return math.sqrt(max(total, 0.0) / (pairs * (m - 2)) / 2)


def _spread(values: Any) -> float:
    return max(float(np.std(values)) if len(values) > 1 else 0.0, SPREAD_FLOOR)


def _confidence(dist: Any, labels: Any, spread: float) -> Any:
    """Per node: erf(z / sqrt 2), z its margin over the next group in standard errors (0 when nearer another)."""
    groups = np.unique(labels)
    onehot = (labels[:, None] == groups[None, :]).astype(float)
    sizes = onehot.sum(axis=0)
    sums = dist @ onehot
    rows = np.arange(len(labels))
    own = np.argmax(onehot, axis=1)
    inside = sizes[own] - 1
    own_mean = sums[rows, own] / np.maximum(inside, 1)
    means = sums / sizes[None, :]
    means[rows, own] = np.inf
    nearest = np.argmin(means, axis=1)
    margin = means[rows, nearest] - own_mean
    se = spread * np.sqrt(1 / np.maximum(inside, 1) + 1 / sizes[nearest])
    z = np.where((inside >= 1) & (margin > 0), margin / se, 0.0)
    return np.array([math.erf(v / math.sqrt(2)) for v in z])


def _keyed(confidence: Any, placed: list[str]) -> dict[str, float]:
    return {name: float(c) for name, c in zip(placed, confidence, strict=True)}


def name_groups(inference: Inference, declared: Mapping[str, str]) -> list[str]:
    """A name per inferred group: the declared label most of its members carry (more than half), each label once;
    else ``group-N``."""
    names: list[str] = []
    taken: set[str] = set()
    votes = []
    for g, members in enumerate(inference.groups):
        counted = Counter(declared[n] for n in members if declared.get(n))
        label, count = counted.most_common(1)[0] if counted else ("", 0)
        votes.append((count / len(members), g, label))
    chosen: dict[int, str] = {}
    for share, g, label in sorted(votes, key=lambda v: -v[0]):
        if label and share > 0.5 and label not in taken:
            chosen[g] = label
            taken.add(label)
    spare = (f"group-{i}" for i in range(1, len(inference.groups) + len(taken) + 2))
    for g in range(len(inference.groups)):
        if g not in chosen:
            name = next(spare)
            while name in taken:
                name = next(spare)
            chosen[g] = name
            taken.add(name)
        names.append(chosen[g])
    return names


def _median_to(inference: Inference, node: str, others: Sequence[str]) -> tuple[float | None, float | None]:
    """The node's median latency and busbw to ``others`` (None where none measured)."""
    pos = {n: i for i, n in enumerate(inference.nodes)}
    i = pos[node]
    cols = [pos[o] for o in others if o != node and o in pos]
    out: list[float | None] = []
    for sq in (inference.latency, inference.busbw):
        row = sq[i, cols] if cols else np.array([])
        row = row[np.isfinite(row)]
        out.append(float(np.median(row)) if row.size else None)
    return out[0], out[1]


def _figures(latency: float | None, busbw: float | None) -> str:
    parts = []
    if latency is not None:
        parts.append(f"{latency:.0f} us")
    if busbw is not None:
        parts.append(f"{busbw:.3g} GB/s")
    return ", ".join(parts) or "no figure"


def mismatches(inference: Inference, declared: Mapping[str, str], names: Sequence[str]) -> list[dict[str, Any]]:
    """Each node whose declared group is not the one its measurements place it with, when the answer is sure.

    A node is named only when the answer is ``groups``, its own confidence reaches MIN_CONFIDENCE, its label
    names another inferred group (the label most of that group carries) and it is nearer its measured group
    than its labelled one. Each: node, declared, measured, confidence, text (median figures to both groups).
    """
    if inference.answer != GROUPS:
        return []
    by_label = {label: g for g, label in enumerate(names)}
    out: list[dict[str, Any]] = []
    for g, members in enumerate(inference.groups):
        for node in members:
            label = declared.get(node)
            if not label or label == names[g] or label not in by_label:
                continue
            conf = inference.confidence.get(node) or 0.0
            if conf < MIN_CONFIDENCE:
                continue
            labelled = [n for n in inference.groups[by_label[label]] if declared.get(n) == label]
            near = _median_to(inference, node, members)
            far = _median_to(inference, node, labelled)
            text = (
                f"{node} is labelled {label} but measures with {names[g]}: {_figures(*near)} vs {_figures(*far)} "
                f"(confidence {conf:.2f})"
            )
            out.append(
                {
                    "node": node,
                    "declared": label,
                    "measured": names[g],
                    "confidence": round(conf, 3),
                    "text": text,
                }
            )
    out.sort(key=lambda r: natural_key(r["node"]))
    return out


def mismatch_findings(found: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """``warn`` findings ``topology_mismatch`` for mislabelled nodes (capped, the rest counted in one line)."""
    out = [finding("warn", "topology_mismatch", r["node"], r["text"]) for r in found[:MAX_MISMATCH_FINDINGS]]
    if len(found) > MAX_MISMATCH_FINDINGS:
        more = len(found) - MAX_MISMATCH_FINDINGS
        out.append(finding("warn", "topology_mismatch", "nodes", f"and {more} more nodes measure outside their label"))
    return out


def declared_mismatch_findings(
    nodes: Sequence[str], pairs: Iterable[Mapping[str, Any]], declared: Mapping[str, str]
) -> list[dict[str, str]]:
    """A full sweep's ``topology_mismatch`` findings: its pairs grouped, held against the declared groups.

    Nothing is computed unless at least two declared groups each hold two of the sweep's nodes (with
    fewer there is no label a measurement could contradict); a matrix too sparse to group names nobody.
    """
    sizes = Counter(declared[n] for n in nodes if declared.get(n))
    if sum(1 for count in sizes.values() if count >= 2) < 2:
        return []
    latency, busbw = from_pairs(nodes, pairs)
    try:
        inferred = infer(nodes, latency, busbw)
    except InferenceError:
        return []
    return mismatch_findings(mismatches(inferred, declared, name_groups(inferred, declared)))


def report(inference: Inference, declared: Mapping[str, str], sweep: int | None = None) -> dict[str, Any]:
    """The ``manage.py topology infer --json`` document (docs/TOPOLOGY.md): groups, uplinks, mismatches."""
    names = name_groups(inference, declared)
    return {
        "sweep": sweep,
        "answer": inference.answer,
        "metrics": inference.metrics,
        "effect": round(inference.effect, 4),
        "spread": round(inference.spread, 4),
        "silhouette": round(inference.silhouette, 4),
        "groups": [
            {
                "name": name,
                "nodes": members,
                "declared": sorted({declared[n] for n in members if declared.get(n)}, key=natural_key),
                "confidence": {n: _rounded(inference.confidence.get(n)) for n in members},
            }
            for name, members in zip(names, inference.groups, strict=True)
        ],
        "unplaced": inference.unplaced,
        "uplinks": [],
        "mismatches": mismatches(inference, declared, names),
    }


def uplink_figures(
    groups: Mapping[str, Sequence[str]], uplink_rounds: Mapping[int, str], pairs: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Each group's uplink from a topology sweep: what its uplink round's pairs, all probed at once, summed to.

    ``groups``: group -> its nodes, as the sweep planned; ``uplink_rounds``: round -> the group sending out in it;
    ``pairs``: the sweep's pairs (round, a, b, busbw_gbps; None where one measured nothing; ``window``: the wall
    clock seconds its bandwidth stage began and ended, where known). Per group: its
    ``senders`` (pairs that measured a bandwidth, of ``pairs`` in the round), ``gbps`` (their busbw summed:
    the rate the group sustained to the rest with that many of its nodes sending at once) and ``mbit``,
    ``inside_gbps`` (the median busbw of its pairs inside, the same sweep) and ``oversubscription``: what the
    senders move inside the group over what they moved out together (``inside_gbps * senders / gbps``;
    above 1 the uplink, not the nodes, limits them). None where nothing was measured. A sum of rates is the
    uplink's only if the pairs ran at once: ``overlap`` is the time all of them measured together over their
    mean measuring time (None without windows), and ``concurrent`` says whether it reached MIN_OVERLAP (a pair
    that measured alone while the others waited to start would count the uplink twice).
    """
    group_of = {n: g for g, members in groups.items() for n in members}
    inside: dict[str, list[float]] = {}
    rounds: dict[str, list[float | None]] = {}
    windows: dict[str, list[tuple[float, float]]] = {}
    for p in pairs:
        a, b, bw = p["a"], p["b"], p.get("busbw_gbps")
        g = uplink_rounds.get(int(p["round"]))
        if g is not None:
            rounds.setdefault(g, []).append(bw)
            if bw and p.get("window"):
                windows.setdefault(g, []).append(p["window"])
        elif group_of.get(a) is not None and group_of.get(a) == group_of.get(b) and bw:
            inside.setdefault(group_of[a], []).append(float(bw))
    out = []
    for g in dict.fromkeys(uplink_rounds.values()):
        figures = [float(v) for v in rounds.get(g, []) if v]
        total = sum(figures) if figures else None
        median_in = float(np.median(inside[g])) if inside.get(g) else None
        over = median_in * len(figures) / total if total and median_in is not None else None
        overlap = _overlap(windows.get(g, [])) if len(windows.get(g, [])) == len(figures) else None
        out.append(
            {
                "group": g,
                "nodes": len(groups.get(g, ())),
                "senders": len(figures),
                "pairs": len(rounds.get(g, [])),
                "gbps": None if total is None else round(total, 6),
                "mbit": None if total is None else round(total * 8000, 1),
                "inside_gbps": None if median_in is None else round(median_in, 6),
                "oversubscription": None if over is None else round(over, 2),
                "overlap": None if overlap is None else round(overlap, 3),
                "concurrent": None if overlap is None else overlap >= MIN_OVERLAP,
            }
        )
    return out


def _overlap(windows: Sequence[tuple[float, float]]) -> float | None:
    """The time every window covers, over their mean length (1.0: all at once; 0: one after another)."""
    if not windows:
        return None
    lengths = [end - start for start, end in windows]
    mean = sum(lengths) / len(lengths)
    if mean <= 0:
        return None
    together = min(end for _, end in windows) - max(start for start, _ in windows)
    return max(together, 0.0) / mean


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)

"""Findings about a fleet's GPUs: from heartbeat facts and from gpu check results.

Pure functions on plain data (no Django, no torch, no NVML): the server calls
them with ``{node: facts}`` or ``{node: gpu check result}`` and stores what
they return. A finding is ``{"severity": "fail"|"warn"|"info", "subject": node,
"text": ...}``, the shape of the sweep JSON's findings.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from statistics import median
from typing import Any, TypedDict, TypeVar

from agents.gpu_contract import pcie_gbps

SEVERITY_ORDER = {"fail": 0, "warn": 1, "info": 2}
# A GPU is slow when it is below this share of its model's fleet median ...
SLOW_FRACTION = 0.85
# ... and also more than this many robust standard deviations (1.4826 * MAD) below it.
SLOW_SIGMAS = 3.0
MIN_PEERS = 3  # fewer GPUs of one model than this: no fleet to compare with

Who = TypeVar("Who")


class Finding(TypedDict):
    severity: str
    subject: str
    text: str


def finding(severity: str, subject: str, text: str) -> Finding:
    return {"severity": severity, "subject": subject, "text": text}


def _sorted(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (SEVERITY_ORDER[f["severity"]], f["subject"], f["text"]))


def _names(nodes: list[str], limit: int = 8) -> str:
    nodes = sorted(nodes)
    more = f" and {len(nodes) - limit} more" if len(nodes) > limit else ""
    return ", ".join(nodes[:limit]) + more


def gpu_facts(facts: dict[str, Any] | None) -> dict[str, Any]:
    """The "gpus" part of one node's facts, whatever agent version sent them."""
    g = (facts or {}).get("gpus")
    if isinstance(g, dict):
        return g
    return {"devices": [], "error": "this agent reports no NVML facts (an older agent)", "driver": None}


def _devices(fleet: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (node, d)
        for node, facts in sorted(fleet.items())
        for d in gpu_facts(facts).get("devices") or []
        if isinstance(d, dict)
    ]


def _gpu(node: str, dev: dict[str, Any]) -> str:
    return f"GPU {dev.get('index')} of {node}"


# -- facts -------------------------------------------------------------------------


def fleet_findings(fleet: dict[str, dict[str, Any]]) -> list[Finding]:
    """Findings from every node's heartbeat facts: versions, GPU counts, PCIe, ECC, rows, NVLink.

    fleet: {node name: facts as `python -m agents facts` prints them}.
    """
    out: list[Finding] = []
    out += version_findings(fleet, "driver", "driver")
    out += version_findings(fleet, "cuda_driver", "CUDA version of the driver")
    out += count_findings(fleet)
    for node, dev in _devices(fleet):
        out += device_findings(node, dev)
    out += pcie_findings(fleet)
    out += nvlink_findings(fleet)
    off = sorted({node for node, dev in _devices(fleet) if dev.get("persistence_mode") is False})
    if off:
        out.append(
            finding(
                "info",
                off[0] if len(off) == 1 else "fleet",
                f"persistence mode is off on {_names(off)}: the driver reloads on every first use, "
                "adding seconds to job start (nvidia-smi -pm 1)",
            )
        )
    return _sorted(out)


def version_findings(fleet: dict[str, dict[str, Any]], key: str, label: str) -> list[Finding]:
    """The nodes whose NVML-reported version differs from the fleet's most common one."""
    seen: dict[str, Any] = {node: gpu_facts(f).get(key) for node, f in fleet.items()}
    seen = {n: v for n, v in seen.items() if v}
    counts = Counter(seen.values())
    if len(counts) < 2:
        return []
    common, held = counts.most_common(1)[0]
    odd = sorted(n for n, v in seen.items() if v != common)
    detail = "; ".join(
        f"{_names([n for n in odd if seen[n] == v], 4)} run {v}" for v in sorted(set(seen[n] for n in odd))
    )
    subject = odd[0] if len(odd) == 1 else "fleet"
    return [
        finding(
            "warn",
            subject,
            f"{label} differs on {len(odd)} node{'s' * (len(odd) > 1)}: {detail}, where "
            f"{held} node{'s' * (held > 1)} run {common}",
        )
    ]


def count_findings(fleet: dict[str, dict[str, Any]]) -> list[Finding]:
    """A node with fewer GPUs than its peers (one fell off the bus), or none where its peers have some."""
    counts = {node: len(gpu_facts(f).get("devices") or []) for node, f in fleet.items()}
    with_gpus = [c for c in counts.values() if c]
    if not with_gpus:
        return []
    usual = Counter(with_gpus).most_common(1)[0][0]
    out = []
    for node, c in sorted(counts.items()):
        if c == 0 and len(with_gpus) >= len(counts) / 2:
            why = gpu_facts(fleet[node]).get("error") or "no devices"
            out.append(finding("fail", node, f"{node} reports no GPUs ({why}) where its peers have {usual}"))
        elif 0 < c < usual:
            fewer = f"{node} has {c} GPUs where its peers have {usual}"
            gone = _missing_slots(fleet, node, counts, usual)
            which = f" ({', '.join(gone)}, where its peers have one, is not listed)" if gone else ""
            out.append(
                finding("fail", node, f"{fewer}{which}: a GPU is missing (fallen off the bus, Xid 79) or hidden")
            )
    return out


def _missing_slots(fleet: dict[str, dict[str, Any]], node: str, counts: dict[str, int], usual: int) -> list[str]:
    """The PCI bus ids that most nodes with the usual GPU count have and this node does not list."""
    peers = [n for n, c in counts.items() if c == usual and n != node]
    held = Counter(
        d.get("pci_bus_id") for n in peers for d in gpu_facts(fleet[n]).get("devices") or [] if d.get("pci_bus_id")
    )
    mine = {d.get("pci_bus_id") for d in gpu_facts(fleet[node]).get("devices") or []}
    return sorted(bus for bus, n in held.items() if n > len(peers) / 2 and bus not in mine)[:4]


def device_findings(node: str, dev: dict[str, Any]) -> list[Finding]:
    """One GPU's own health: ECC errors, retired pages and remapped rows."""
    gpu = _gpu(node, dev)
    ecc = dev.get("ecc") or {}
    vol = (ecc.get("volatile") or {}).get("uncorrected") or 0
    agg = (ecc.get("aggregate") or {}).get("uncorrected") or 0
    corrected = (ecc.get("volatile") or {}).get("corrected") or 0
    rows = dev.get("remapped_rows") or {}
    pages = dev.get("retired_pages") or {}
    pending = "remapped rows" if rows.get("pending") else "retired pages"
    # (whether it applies, severity, text), in the order the findings are listed
    checks = (
        (dev.get("error"), "fail", f"NVML cannot open {gpu}: {dev.get('error')}"),
        (
            vol,
            "fail",
            f"uncorrectable ECC errors on {gpu} ({vol} since the last reset, {agg} in its lifetime): "
            "drain the node and reset the GPU",
        ),
        (
            agg and not vol,
            "warn",
            f"{gpu} has had {agg} uncorrectable ECC errors in its lifetime (none since the last reset): watch it",
        ),
        (corrected, "info", f"{gpu} corrected {corrected} ECC errors since the last reset"),
        (rows.get("failure"), "fail", f"row remapping failed on {gpu}: it has no spare rows left; replace it"),
        (
            rows.get("pending") or pages.get("pending"),
            "warn",
            f"{pending} pending on {gpu}: they take effect only after a GPU reset "
            "(nvidia-smi -r, or a reboot); until then the faulty memory is in use",
        ),
        (
            rows.get("uncorrectable"),
            "info",
            f"{gpu} has {rows.get('uncorrectable')} rows remapped for uncorrectable errors",
        ),
    )
    return [finding(severity, node, text) for applies, severity, text in checks if applies]


def _by_model(devices: list[tuple[str, dict[str, Any]]]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """(node, device) pairs grouped by GPU model name, in the order given."""
    by_model: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for node, dev in devices:
        by_model[dev.get("name") or "?"].append((node, dev))
    return by_model


def _modal(values: list[Any]) -> Any:
    return Counter(values).most_common(1)[0][0] if values else None


def pcie_findings(fleet: dict[str, dict[str, Any]]) -> list[Finding]:
    """GPUs whose PCIe link is narrower or of an older generation than their peers' of the same model.

    The generation compared is the link's maximum (the current one drops at idle to save power);
    the width is the current one, which stays where the link trained.
    """
    out = []
    for model, devs in _by_model(_devices(fleet)).items():
        links = [(d.get("pcie") or {}) for _, d in devs]
        peer_gen = _modal([p.get("max_gen") for p in links if p.get("max_gen")])
        peer_width = _modal([p.get("width") for p in links if p.get("width")])
        for node, dev in devs:
            p = dev.get("pcie") or {}
            gen, width, max_width = p.get("max_gen"), p.get("width"), p.get("max_width")
            slower = (peer_gen and gen and gen < peer_gen) or (peer_width and width and width < peer_width)
            if slower and len(devs) >= 2:
                text = (
                    f"{_gpu(node, dev)} runs PCIe Gen{gen} x{width} where its peers ({model}) run Gen{peer_gen} "
                    f"x{peer_width}: host copies top out at {pcie_gbps(gen, width)} GB/s instead of "
                    f"{pcie_gbps(peer_gen, peer_width)}; reseat the card or riser, check the slot"
                )
                out.append(finding("warn", node, text))
            elif width and max_width and width < max_width:
                out.append(
                    finding("warn", node, f"{_gpu(node, dev)} trained its PCIe link at x{width} of x{max_width}")
                )
    return out


def nvlink_findings(fleet: dict[str, dict[str, Any]]) -> list[Finding]:
    """NVLink links down: inactive links on a GPU, or fewer active ones than its model's peers."""
    out = []
    for devs in _by_model([(node, dev) for node, dev in _devices(fleet) if dev.get("nvlink")]).values():
        usual = _modal([d["nvlink"].get("active", 0) for _, d in devs])
        for node, dev in devs:
            link = dev["nvlink"]
            down, active = link.get("inactive") or [], link.get("active", 0)
            if down or active < usual:
                which = f"links {', '.join(map(str, down))}" if down else f"{usual - active} links"
                text = (
                    f"NVLink {which} down on {_gpu(node, dev)} ({active} active where its peers have {usual}): "
                    "collectives fall back to PCIe or hang; reset the GPU or drain the node"
                )
                out.append(finding("fail", node, text))
    return out


# -- gpu check results ----------------------------------------------------------------


def slow_outliers(samples: list[tuple[Who, float]]) -> tuple[float | None, list[tuple[Who, float]]]:
    """The median of (who, value) samples and those well below it (robust: median and MAD)."""
    if len(samples) < MIN_PEERS:
        return None, []
    values = [v for _, v in samples]
    mid = median(values)
    sigma = 1.4826 * median(abs(v - mid) for v in values)
    cut = min(SLOW_FRACTION * mid, mid - SLOW_SIGMAS * sigma)
    return mid, [(who, v) for who, v in samples if v < cut]


METRICS = (
    ("bf16_tflops", "bf16 matmul", "TFLOP/s"),
    ("fp16_tflops", "fp16 matmul", "TFLOP/s"),
    ("h2d_gbps", "host-to-device copy", "GB/s"),
    ("d2h_gbps", "device-to-host copy", "GB/s"),
)


# A GPU pair is far below when it runs under this share of both its siblings' median (the node's other
# pairs over the same kind of link) and its peers' (the same two GPUs on nodes of the same model).
PAIR_FAR_BELOW = 0.5
MIN_SIBLINGS = 2
PAIR_METRICS = (("p2p_gbps", "peer-to-peer copy"), ("nccl_busbw_gbps", "NCCL all_reduce busbw"))
LINK_WORDS = {
    "nvlink": "NVLink",
    "pcie_switch": "PCIe-switch",
    "host_bridge": "host-bridge",
    "numa_node": "same-socket",
    "system": "cross-socket",
    "unknown": "other",
}


def _pair_values(res: dict[str, Any], key: str) -> dict[tuple[int, int], tuple[float, dict[str, Any]]]:
    """{(a, b) with a < b: (the slower direction's figure, its entry)} of one node's matrix."""
    out: dict[tuple[int, int], tuple[float, dict[str, Any]]] = {}
    for p in res.get("pairs") or []:
        value = p.get(key)
        if not isinstance(value, (int, float)):
            continue
        pair = (min(p["src"], p["dst"]), max(p["src"], p["dst"]))
        if pair not in out or value < out[pair][0]:
            out[pair] = (float(value), p)
    return out


def _model(res: dict[str, Any]) -> str:
    return _modal([d.get("name") for d in res.get("devices") or [] if d.get("name")]) or "?"


def _far_below(
    node: str,
    pair: tuple[int, int],
    matrices: dict[str, dict[tuple[int, int], tuple[float, dict[str, Any]]]],
    models: dict[str, str],
) -> tuple[float, float, float | None, int, dict[str, Any]] | None:
    """(value, siblings' median, peers' median, peers, entry) when the pair is far below both; else None."""
    matrix = matrices[node]
    value, entry = matrix[pair]
    link = entry.get("link") or "unknown"
    siblings = [v for p, (v, e) in matrix.items() if p != pair and (e.get("link") or "unknown") == link]
    if len(siblings) < MIN_SIBLINGS:
        return None
    peers = [
        m[pair][0] for other, m in matrices.items() if other != node and models[other] == models[node] and pair in m
    ]
    sib, peer = median(siblings), (median(peers) if peers else None)
    if value >= PAIR_FAR_BELOW * sib or (peer is not None and value >= PAIR_FAR_BELOW * peer):
        return None
    return value, sib, peer, len(peers), entry


def pair_findings(results: dict[str, dict[str, Any]]) -> list[Finding]:
    """GPU pairs of a node far below their siblings on that node and the same pair on its peers (same model):
    one finding per pair, on its peer-to-peer copy rate, else its NCCL busbw.

    results: {node: gpu check result}; each result's ``pairs`` is its intra-node matrix.
    """
    models = {node: _model(res) for node, res in results.items()}
    named: set[tuple[str, tuple[int, int]]] = set()
    out = []
    for key, what in PAIR_METRICS:
        matrices = {node: _pair_values(res, key) for node, res in sorted(results.items())}
        for node, matrix in matrices.items():
            for a, b in sorted(matrix):
                found = None if (node, (a, b)) in named else _far_below(node, (a, b), matrices, models)
                if found is None:
                    continue
                named.add((node, (a, b)))
                value, sib, peer, peers, entry = found
                words = LINK_WORDS.get(entry.get("link") or "unknown", "other")
                beside = f"its other {words} pairs run {sib:.0f} GB/s"
                if peer is not None:
                    beside = f"its other {words} pairs run {sib:.0f} and GPU {a}↔{b} of {peers} peers {peer:.0f} GB/s"
                if entry.get("p2p") is False:
                    cause = "no peer access between them (ACS or the IOMMU routes the pair through the CPU)"
                elif entry.get("link") == "nvlink":
                    cause = "an NVLink lane down, or the pair falling back to PCIe"
                else:
                    cause = "the PCIe path between them degraded (a switch port or a riser)"
                text = f"{node} GPU {a}↔{b}: {value:.0f} GB/s {what} where {beside}: {cause}"
                out.append(finding("fail", node, text))
    return out


def check_findings(results: dict[str, dict[str, Any]]) -> list[Finding]:
    """Findings from every node's gpu check result: failures, GPUs slow against their model's fleet,
    and GPU pairs far below their siblings and peers (``pair_findings``).

    results: {node: gpu check result (gpu_contract.validate_result shape)}.
    """
    out = pair_findings(results)
    samples: dict[tuple[str, str], list[tuple[tuple[str, int], float]]] = defaultdict(list)
    for node, res in sorted(results.items()):
        status = res.get("status")
        if status in ("failed", "timeout"):
            out.append(finding("fail", node, f"gpu check {status} on {node} ({res.get('reason')}): {res.get('hint')}"))
        elif status == "degraded":
            out.append(finding("warn", node, f"gpu check degraded on {node}: {res.get('hint')}"))
        for dev in res.get("devices") or []:
            for key, _, _ in METRICS:
                if isinstance(dev.get(key), (int, float)):
                    samples[(dev.get("name") or "?", key)].append(((node, dev.get("index")), float(dev[key])))
    for (model, key), found in sorted(samples.items()):
        what, unit = next((w, u) for k, w, u in METRICS if k == key)
        mid, slow = slow_outliers(found)
        if mid is None:  # too few GPUs of this model: nothing is slow
            continue
        for (node, index), value in slow:
            out.append(
                finding(
                    "warn",
                    node,
                    (
                        f"GPU {index} of {node} ({model}) is slow at {what}: {value:g} {unit} where the fleet's "
                        f"{len(found)} {model} GPUs have a median of {mid:g} ({value / mid:.0%}); check clocks, power "
                        "capping and thermals (nvidia-smi -q -d PERFORMANCE)"
                    ),
                )
            )
    return _sorted(out)

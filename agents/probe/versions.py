"""torch, CUDA and NCCL versions: this rank's own, and the peers' compared with them."""

from __future__ import annotations

import sys
from typing import Any

from agents.probe.state import ProbeState


def local_versions(torch: Any) -> dict[str, Any]:
    nccl = None
    try:
        if torch.cuda.is_available():
            v = torch.cuda.nccl.version()
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:
        nccl = None
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "python": ".".join(map(str, sys.version_info[:3])),
    }


def compare_versions(p: ProbeState, peers: dict[int, dict[str, Any]]) -> None:
    """Record the first peer whose torch, CUDA or NCCL differs (flagged version_mismatch), else the pair's peer."""
    for r, info in sorted(peers.items()):
        if r == p.rank:
            continue
        theirs = info["versions"]
        if any(theirs.get(k) != p.versions.get(k) for k in ("torch", "cuda", "nccl")):
            p.peer_versions = dict(theirs, node=info["node"], rank=r)
            p.extra["version_mismatch"] = True
            return
    if p.n == 2:
        p.peer_versions = dict(peers[1 - p.rank]["versions"], node=peers[1 - p.rank]["node"])


def version_text(p: ProbeState) -> str:
    pv = p.peer_versions
    return (
        f"{p.name} has torch {p.versions['torch']} / CUDA {p.versions['cuda']} / NCCL {p.versions['nccl']}, "
        f"{pv.get('node')} has torch {pv.get('torch')} / CUDA {pv.get('cuda')} / NCCL {pv.get('nccl')}"
    )

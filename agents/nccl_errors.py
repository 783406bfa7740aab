"""Names NCCL and CUDA failures: an error text in, a reason code and a hint a person can act on out.

Pure functions on text (torch's exception messages, NCCL's WARN lines), so
every rule is tested on recorded strings without a GPU. agents.probe calls
these on its NCCL path; nothing here imports torch.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

DEBUG_HINT = "rerun with NCCL_DEBUG=WARN to see NCCL's own reason"


class NcclFailure(NamedTuple):
    """A named failure: a contract reason code, a hint, and the status it gives the probe."""

    reason: str
    hint: str
    status: str = "failed"


_DUPLICATE = re.compile(r"Duplicate GPU detected\s*:\s*rank (\d+) and rank (\d+) both on CUDA device ([0-9a-fA-F]+)")
_VERSION = re.compile(r"Mismatched NCCL version detected\s*:\s*rank (\d+) version (\d+) rank (\d+) version (\d+)")
_NCCL_VERSION = re.compile(r"NCCL version ([0-9][0-9.]*[0-9])")

_UNAVAILABLE = (
    "doesn't have nccl built in",
    "nccl is not available",
    "processgroupnccl is only supported with gpus",
    "torch not compiled with cuda enabled",
)
# The GPU itself is faulty: a hardware finding, not a setup problem.
_GPU_FAULTS = (
    ("uncorrectable ecc error", "the GPU hit an uncorrectable ECC error: drain the node and reset the GPU"),
    ("gpu is lost", "the GPU fell off the bus: drain the node, look for Xid 79 in dmesg"),
)
# CUDA cannot be used at all on this node: no device, driver/runtime mismatch, device busy or lost.
_CUDA_UNUSABLE = (
    ("no cuda-capable device is detected", "no CUDA device is visible (check CUDA_VISIBLE_DEVICES and the driver)"),
    ("found no nvidia driver", "no NVIDIA driver is loaded"),
    (
        "cuda driver version is insufficient",
        "the NVIDIA driver is older than the CUDA version torch was built for: "
        "upgrade the driver or install a torch build for an older CUDA",
    ),
    ("system has unsupported display driver / cuda driver combination", "the driver and CUDA runtime do not match"),
    (
        "busy or unavailable",
        "the GPU is busy or in exclusive-process mode with another process on it (nvidia-smi -q | grep 'Compute Mode')",
    ),
    ("cuda driver initialization failed", "CUDA could not initialise the driver (dmesg shows why)"),
    ("cudaerrorinitializationerror", "CUDA could not initialise the driver (dmesg shows why)"),
)

# NCCL's own lines that name a failure: the pattern's groups fill the hint.
_NCCL_LINES = (
    (
        _DUPLICATE,
        "duplicate_gpu",
        "two ranks on {node} use the same GPU (rank {0} and rank {1} both on CUDA device {2}): NCCL needs one GPU per "
        "rank; give every local rank its own device (torch.cuda.set_device(local_rank)) or start fewer ranks than GPUs",
    ),
    (
        _VERSION,
        "version_mismatch",
        "NCCL versions differ between ranks (rank {0} has {1}, rank {2} has {3}): every rank must load the same NCCL; "
        "pin the torch build (or nvidia-nccl package) on every node",
    ),
)
# NCCL's error names in other words: a failure is named when every word of one of its groups is in the text.
_NCCL_ERRORS = (
    (
        (("ncclremoteerror",), ("remote process exited",)),
        "transport",
        "NCCL on {node} lost {peer}: the remote process exited or the network failed "
        "(check the peer's log and the InfiniBand/RoCE link)",
    ),
    (
        (("ncclsystemerror",), ("system error", "nccl")),
        "transport",
        "NCCL hit a system error on {node} (socket, shared memory or InfiniBand setup): check "
        "NCCL_SOCKET_IFNAME, /dev/shm size and the IB devices; " + DEBUG_HINT,
    ),
    (
        (("unhandled cuda error",), ("ncclunhandledcudaerror",)),
        "backend_unavailable",
        "NCCL met a CUDA error on {node}: the GPU or driver is unhealthy (check dmesg for Xid errors and "
        "nvidia-smi); " + DEBUG_HINT,
    ),
)


def peer_nccl_text(mine: str | None, theirs: str | None, peer: str) -> str:
    return f"this rank has NCCL {mine or '?'}, {peer} has NCCL {theirs or '?'}"


def classify(
    text: str,
    *,
    node: str = "this node",
    peer: str = "the peer",
    backend: str = "nccl",
    versions: dict[str, Any] | None = None,
    peer_versions: dict[str, Any] | None = None,
) -> NcclFailure | None:
    """The named NCCL/CUDA failure in an error text, or None when the text is not one of them.

    versions / peer_versions: this rank's and the peer's {"nccl": ...} where known,
    so a version mismatch names both versions even when NCCL's own line is absent.
    """
    if not text:
        return None
    low = text.lower()
    for pattern, reason, hint in _NCCL_LINES:
        if m := pattern.search(text):
            return NcclFailure(reason, hint.format(*m.groups(), node=node))
    if any(w in low for w in _UNAVAILABLE):
        return NcclFailure(
            "backend_unavailable",
            (
                f"NCCL is not usable on {node}: this torch build has no NCCL or no CUDA; install a CUDA build of torch "
                "on GPU nodes, or probe CPU nodes with the gloo backend"
            ),
        )
    for needle, why in _GPU_FAULTS:
        if needle in low:
            return NcclFailure("gpu_error", f"a GPU of {node} is faulty: {why}")
    for needle, why in _CUDA_UNUSABLE:
        if needle in low:
            return NcclFailure("backend_unavailable", f"CUDA is not usable on {node}: {why}")
    if "invalid usage" in low or "ncclinvalidusage" in low:
        mine = (versions or {}).get("nccl")
        theirs = (peer_versions or {}).get("nccl")
        if mine and theirs and mine != theirs:
            return NcclFailure(
                "version_mismatch",
                (
                    f"NCCL rejected the group as invalid usage and the versions differ "
                    f"({peer_nccl_text(mine, theirs, peer)}): load the same NCCL on every node"
                ),
            )
        return NcclFailure(
            "collective_error",
            (
                f"NCCL rejected the setup on {node} as invalid usage: most often two ranks on one GPU or "
                f"different NCCL versions across ranks; {DEBUG_HINT}"
            ),
        )
    for alternatives, reason, hint in _NCCL_ERRORS:
        if any(all(w in low for w in words) for words in alternatives):
            return NcclFailure(reason, hint.format(node=node, peer=peer))
    return None


def nccl_version_in(text: str) -> str | None:
    """The NCCL version torch names in its error text ("NCCL version 2.21.5")."""
    m = _NCCL_VERSION.search(text or "")
    return m.group(1) if m else None


def multi_group_hang_note(backend: str, multi_group: bool, stage: str) -> str:
    """Why an NCCL probe with two groups may hang at init or in its first collective (or "")."""
    if backend != "nccl" or not multi_group or stage not in ("init", "collective"):
        return ""
    return (
        "; with device_id passed to init_process_group NCCL starts eagerly and every new_group then runs "
        "a communicator init that all ranks must join in the same order (the DeepSpeed pattern): a rank that "
        "creates its groups in another order, or skips one, leaves the others waiting here. Create groups in "
        "the same order on every rank, or leave device_id out so that NCCL starts lazily"
    )

"""What a failure tells a person: the hint for a stage that ran out of time, and a failed collective named.

Shared by the stages that run collectives (init, collective, bandwidth), the resolve
stage and the watchdog, so that the same failure reads the same wherever it happened.
"""

from __future__ import annotations

from agents import nccl_errors
from agents.probe.errors import StageFailure, classify_collective_error, first_line
from agents.probe.state import ProbeState


def timeout_hint(p: ProbeState, stage: str, limit: float) -> str:
    peer = p.others_label()
    by_stage = {
        "resolve": f"{p.name} could not resolve {p.cmd['master_address']} within {limit:.1f}s: check DNS or /etc/hosts",
        "connect": f"{p.name} could not reach {peer} within {limit:.1f}s: a firewall may be dropping TCP; "
        "open the store port and Gloo's ephemeral range",
        "store": f"{p.name} waited {limit:.1f}s for {peer} in the store: the peer never arrived or cannot "
        "reach the store",
        "init": f"{p.name} formed the store with {peer} but the {p.cmd['backend']} process group did not "
        f"connect within {limit:.1f}s on interface {p.interface or 'default'}: a firewall may block "
        "Gloo/NCCL's ephemeral ports, or a peer advertises an address others cannot reach (set "
        "GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME to the interface that routes between the hosts)",
    }
    # collective and bandwidth: a peer that stopped mid-collective
    return by_stage.get(
        stage,
        f"{p.name}: an all_reduce with {peer} did not complete within {limit:.1f}s: a peer stopped "
        "responding mid-collective (process stopped or dead, or the link dropped)",
    )


def nccl_failure(p: ProbeState, e: BaseException) -> StageFailure | None:
    """An NCCL/CUDA error named by agents.nccl_errors; None on the Gloo path or when it names nothing."""
    named = p.cmd["backend"] == "nccl" and nccl_errors.classify(
        str(e), node=p.name, peer=p.others_label(), versions=p.versions, peer_versions=p.peer_versions
    )
    return StageFailure(named.reason, named.hint, detail=first_line(e), status=named.status) if named else None


def collective_failure(p: ProbeState, e: BaseException) -> StageFailure:
    """The one classification of a failed collective: NCCL's own names first, then classify_collective_error."""
    if named := nccl_failure(p, e):
        return named
    line = first_line(e)
    status, reason = classify_collective_error(str(e), p.stage)
    if status == "timeout":
        hint = timeout_hint(p, p.stage, p.stage_limit or p.t.get(p.stage, 0.0))
    elif reason == "transport":
        hint = (
            f"{p.name} lost the connection to {p.others_label()} mid-collective: the peer process "
            "died or the link dropped"
        )
    else:
        hint = f"all_reduce on {p.name} with {p.others_label()} failed: {line[:300]}"
    return StageFailure(reason, hint, detail=line, status=status)

"""One rank's state while it climbs the ladder: its command, what it has learned, and who it talks to.

Every stage module takes a ProbeState and reads or records what it needs on it; the
ladder (agents/probe/ladder.py) is the ProbeState that runs them in order.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from agents import contract, evidence
from agents.probe.child import StagedChild, StageLog
from agents.probe.errors import StageFailure

# When this process started: a probe forked from the warm host sets it again (agents/warmhost.py).
PROCESS_STARTED = time.time()
KEY = "cluster-health/"  # prefix of every key this probe puts in the store


class ProbeState(StagedChild):
    """State of one rank climbing the ladder; every exit goes through finish()."""

    def __init__(self, spec: dict[str, Any], log: StageLog):
        super().__init__(spec, log, "resolve")
        self.rank = self.cmd["rank"]
        self.n = self.cmd["world_size"]
        self.t = self.cmd["timeouts"]
        self.timings: dict[str, float] = {"spawn_s": round(PROCESS_STARTED - spec["spawned_at"], 4)}
        self.extra: dict[str, Any] = {}
        # What the classification of this half rests on (agents/evidence.py; contract.validate_evidence).
        self.evidence: dict[str, Any] = {"rank": self.rank, "node": self.name}
        self.peer_ip: str | None = None
        self.peer_versions: dict[str, Any] = {}
        self.interface: str | None = None
        self.master_ip: str | None = None
        self.port: int | None = None
        self.dist: Any = None  # torch.distributed, imported with torch in run()
        self.store: Any = None
        self.joined: list[int] = []  # ranks seen in the store: the ones rank 0 waits for before it leaves
        self.importer: threading.Thread  # the background torch import, started by run()
        self.import_error: BaseException | None = None  # what it raised, re-raised where torch is needed
        self.device: Any  # the torch device the collectives run on, chosen in the init stage
        self.groups: list[Any]  # the process groups every collective runs on (None: the default group)
        self.measured: dict[str, Any] = {}  # latency and bandwidth figures, for the result

    # -- naming, for hints ---------------------------------------------------
    def peer_name(self, rank: int) -> str:
        peers = self.cmd["peers"]
        if len(peers) == self.n:
            return str(peers[rank]["name"])
        if self.n == 2 and len(peers) == 1:
            return str(peers[0]["name"])
        return self.cmd["master_address"] if rank == 0 else f"rank {rank}"

    def others_label(self) -> str:
        """Who this rank talks to: the master for ranks 1..N-1, every other rank for rank 0."""
        if self.rank:
            return self.master_label()
        return ", ".join(f"{self.peer_name(r)} (rank {r})" for r in range(1, self.n))

    def master_label(self) -> str:
        where = (
            f"{self.master_ip or self.cmd['master_address']}:{self.port}" if self.port else self.cmd["master_address"]
        )
        return f"{self.peer_name(0)} ({where})" if self.rank else f"{self.name} ({where})"

    # -- stages and the result -------------------------------------------------
    def enter(self, stage: str, limit_s: float, step: str | None = None) -> None:
        now = self.close_stage()
        self.stage, self.stage_started, self.stage_limit = stage, now, limit_s
        self.log.emit(event="stage", stage=stage, step=step, limit_s=limit_s)

    def finish_failure(self, f: StageFailure) -> bool:
        return self.finish(f.status, f.reason, f.hint, f.detail)

    def result_fields(self, status: str) -> dict[str, Any]:
        self.timings["total_s"] = round(time.time() - PROCESS_STARTED, 4)
        if status not in contract.HARMLESS_STATUSES:
            # Where the bytes stopped: sockets to the peer with unacknowledged data, retransmitting.
            self.evidence["sockets"] = evidence.peer_sockets(self.peer_ip)
        self.evidence["stage_times"] = dict(self.stage_times)
        return {
            "interface": self.interface,
            "versions": self.versions,
            "peer_versions": self.peer_versions,
            "stage_times": self.stage_times,
            "timings": self.timings,
            "extra": self.extra,
            "evidence": self.evidence,
            **self.measured,
        }

"""The probe rank: runs the stage ladder resolve -> connect -> store -> init -> collective -> bandwidth.

Each stage is a module of this package with plain functions over the rank's state
(agents/probe/state.py); this class only puts them in order, and answers the
StagedChild hooks (watchdog, fail, linger) through them.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from agents.probe import bandwidth, collective, discover, init, store, torch_import, versions, watchdog
from agents.probe.child import run_child
from agents.probe.errors import StageFailure
from agents.probe.hints import collective_failure, nccl_failure
from agents.probe.state import ProbeState


class Probe(ProbeState):
    """One rank of one probe; every exit goes through finish()."""

    def run(self) -> None:
        # The command's launch variables win; otherwise pair/group/discover pin the routed
        # interface later, and preflight leaves the job's own defaults alone.
        os.environ.update(self.cmd["env"])
        # torch takes about a second to import: it loads in the background while this rank
        # resolves names, waits for the rendezvous and tests TCP, which need only sockets.
        self.importer = threading.Thread(
            target=torch_import.import_torch, args=(self,), name="import-torch", daemon=True
        )
        self.importer.start()
        self.stage_started = time.monotonic()
        rdv_started = time.monotonic()
        tcp_store = self.store = store.rendezvous(self)
        peers = store.exchange(self, tcp_store)
        # The rendezvous's own cost: time spent waiting for the torch import is import_wait_s.
        self.timings["rendezvous_s"] = round(time.monotonic() - rdv_started - self.timings.get("import_wait_s", 0.0), 4)
        versions.compare_versions(self, peers)
        if self.cmd["kind"] == "discover":
            return discover.discover(self, tcp_store, peers)
        init_started = time.monotonic()
        init.init_group(self, tcp_store, peers)
        self.timings["init_s"] = round(time.monotonic() - init_started, 4)
        started = time.monotonic()
        collective.collective(self)
        if self.cmd["last_stage"] == "bandwidth":
            bandwidth.bandwidth(self)
        self.timings["collectives_s"] = round(time.monotonic() - started, 4)
        self.finish("ok")

    def watchdog(self) -> None:
        watchdog.watch(self)

    def fail(self, e: BaseException) -> None:
        if isinstance(e, StageFailure):
            self.finish_failure(e)
            return
        if named := nccl_failure(self, e):  # e.g. torch.cuda.set_device on an unusable GPU
            self.finish_failure(named)
        import traceback

        traceback.print_exc()
        if self.stage in ("collective", "bandwidth"):
            self.finish_failure(collective_failure(self, e))
        else:
            self.finish_crashed("probe_crashed", "the probe", e)

    def linger(self) -> None:
        store.linger(self)

    # -- single steps, as the tests drive them ------------------------------------
    def nccl_failure(self, e: BaseException) -> StageFailure | None:
        return nccl_failure(self, e)

    def compare_versions(self, peers: dict[int, dict[str, Any]]) -> None:
        versions.compare_versions(self, peers)

    def version_text(self) -> str:
        return versions.version_text(self)


def main(argv: list[str] | None = None) -> None:
    run_child(argv, Probe)

"""torch, imported in the background while the rank resolves names and waits for the rendezvous.

torch takes about a second to import; the stages before the store need only sockets,
so the ladder starts import_torch in a thread and need_torch waits for it where torch
is first used.
"""

from __future__ import annotations

import time

from agents.probe.state import ProbeState
from agents.probe.versions import local_versions


def import_torch(p: ProbeState) -> None:
    began = time.monotonic()
    try:
        import warnings

        warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
        import torch
        import torch.distributed as dist

        p.torch, p.dist = torch, dist
        p.versions = local_versions(torch)
        p.log.emit(event="imported")
    except BaseException as e:  # re-raised in the main thread by need_torch()
        p.import_error = e
    p.timings["import_s"] = round(time.monotonic() - began, 4)


def need_torch(p: ProbeState) -> None:
    """Wait for the background import; the wait does not count against the current stage."""
    limit, p.stage_limit = p.stage_limit, None
    waited = time.monotonic()
    p.importer.join()
    waited = time.monotonic() - waited
    p.stage_started += waited
    p.timings["import_wait_s"] = round(p.timings.get("import_wait_s", 0.0) + waited, 4)
    p.stage_limit = limit
    if p.import_error is not None:
        raise p.import_error

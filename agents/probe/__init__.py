"""One rank of one probe, run as its own process: `python -m agents.probe SPEC.json`.

Only this process imports torch. It climbs the stage ladder
resolve -> connect -> store -> init -> collective -> bandwidth, writing each
stage start to its stage log (one JSON line per event, flushed) so that the
runner can tell where it was if it has to be killed. A watchdog thread holds
each stage to its own timeout and turns an overrun into a named result; the
runner's wall-clock deadline is the backstop when even that cannot run.
The result goes to a file, never stdout, because torch writes there too.

The modules, each stage's as plain functions over the rank's state:

- `ladder`: the Probe, which runs the stages in order, and `main`;
- `state`: ProbeState, what a rank knows (command, stage clock, evidence) and who it talks to;
- `child`: StagedChild, StageLog and run_child, shared with the gpu check (agents/gpu_check.py);
- `errors`: StageFailure, first_line and classify_collective_error (no state);
- `hints`: timeout hints and the classification of a failed collective (NCCL's names first);
- `watchdog`: the thread that turns a stage's overrun into a result;
- `torch_import`: torch imported in the background; `versions`: versions compared with the peers;
- `resolve`, `connect`, `store`, `init`, `collective`, `bandwidth`: the stages;
- `discover`: the discover kind's interface combinations; `preflight`: what Gloo binds by default.

This module is the package's face: what the runner, the warm host, the gpu check and
the tests import.
"""

from agents.probe.child import StagedChild, StageLog, run_child
from agents.probe.errors import TIMEOUT_REASONS, StageFailure, classify_collective_error, first_line
from agents.probe.ladder import Probe, main
from agents.probe.watchdog import pid_alive

__all__ = [
    "TIMEOUT_REASONS",
    "Probe",
    "StageFailure",
    "StageLog",
    "StagedChild",
    "classify_collective_error",
    "first_line",
    "main",
    "pid_alive",
    "run_child",
]

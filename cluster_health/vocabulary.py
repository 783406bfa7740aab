"""The server's own vocabulary: sweep kinds, verdicts and exit codes, open and bad pair
statuses, and the queue and task names only the server sends and consumes.

Plain data, no Django. What an agent must also know (the probe statuses, stages,
reasons, its queues and task names) is the message contract, agents/contract.py;
docs/VOCABULARY.md says what each word means.
"""

from __future__ import annotations

from agents import contract

# The queue of the server's own tasks (sweeps, the reaper, actions); agents write only to
# contract.INGEST_QUEUE.
SERVER_QUEUE = "server"
# Server tasks on queue "server" (the names are stored in beat's schedule rows: never rename).
TASK_START_SWEEP = "cluster_health.start_sweep"  # plan a pending sweep and dispatch its first round
TASK_REAP = "cluster_health.reap"  # close overdue and offline probes, advance stalled sweeps
TASK_SCHEDULED_SWEEP = "cluster_health.scheduled_sweep"  # a sweep requested by a beat schedule
TASK_ANALYZE_PAIRS = "cluster_health.analyze_pairs"  # fresh pair-table statistics after a large sweep
TASK_PRUNE = "cluster_health.prune"  # retention: raw detail and rejected messages (daily)
TASK_HANG = "cluster_health.hang"  # drive one hang diagnosis to its answer (the API's)
TASK_AFTER_SWEEP = "cluster_health.actions.after_sweep"  # alerts and Slurm actions of a finished sweep
TASK_DELIVER = "cluster_health.actions.deliver"  # one alert delivery, retried
TASK_SLURM = "cluster_health.actions.slurm"  # drain or resume nodes after a sweep
TASK_OFFLINE = "cluster_health.actions.check_offline"  # alerts for agents gone silent (beat)

OPEN_STATUSES = ("pending", "running")  # a probe row before it has its final status
BAD_STATUSES = ("failed", "timeout", "offline")  # a pair that did not work: fails the sweep
# A pair's final status after the confirmation pass (cluster_health/core/confirmation.py), set by the server
# only: ``transient`` (bad once, fine when probed again) and ``contended`` (slow while its node was busy).
# Both are reported and never acted on.
CONFIRMATION_STATUSES = ("transient", "contended")
PAIR_STATUSES = (*OPEN_STATUSES, *contract.STATUSES, *CONFIRMATION_STATUSES)  # every status a pair row can hold
# A sweep's phase while it runs: its planned rounds, then the confirmation pass's extra rounds.
SWEEP_PHASES = ("probing", "confirming")

VERDICTS = ("pass", "warn", "fail", "unknown")
VERDICT_EXIT_CODES = {"pass": 0, "warn": 1, "fail": 2, "unknown": 3}  # the Nagios convention
SWEEP_KINDS = (
    "full",
    "connectivity",
    "quick",
    "pairs",
    "group",
    "preflight",
    "discover",
    "sampled",
    "topology",
    "bisect",
    "gpu",
)
BANDWIDTH_SWEEP_KINDS = ("full", "pairs", "sampled", "topology")  # pairs measure bandwidth unless told otherwise
GROUP_SWEEP_KINDS = ("full", "group")  # end with a group all_reduce over every node
DISCOVER_SWEEP_KINDS = ("discover",)  # pair probes that try every interface combination
GPU_SWEEP_KINDS = ("gpu",)  # one local GPU check per node (agents/gpu_check.py), no pairs

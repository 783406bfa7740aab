"""Sweeps from request to verdict: request (validation), dispatch (commands to agents), lifecycle
(plan, rounds, finish, cancel), closing (a probe's final row), baselines, findings, and the reaper.

The names below are the operations callers outside the package use.
"""

from cluster_health.sweeps.lifecycle import advance, cancel, start_sweep
from cluster_health.sweeps.request import SweepRequestError, clean_request, request_sweep

__all__ = ["SweepRequestError", "advance", "cancel", "clean_request", "request_sweep", "start_sweep"]

"""Which Slurm node states an idle-gap sweep may hold and probe: a node that runs a job never is."""

from __future__ import annotations

import pytest

from cluster_health.actions import slurm


@pytest.mark.parametrize(
    ("state", "runs_nothing", "running"),
    [
        ("IDLE", True, False),
        ("IDLE+MAINTENANCE+RESERVED", True, False),  # caught, its job over
        ("IDLE+COMPLETING+MAINTENANCE+RESERVED", False, False),  # its job still finishing
        ("IDLE+DRAIN", False, False),
        ("IDLE+NOT_RESPONDING", False, False),
        ("ALLOCATED", False, True),
        ("ALLOCATED+MAINTENANCE+RESERVED", False, True),  # caught, its job running
        ("MIXED", False, True),
        ("DOWN+NOT_RESPONDING", False, False),
    ],
)
def test_a_node_is_held_for_a_sweep_only_when_it_runs_nothing(state, runs_nothing, running):
    assert slurm.runs_nothing(state) is runs_nothing
    assert slurm.running_job(state) is running

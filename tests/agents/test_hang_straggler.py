"""A job that progresses, held back by one slow rank (devtools/hung_job.py ``straggler``: rank 1 sleeps before
each all_reduce), under real torchrun with Gloo on loopback: the helper's report joined by core.hangs names
rank 1 and its lateness per step (``slow``, exit 1), from its Flight Recorder and from the stacks alone; a
job at a steady pace with no straggler stays ``progressing`` (exit 0)."""

from __future__ import annotations

import time

import pytest

from cluster_health.core.hangs import EXIT_CODES, diagnose
from tests.agents.test_hang_inspect import node_view
from tests.support.hung_jobs import job

pytestmark = pytest.mark.timeout(150)


@pytest.fixture
def slow_rank(monkeypatch):
    monkeypatch.setenv("HUNG_JOB_SLOW_S", "0.3")
    monkeypatch.setenv("HUNG_JOB_SLOW_RANK", "1")


def test_a_slow_rank_is_named_with_its_lateness_from_the_flight_recorder(tmp_path, slow_rank):
    with job("straggler", tmp_path, flight=True) as selector:
        time.sleep(3.0)  # more than MIN_STEPS steps of 0.3 s in every rank's recorder
        ranks = node_view(selector)
    out = diagnose(ranks, world_size=2)
    assert (out["hung"], out["verdict"], EXIT_CODES[out["verdict"]]) == (False, "slow", 1), out
    culprit = out["culprits"][0]
    assert (culprit["kind"], culprit["ranks"], culprit["subject"]) == ("rank", [1], "rank 1")
    steps = culprit["evidence"]["steps"]
    assert steps["source"] == "flight recorder" and steps["last_in"] >= 0.75 * steps["steps"] >= 6
    assert 0.2 <= steps["lateness_s"] <= 0.6, steps  # the 0.3 s it sleeps, give or take the step's own time
    assert "held back by rank 1 on local" in culprit["text"] and "its own code is slower" in culprit["text"]


def test_a_slow_rank_is_named_from_its_stacks_without_a_flight_recorder(tmp_path, slow_rank):
    with job("straggler", tmp_path) as selector:
        ranks = node_view(selector)
    out = diagnose(ranks, world_size=2)
    assert (out["verdict"], EXIT_CODES[out["verdict"]]) == ("slow", 1), out
    (culprit,) = out["culprits"]
    steps = culprit["evidence"]["steps"]
    assert (culprit["ranks"], steps["source"], steps["lateness_s"]) == ([1], "stacks", None)
    assert steps["frame"]["function"] == "train" and "enable the Flight Recorder" in culprit["text"]


def test_a_job_at_a_steady_pace_with_no_straggler_stays_progressing(tmp_path):
    with job("train", tmp_path, flight=True) as selector:
        time.sleep(1.5)
        ranks = node_view(selector)
    assert all(len(r["flight"]["recent"]) >= 8 for r in ranks)  # the recorder was read: steps were compared
    out = diagnose(ranks, world_size=2)
    assert (out["hung"], out["verdict"], EXIT_CODES[out["verdict"]], out["culprits"]) == (
        False,
        "progressing",
        0,
        [],
    )

"""A running sweep's whole count read from its current round (Sweep._running_counts) equals the plain count of
every row, at every step of sweeps that grow while they run (a confirmation pass, bisect phases)."""

from __future__ import annotations

import pytest

from cluster_health import models
from cluster_health.models import PairProbe, Sweep
from devtools.sweep_driver import heartbeat, result_for

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]


@pytest.fixture
def compared(monkeypatch):
    """Every whole-sweep progress of a running sweep computed both ways and compared; returns the comparisons."""
    monkeypatch.setattr(models, "SETTLED_COUNT_NODES", 0)
    monkeypatch.setattr(models, "_settled", {})
    monkeypatch.setattr(models, "_rows", {})
    seen: list[int] = []
    kept = Sweep.progress

    def progress(self, round_only=False):
        got = kept(self, round_only)
        if not round_only and self.status == "running":
            with monkeypatch.context() as plain:
                plain.setattr(models, "SETTLED_COUNT_NODES", 10**9)
                assert got == kept(self, round_only), (self.current_round, self.params.get("confirm_first"))
            seen.append(self.current_round)
        return got

    monkeypatch.setattr(Sweep, "progress", progress)
    return seen


def drive(driver, sweep, reply):
    """Answer one command at a time, reading the sweep's whole count after each."""
    for _ in range(200):
        pending = driver.take()
        if not pending:
            return
        for cmd in pending:
            driver.ingest(reply(cmd))
            sweep.refresh_from_db()
            sweep.progress()


def pair_of(cmd) -> set[str]:
    if cmd["kind"] != "pair":
        return set()
    probe = PairProbe.objects.select_related("node_a", "node_b").get(pk=cmd["probe_id"])
    return {probe.node_a.name, probe.node_b.name}


def test_through_a_full_sweep_and_its_confirmation_pass(driver, compared):
    nodes = [f"n{i}" for i in range(1, 7)]
    for n in nodes:
        heartbeat(n)
    sweep = driver.sweep(kind="full", nodes=nodes)

    def reply(cmd):
        pair = pair_of(cmd)
        if pair == {"n2", "n5"}:
            return result_for(cmd, status="timeout", stage="connect", reason="connect_timeout", hint="no answer")
        return result_for(cmd, busbw=0.1 if "n3" in pair else 1.0)

    drive(driver, sweep, reply)
    sweep.refresh_from_db()
    assert sweep.status == "finished" and sweep.params["confirm_rounds"] > 0
    assert len(set(compared)) >= sweep.params["confirm_first"]  # every round of it, the pass's too
    assert max(compared) >= sweep.params["confirm_first"]


def test_through_the_phases_of_a_bisect_sweep(driver, compared):
    nodes = [f"n{i:02d}" for i in range(1, 13)]
    for n in nodes:
        heartbeat(n)
    sweep = driver.sweep(kind="bisect")
    drive(
        driver,
        sweep,
        lambda cmd: (
            result_for(cmd, status="timeout", stage="connect", reason="connect_timeout")
            if "n05" in pair_of(cmd)
            else result_for(cmd, busbw=1.0)
        ),
    )
    sweep.refresh_from_db()
    assert sweep.status == "finished" and sweep.params["bisect_phase"] >= 2
    assert max(compared) > 3  # past the quick phase's rounds, into the rows added as it ran

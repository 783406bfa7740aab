"""Round changes count the whole sweep at most every SWEEP_COUNT_EVERY_S; pair updates count their round."""

import pytest

from cluster_health.models import Sweep
from cluster_health.shapes import broadcast

pytestmark = pytest.mark.django_db


@pytest.fixture
def sent(monkeypatch):
    out = []
    monkeypatch.setattr(broadcast, "_send", out.append)
    monkeypatch.setattr(broadcast, "_last_sweep_count", {})
    return out


def test_it_counts_the_whole_sweep_at_a_round_change_then_only_the_round_until_the_interval_passes(
    sent, monkeypatch, django_capture_on_commit_callbacks
):
    sweep = Sweep.objects.create(kind="full", status="running", nodes=["a", "b"], current_round=1, total_rounds=3)
    clock = [100.0]
    monkeypatch.setattr(broadcast.time, "monotonic", lambda: clock[0])
    with django_capture_on_commit_callbacks(execute=True):
        broadcast.sweep_update(sweep, throttle=True)
        clock[0] += 0.5
        broadcast.sweep_update(sweep, throttle=True)
        clock[0] += broadcast.SWEEP_COUNT_EVERY_S
        broadcast.sweep_update(sweep, throttle=True)
        broadcast.sweep_update(sweep)  # a start or an end: always the whole sweep
    assert [m["progress"]["scope"] for m in sent] == ["sweep", "round", "sweep", "sweep"]


def test_held_updates_go_out_at_the_flush_one_per_sweep_with_every_pair_in_order(
    sent, django_capture_on_commit_callbacks
):
    """The ingest consumer's way: a round's updates held while batches keep coming, then one message a sweep."""
    one = Sweep.objects.create(kind="full", status="running", nodes=["a", "b"], current_round=2, total_rounds=3)
    two = Sweep.objects.create(kind="full", status="running", nodes=["c", "d"], current_round=1, total_rounds=1)
    with broadcast.holding():
        with django_capture_on_commit_callbacks(execute=True):
            broadcast.sweep_update(one, [{"probe": 1}], round_only=True)
            broadcast.sweep_update(two, [{"probe": 7}], round_only=True)
            broadcast.sweep_update(one, [{"probe": 2}, {"probe": 3}], round_only=True)
        assert sent == [] and broadcast.held_since() is not None  # held past their commit
        broadcast.flush()
        assert [(m["sweep"], [p["probe"] for p in m["pairs"]]) for m in sent] == [(one.pk, [1, 2, 3]), (two.pk, [7])]
        assert {m["progress"]["scope"] for m in sent} == {"round"} and sent[0]["progress"]["round"] == 2
        with django_capture_on_commit_callbacks(execute=True):
            broadcast.sweep_update(one, [{"probe": 4}], round_only=True)
            broadcast.sweep_update(one, throttle=True)  # a round change: the whole sweep counted
    assert broadcast.held_since() is None  # the end of holding sends what was left
    assert [p["probe"] for p in sent[2]["pairs"]] == [4] and sent[2]["progress"]["scope"] == "sweep"
    with django_capture_on_commit_callbacks(execute=True):
        broadcast.sweep_update(two)
    assert len(sent) == 4  # not held any more: sent at its commit

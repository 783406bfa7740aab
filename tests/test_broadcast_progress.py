"""Round changes count the whole sweep at most every SWEEP_COUNT_EVERY_S; pair updates count their round."""

import pytest

from cluster_health.models import Sweep
from cluster_health.web import broadcast

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

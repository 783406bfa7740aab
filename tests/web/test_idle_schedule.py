"""The Schedules page offers the idle-gap sweep: saved as the scheduled task takes it, refused as the task would
refuse it, listed as what it does (cluster_health/web/schedules.py, cluster_health/sweeps/idle.py)."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from cluster_health import tasks, vocabulary
from cluster_health.models import Sweep
from cluster_health.sweeps import idle
from tests.support.dashboard_rows import make_nodes, make_user

pytestmark = pytest.mark.django_db
FORM = {"name": "idle gaps", "kind": "idle", "backend": "gloo", "nodes": "", "cron": "15 * * * *", "enabled": "on"}


@pytest.fixture
def operator(client):
    client.force_login(make_user("op", operator=True))
    return client


def errors(response) -> str:
    return " ".join(re.findall(r'class="error[^"]*">([^<]+)<', response.content.decode()))


def test_an_operator_schedules_an_idle_sweep_and_the_page_says_what_it_does(operator):
    make_nodes(["k1", "k2"])
    assert '<option value="idle">idle</option>' in operator.get(reverse("schedule-new")).content.decode()
    assert operator.post(reverse("schedule-new"), {**FORM, "max_nodes": "16"}).status_code == 302
    task = PeriodicTask.objects.get(name="idle gaps")
    assert task.task == vocabulary.TASK_SCHEDULED_SWEEP and task.queue == "server" and task.enabled
    assert json.loads(task.kwargs) == {"kind": "idle", "max_nodes": 16}
    # What beat will call with it is what the task accepts.
    assert idle.schedule_max_nodes({k: v for k, v in json.loads(task.kwargs).items() if k != "kind"}) == 16

    listing = operator.get(reverse("schedules")).content.decode()
    row = listing[listing.index('data-schedule="idle gaps"') :]
    assert 'data-kind="idle">idle' in row
    assert "up to 16 of the nodes Slurm has idle, their stalest pairs in up to 20 rounds, held while swept" in row
    edit = operator.get(reverse("schedule-edit", args=[task.pk])).content.decode()
    assert 'value="16"' in edit and '<option value="idle" selected>idle</option>' in edit

    # No count: the default, saved without one.
    assert operator.post(reverse("schedule-edit", args=[task.pk]), {**FORM, "max_nodes": ""}).status_code == 302
    assert json.loads(PeriodicTask.objects.get(pk=task.pk).kwargs) == {"kind": "idle"}
    listing = operator.get(reverse("schedules")).content.decode()
    assert f"up to {idle.DEFAULT_MAX_NODES} of the nodes Slurm has idle" in listing


def test_an_idle_schedule_is_refused_as_the_task_would_refuse_it(operator):
    make_nodes(["k1", "k2"])
    refused = [
        ({"max_nodes": "1"}, f"max_nodes: expected a whole number 2..{idle.MAX_NODES}, got 1"),
        ({"max_nodes": str(idle.MAX_NODES + 1)}, f"expected a whole number 2..{idle.MAX_NODES}"),
        ({"nodes": "k1, k2"}, "an idle sweep picks its nodes from the ones Slurm has idle: leave it empty"),
        ({"kind": "connectivity", "max_nodes": "8"}, "only an idle sweep takes a node count"),
    ]
    for change, why in refused:
        response = operator.post(reverse("schedule-new"), {**FORM, **change})
        assert response.status_code == 200 and why in errors(response), (change, errors(response))
    assert not PeriodicTask.objects.filter(name="idle gaps").exists()
    # The task applies the same rule to a schedule written elsewhere (the admin): no sweep, nothing held.
    assert tasks.scheduled_sweep.run(kind="idle", max_nodes=1) is None
    assert tasks.scheduled_sweep.run(kind="idle", nodes=["k1"]) is None
    assert not Sweep.objects.exists()


def test_an_idle_schedules_last_result_is_its_held_pairs_sweep(operator):
    nodes = make_nodes(["k1", "k2"])
    assert operator.post(reverse("schedule-new"), FORM).status_code == 302
    ran = timezone.now() - timedelta(minutes=5)
    PeriodicTask.objects.filter(name="idle gaps").update(last_run_at=ran)
    Sweep.objects.create(source="schedule", kind="connectivity", nodes=[n.name for n in nodes])
    held = Sweep.objects.create(
        source="schedule", kind="pairs", nodes=[n.name for n in nodes], params={"idle_hold": {"reservation": "r"}}
    )
    listing = operator.get(reverse("schedules")).content.decode()
    row = listing[listing.index('data-schedule="idle gaps"') :]
    assert re.search(rf'data-last-result><a href="/sweeps/{held.pk}/">#{held.pk}</a>', row), row[:2000]

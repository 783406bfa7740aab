"""The Schedules page: the sweeps operators schedule (django-celery-beat rows of the scheduled-sweep task).

Only rows whose task is the scheduled sweep are shown and edited here; the product's own jobs
(the reaper, prune, the offline check, beat's backend cleanup) are not offered: disabling the
reaper stalls every sweep. Each schedule is a five-field cron expression in TIME_ZONE and a sweep
request (kind, backend, nodes) checked by the same rules as every other request
(sweeps.clean_request) before it is saved, so a schedule can never fire a request that is refused.
Kind ``idle`` is an idle-gap sweep (sweeps/idle.py): no node list, at most ``max_nodes`` of the
nodes Slurm has idle, checked by the rule the scheduled task applies when it fires.
"""

from __future__ import annotations

import json
from datetime import timedelta

from celery.schedules import crontab
from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.db import transaction
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from cluster_health import sweeps, vocabulary
from cluster_health.core import matrix
from cluster_health.models import Node, Sweep
from cluster_health.sweeps import idle
from cluster_health.web.forms import PAGE_KINDS

CRON_FIELDS = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
IDLE = "idle"  # an idle-gap sweep (sweeps/idle.py): not a sweep kind of its own, it runs a ``pairs`` sweep


def sweep_schedules():
    """The periodic tasks that request sweeps, by name; every other beat job is the product's own."""
    return PeriodicTask.objects.filter(task=vocabulary.TASK_SCHEDULED_SWEEP).select_related("crontab", "interval")


def cron_text(task: PeriodicTask) -> str:
    if task.crontab is not None:
        return " ".join(str(getattr(task.crontab, f)) for f in CRON_FIELDS)
    if task.interval is not None:
        return f"every {task.interval.every} {task.interval.period}"
    return "–"


def next_run(task: PeriodicTask, now):
    """When beat will next fire the task (None while it is disabled or has no schedule)."""
    if not task.enabled or (task.crontab is None and task.interval is None):
        return None
    schedule = task.schedule
    last = task.last_run_at or now
    due = now + max(timedelta(0), schedule.remaining_estimate(last))
    return (due + timedelta(microseconds=500_000)).replace(microsecond=0)  # the estimate lands a hair early


def last_result(task: PeriodicTask, kind: str) -> Sweep | None:
    """The sweep the task's last run requested: beat records the run just before the task creates the sweep."""
    if task.last_run_at is None:
        return None
    sweeps = Sweep.objects.filter(source="schedule", created__gte=task.last_run_at - timedelta(seconds=60))
    # An idle schedule's run is a pairs sweep under a Slurm hold (none at all when no node was idle).
    sweeps = sweeps.filter(kind="pairs", params__has_key="idle_hold") if kind == IDLE else sweeps.filter(kind=kind)
    return sweeps.order_by("created").first()


def _request_of(task: PeriodicTask) -> dict:
    try:
        request = json.loads(task.kwargs or "{}")
    except ValueError:
        request = {}
    return request if isinstance(request, dict) else {}


class ScheduleForm(forms.Form):
    """A scheduled sweep: name, what to sweep, when (cron), enabled."""

    name = forms.CharField(max_length=200)
    kind = forms.ChoiceField(
        choices=[(k, k) for k in (*PAGE_KINDS, IDLE)],
        initial="full",
        help_text="idle: only nodes Slurm reports idle, held from new jobs while their stalest pairs are swept",
    )
    backend = forms.ChoiceField(choices=[("gloo", "gloo"), ("nccl", "nccl")], initial="gloo")
    nodes = forms.CharField(
        required=False,
        max_length=20000,
        help_text="comma-separated node names; empty: every active node when it runs",
    )
    max_nodes = forms.IntegerField(
        required=False,
        label="Max nodes",
        help_text=f"idle only: hold at most this many idle nodes (2..{idle.MAX_NODES}; empty: "
        f"{idle.DEFAULT_MAX_NODES})",
    )
    cron = forms.CharField(
        max_length=200,
        initial="0 2 * * *",
        help_text=f"minute hour day-of-month month day-of-week, in {settings.TIME_ZONE}",
    )
    enabled = forms.BooleanField(required=False, initial=True)

    def __init__(self, *args, task: PeriodicTask | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.task = task

    def clean_name(self):
        name = self.cleaned_data["name"].strip()
        clash = PeriodicTask.objects.filter(name=name).exclude(pk=getattr(self.task, "pk", None))
        if clash.exists():
            raise forms.ValidationError("a schedule of that name exists")
        return name

    def clean_cron(self):
        parts = self.cleaned_data["cron"].split()
        if len(parts) != len(CRON_FIELDS):
            raise forms.ValidationError("five fields: minute hour day-of-month month day-of-week")
        fields = dict(zip(CRON_FIELDS, parts))
        try:
            crontab(**fields)  # by name: celery's positional order is not cron's
        except (ValueError, KeyError) as exc:
            raise forms.ValidationError(f"not a cron expression: {exc}") from None
        return fields

    def clean(self):
        data = super().clean()
        if data.get("kind") == IDLE:
            return self._clean_idle(data)
        if data.get("max_nodes") is not None:
            self.add_error("max_nodes", "only an idle sweep takes a node count: leave it empty")
            return data
        names = [n.strip() for n in (data.get("nodes") or "").split(",") if n.strip()]
        unknown = sorted(set(names) - set(Node.objects.filter(name__in=names).values_list("name", flat=True)))
        if unknown:
            self.add_error("nodes", f"not registered: {', '.join(unknown[:10])}")
            return data
        request = {"kind": data.get("kind"), "backend": data.get("backend")}
        if names:
            request["nodes"] = matrix.natural_sorted(names)
        try:
            sweeps.clean_request(**request)
        except sweeps.SweepRequestError as exc:
            raise forms.ValidationError(str(exc)) from None
        data["request"] = request
        return data

    def _clean_idle(self, data):
        """An idle schedule: its nodes are Slurm's idle ones, its only parameter max_nodes (as the task takes it)."""
        if (data.get("nodes") or "").strip():
            self.add_error("nodes", "an idle sweep picks its nodes from the ones Slurm has idle: leave it empty")
            return data
        params = {} if data.get("max_nodes") is None else {"max_nodes": data["max_nodes"]}
        try:
            idle.schedule_max_nodes(params)
        except idle.IdleSweepError as exc:
            self.add_error("max_nodes", str(exc))
            return data
        data["request"] = {"kind": IDLE, **params}
        return data

    @classmethod
    def initial_of(cls, task: PeriodicTask) -> dict:
        request = _request_of(task)
        return {
            "name": task.name,
            "kind": request.get("kind", "full"),
            "backend": request.get("backend", "gloo"),
            "nodes": ", ".join(request.get("nodes") or []),
            "max_nodes": request.get("max_nodes"),
            "cron": cron_text(task),
            "enabled": task.enabled,
        }

    def save(self) -> PeriodicTask:
        data = self.cleaned_data
        with transaction.atomic():
            schedule, _ = CrontabSchedule.objects.get_or_create(**data["cron"], timezone=settings.TIME_ZONE)
            task = self.task or PeriodicTask(task=vocabulary.TASK_SCHEDULED_SWEEP, queue="server")
            task.name, task.crontab, task.interval = data["name"], schedule, None
            task.kwargs, task.enabled = json.dumps(data["request"]), data["enabled"]
            task.save()
        return task


@login_required
def schedule_list(request):
    """Every scheduled sweep: kind, nodes, cron, next run, last result; add and edit for operators."""
    now = timezone.now()
    rows = []
    for task in sorted(sweep_schedules(), key=lambda t: t.name):
        req = _request_of(task)
        rows.append(
            {
                "task": task,
                "kind": req.get("kind", "full"),
                "backend": req.get("backend", "gloo"),
                "nodes": req.get("nodes") or [],
                "max_nodes": req.get("max_nodes"),
                "cron": cron_text(task),
                "next_run": next_run(task, now),
                "last": last_result(task, req.get("kind", "full")),
            }
        )
    return render(
        request,
        "cluster_health/schedules.html",
        {
            "rows": rows,
            "time_zone": settings.TIME_ZONE,
            "idle_default": idle.DEFAULT_MAX_NODES,
            "idle_rounds": settings.IDLE_MAX_ROUNDS,
        },
    )


@login_required
@permission_required("cluster_health.start_sweep", raise_exception=True)
def schedule_edit(request, pk: int | None = None):
    """Add (no pk) or edit one scheduled sweep; only scheduled-sweep rows can be reached."""
    task = get_object_or_404(sweep_schedules(), pk=pk) if pk is not None else None
    if request.method == "POST":
        form = ScheduleForm(request.POST, task=task)
        if form.is_valid():
            saved = form.save()
            messages.info(request, f"Schedule {saved.name!r} saved{'' if saved.enabled else ' (disabled)'}.")
            return redirect("schedules")
    else:
        form = ScheduleForm(initial=ScheduleForm.initial_of(task) if task else None, task=task)
    return render(request, "cluster_health/schedule_edit.html", {"form": form, "task": task})

"""Rows the UI, the CLI and the API read: nodes, sweeps, probes, findings, baselines.

Every probe and sweep is a row with a status lifecycle; nothing reads Celery's
result backend. Derived state (online, progress, pair keys) lives here as short,
pure methods so views and tasks stay thin.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from agents import contract

PAIR_STATUS_CHOICES = [(s, s) for s in ("pending", "running", *contract.STATUSES)]
OPEN_PAIR_STATUSES = ("pending", "running")
STAGE_CHOICES = [(s, s) for s in contract.STAGES]
REASON_CHOICES = [(r, r) for r in contract.REASONS]
BACKEND_CHOICES = [(b, b) for b in contract.BACKENDS]
VERDICT_CHOICES = [(v, v) for v in contract.VERDICTS]


def pair_key(a: str, b: str) -> tuple[str, str]:
    """A pair's identity regardless of which node was rank 0."""
    return (a, b) if a <= b else (b, a)


class Node(models.Model):
    """A machine running an agent. Registered by its first heartbeat; online is derived."""

    name = models.CharField(max_length=63, unique=True)
    address = models.CharField(max_length=253)
    facts = models.JSONField(default=dict, blank=True)
    agent_version = models.CharField(max_length=64, blank=True, default="")
    last_heartbeat = models.DateTimeField(null=True, blank=True, db_index=True)
    busy = models.BooleanField(default=False)
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @staticmethod
    def online_cutoff(now=None):
        return (now or timezone.now()) - timedelta(seconds=settings.NODE_ONLINE_AFTER_S)

    @classmethod
    def online_q(cls, now=None) -> Q:
        return Q(last_heartbeat__gte=cls.online_cutoff(now))

    def is_online(self, now=None) -> bool:
        return self.last_heartbeat is not None and self.last_heartbeat >= self.online_cutoff(now)


class Baseline(models.Model):
    """Expected busbw per pair: copied from a chosen sweep, or the rolling median of good nightly sweeps."""

    SOURCE_CHOICES = [("sweep", "sweep"), ("rolling", "rolling")]

    name = models.CharField(max_length=100)
    source = models.CharField(max_length=10, choices=SOURCE_CHOICES)
    from_sweep = models.ForeignKey(
        "Sweep", null=True, blank=True, on_delete=models.SET_NULL, related_name="baselines_made"
    )
    sweeps_used = models.JSONField(default=list, blank=True)
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.name} ({self.source})"

    def expected(self) -> dict[tuple[str, str], float]:
        return {(p.node_a, p.node_b): p.busbw_gbps for p in self.pairs.all()}


class BaselinePair(models.Model):
    baseline = models.ForeignKey(Baseline, on_delete=models.CASCADE, related_name="pairs")
    node_a = models.CharField(max_length=63)  # pair_key order: node_a <= node_b
    node_b = models.CharField(max_length=63)
    busbw_gbps = models.FloatField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["baseline", "node_a", "node_b"], name="baseline_pair_unique")]


class Sweep(models.Model):
    """One run of probes over a set of nodes, in rounds; ends with a verdict."""

    KIND_CHOICES = [(k, k) for k in ("full", "connectivity", "quick", "pairs", "group", "preflight", "discover")]
    STATUS_CHOICES = [(s, s) for s in ("pending", "running", "finished", "failed", "cancelled")]
    OPEN_STATUSES = ("pending", "running")
    SOURCE_CHOICES = [(s, s) for s in ("page", "api", "command", "schedule")]

    kind = models.CharField(max_length=16, choices=KIND_CHOICES, default="full")
    backend = models.CharField(max_length=8, choices=BACKEND_CHOICES, default="gloo")
    params = models.JSONField(default=dict, blank=True)
    nodes = models.JSONField(default=list, blank=True)  # node names in matrix order, fixed at planning
    status = models.CharField(max_length=12, choices=STATUS_CHOICES, default="pending", db_index=True)
    verdict = models.CharField(max_length=8, choices=VERDICT_CHOICES, default="unknown")
    source = models.CharField(max_length=10, choices=SOURCE_CHOICES, default="command")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="sweeps"
    )
    baseline = models.ForeignKey(Baseline, null=True, blank=True, on_delete=models.SET_NULL, related_name="sweeps")
    current_round = models.IntegerField(default=0)  # 0: not started; rounds count from 1
    total_rounds = models.IntegerField(default=0)
    error = models.TextField(blank=True, default="")
    created = models.DateTimeField(default=timezone.now, db_index=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["-created"]
        permissions = [("start_sweep", "Can start and cancel sweeps")]
        indexes = [models.Index(fields=["kind", "status", "verdict", "-finished"], name="sweep_kind_done")]

    def __str__(self) -> str:
        return f"sweep {self.pk} ({self.kind}, {self.status})"

    @property
    def is_open(self) -> bool:
        return self.status in self.OPEN_STATUSES

    @property
    def last_stage(self) -> str:
        """How far each pair climbs: full and explicit pairs measure bandwidth, the rest stop at collective."""
        return self.params.get("last_stage") or ("bandwidth" if self.kind in ("full", "pairs") else "collective")

    def duration_s(self) -> float | None:
        if not self.started:
            return None
        return round(((self.finished or timezone.now()) - self.started).total_seconds(), 3)

    def progress(self, round_only: bool = False) -> dict:
        """Counts by pair status, rounds and failures: what a progress line or a browser shows.

        ``round_only`` counts the current round alone, cheap enough to send with every pair
        of a 1,024-node sweep; the whole-sweep count is for round changes and the end.
        """
        qs = self.pairs.filter(round=self.current_round) if round_only else self.pairs.all()
        counts = dict(qs.values("status").annotate(n=models.Count("id")).values_list("status", "n"))
        total = sum(counts.values())
        done = total - counts.get("pending", 0) - counts.get("running", 0)
        bad = sum(counts.get(s, 0) for s in ("failed", "timeout", "offline"))
        return {
            "round": self.current_round,
            "rounds": self.total_rounds,
            "pairs_total": total,
            "pairs_done": done,
            "failures": bad,
            "counts": counts,
            "scope": "round" if round_only else "sweep",
        }


class PairProbe(models.Model):
    """One pair of nodes probed in one round of a sweep; both agents' halves merged into one result."""

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="pairs")
    round = models.IntegerField()
    node_a = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")  # rank 0
    node_b = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")  # rank 1
    backend = models.CharField(max_length=8, choices=BACKEND_CHOICES, default="gloo")
    status = models.CharField(max_length=10, choices=PAIR_STATUS_CHOICES, default="pending")
    stage = models.CharField(max_length=12, choices=STAGE_CHOICES, null=True, blank=True)
    reason = models.CharField(max_length=24, choices=REASON_CHOICES, null=True, blank=True)
    hint = models.TextField(null=True, blank=True)
    latency_us_p50 = models.FloatField(null=True, blank=True)
    latency_us_p99 = models.FloatField(null=True, blank=True)
    sizes = models.JSONField(null=True, blank=True)  # per-size results of the worse half
    algbw_gbps = models.FloatField(null=True, blank=True)  # at the largest size
    busbw_gbps = models.FloatField(null=True, blank=True)
    half_a = models.JSONField(null=True, blank=True)  # raw validated result from rank 0
    half_b = models.JSONField(null=True, blank=True)
    rendezvous = models.CharField(max_length=64, blank=True, default="")
    deadline = models.DateTimeField(null=True, blank=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    duration_s = models.FloatField(null=True, blank=True)
    pruned = models.BooleanField(default=False)  # raw halves and per-size detail removed by retention

    class Meta:
        ordering = ["sweep_id", "round", "id"]
        indexes = [
            models.Index(fields=["sweep", "round", "status"], name="pair_sweep_round_status"),
            models.Index(fields=["status", "deadline"], name="pair_open_deadline"),
            models.Index(fields=["node_a", "node_b", "-id"], name="pair_history"),
        ]

    def __str__(self) -> str:
        return f"probe {self.pk}: {self.node_a_id}-{self.node_b_id} r{self.round} {self.status}"

    @property
    def is_final(self) -> bool:
        return self.status not in OPEN_PAIR_STATUSES


class GroupProbe(models.Model):
    """A collective over many nodes at once: the full sweep's group all_reduce, or a launch rehearsal."""

    KIND_CHOICES = [("group", "group"), ("preflight", "preflight")]

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="groups")
    kind = models.CharField(max_length=10, choices=KIND_CHOICES, default="group")
    nodes = models.JSONField(default=list)  # names, index = rank
    backend = models.CharField(max_length=8, choices=BACKEND_CHOICES, default="gloo")
    status = models.CharField(max_length=10, choices=PAIR_STATUS_CHOICES, default="pending", db_index=True)
    stage = models.CharField(max_length=12, choices=STAGE_CHOICES, null=True, blank=True)
    reason = models.CharField(max_length=24, choices=REASON_CHOICES, null=True, blank=True)
    hint = models.TextField(null=True, blank=True)
    halves = models.JSONField(default=dict, blank=True)  # str(rank) -> validated result
    latency_us_p50 = models.FloatField(null=True, blank=True)
    busbw_gbps = models.FloatField(null=True, blank=True)
    rendezvous = models.CharField(max_length=64, blank=True, default="")
    deadline = models.DateTimeField(null=True, blank=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]

    @property
    def is_final(self) -> bool:
        return self.status not in OPEN_PAIR_STATUSES


class Finding(models.Model):
    """One sentence of a sweep's verdict, naming its culprit: a node, a link, a setting."""

    SEVERITY_CHOICES = [("info", "info"), ("warn", "warn"), ("fail", "fail")]

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="findings")
    severity = models.CharField(max_length=5, choices=SEVERITY_CHOICES)
    code = models.CharField(max_length=40)
    subject = models.CharField(max_length=200)
    text = models.TextField()

    class Meta:
        ordering = ["id"]

    def as_dict(self) -> dict:
        return {"severity": self.severity, "code": self.code, "subject": self.subject, "text": self.text}


class RejectedMessage(models.Model):
    """A message from an agent that failed validation or named something unknown: kept, never applied."""

    received = models.DateTimeField(default=timezone.now, db_index=True)
    task = models.CharField(max_length=40)
    node = models.CharField(max_length=100, blank=True, default="")
    error = models.TextField()
    payload = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-received"]


class ApiToken(models.Model):
    """A bearer token for the JSON API and the CLI on other machines; only its hash is stored."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    token_hash = models.CharField(max_length=64, unique=True)
    created = models.DateTimeField(default=timezone.now)
    last_used = models.DateTimeField(null=True, blank=True)

    @staticmethod
    def hash(raw: str) -> str:
        return hashlib.sha256(raw.encode()).hexdigest()

    @classmethod
    def issue(cls, user, name: str) -> tuple[ApiToken, str]:
        """Create a token; the raw value is returned once and never stored."""
        raw = "chk_" + secrets.token_urlsafe(32)
        return cls.objects.create(user=user, name=name, token_hash=cls.hash(raw)), raw

    def __str__(self) -> str:
        return f"{self.name} ({self.user})"


class SweepMatrix(models.Model):
    """A closed sweep's matrix payload (cluster_health.matrix), stored as JSON text once it no longer changes.

    Reading 523,776 pair rows to build a 1,024-node matrix takes seconds; reading
    this row takes milliseconds, and pages and the API send the text as it is.
    """

    sweep = models.OneToOneField(Sweep, on_delete=models.CASCADE, primary_key=True, related_name="stored_matrix")
    payload = models.TextField()
    built = models.DateTimeField(default=timezone.now)

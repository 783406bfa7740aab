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
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from agents import contract, gpu_contract
from cluster_health import vocabulary
from cluster_health.core import topology

PAIR_STATUS_CHOICES = [(s, s) for s in vocabulary.PAIR_STATUSES]
OPEN_PAIR_STATUSES = vocabulary.OPEN_STATUSES
STAGE_CHOICES = [(s, s) for s in contract.STAGES]
REASON_CHOICES = [(r, r) for r in contract.REASONS]
BACKEND_CHOICES = [(b, b) for b in contract.BACKENDS]
VERDICT_CHOICES = [(v, v) for v in vocabulary.VERDICTS]


IN_SERVICE, MAINTENANCE, RETURNING = "service", "maintenance", "returning"
NODE_STATE_CHOICES = [(IN_SERVICE, "in service"), (MAINTENANCE, "maintenance"), (RETURNING, "returning to service")]


def pair_key(a: str, b: str) -> tuple[str, str]:
    """A pair's identity regardless of which node was rank 0."""
    return (a, b) if a <= b else (b, a)


class Node(models.Model):
    """A machine running an agent. Registered by its first heartbeat; online is derived.

    The fleet is the active nodes: a sweep without explicit nodes covers every one of
    them, online or not, so a dead node fails the sweep instead of dropping out of it.
    Only a person retires a node (``retire``); silence alone never does.
    """

    name = models.CharField(max_length=63, unique=True)
    address = models.CharField(max_length=253)
    facts = models.JSONField(default=dict, blank=True)
    agent_version = models.CharField(max_length=64, blank=True, default="")
    last_heartbeat = models.DateTimeField(null=True, blank=True, db_index=True)
    busy = models.BooleanField(default=False)
    # The node's clock minus the server's, from its last heartbeat's sent_at (queueing makes it read a
    # little behind); None until a heartbeat carried the time.
    clock_offset_s = models.FloatField(null=True, blank=True)
    created = models.DateTimeField(default=timezone.now)
    active = models.BooleanField(default=True, db_index=True)
    retired_at = models.DateTimeField(null=True, blank=True)
    # Declared by operators (nodes label / nodes topology); culprit inference prefers it to the name.
    topology_group = models.CharField(
        max_length=topology.GROUP_MAX_CHARS,
        blank=True,
        default="",
        validators=[RegexValidator(topology.GROUP_RE, f"a topology group is {topology.GROUP_RULE}")],
        help_text="rack, leaf switch or rail; empty: the group comes from the node's name",
    )
    # Set by an operator (cluster_health/operator_states.py): a node in maintenance, or returning from it
    # until its verification sweep passes, is out of fleet sweeps, alerts and Slurm actions.
    state = models.CharField(max_length=12, choices=NODE_STATE_CHOICES, default=IN_SERVICE, db_index=True)
    state_reason = models.CharField(max_length=300, blank=True, default="")
    state_by = models.CharField(max_length=150, blank=True, default="")
    state_since = models.DateTimeField(null=True, blank=True)
    return_sweep = models.ForeignKey(
        "Sweep", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_constraint=False
    )

    class Meta:
        ordering = ["name"]

    @property
    def in_service(self) -> bool:
        return self.state == IN_SERVICE

    @classmethod
    def held(cls, names) -> dict[str, str]:
        """Node name -> its state, for the named nodes an operator holds (maintenance, returning)."""
        return dict(cls.objects.filter(name__in=list(names)).exclude(state=IN_SERVICE).values_list("name", "state"))

    def __str__(self) -> str:
        return self.name

    def retire(self, now=None) -> None:
        """Leave the fleet: sweeps no longer cover this node until it is activated again."""
        self.active, self.retired_at = False, now or timezone.now()
        self.save(update_fields=["active", "retired_at"])

    def activate(self) -> None:
        self.active, self.retired_at = True, None
        self.save(update_fields=["active", "retired_at"])

    def silent_for(self, now=None) -> timedelta | None:
        """Time since the last heartbeat; None if the node was never heard from."""
        if self.last_heartbeat is None:
            return None
        return max(timedelta(0), (now or timezone.now()) - self.last_heartbeat)

    def silent_days(self, now=None) -> int:
        """Whole days since the node was last heard from (since it was registered, if never)."""
        return ((now or timezone.now()) - (self.last_heartbeat or self.created)).days

    def is_stale(self, now=None) -> bool:
        """An active node silent for CLUSTER_HEALTH_STALE_NODE_DAYS: probably gone, but only a person retires it."""
        return self.active and self.silent_days(now) >= settings.STALE_NODE_DAYS

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


class BaselinePair(models.Model):
    baseline = models.ForeignKey(Baseline, on_delete=models.CASCADE, related_name="pairs")
    node_a = models.CharField(max_length=63)  # pair_key order: node_a <= node_b
    node_b = models.CharField(max_length=63)
    busbw_gbps = models.FloatField()  # the median where several sweeps were used
    # The link's own noise: median absolute deviation of its busbw over the sweeps used, and how many there were.
    mad_gbps = models.FloatField(null=True, blank=True)
    samples = models.IntegerField(default=1)
    load = models.FloatField(null=True, blank=True)  # the median load score its figures were measured under

    class Meta:
        constraints = [models.UniqueConstraint(fields=["baseline", "node_a", "node_b"], name="baseline_pair_unique")]


class Sweep(models.Model):
    """One run of probes over a set of nodes, in rounds; ends with a verdict."""

    KIND_CHOICES = [(k, k) for k in vocabulary.SWEEP_KINDS]
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
        """How far each pair climbs: full, explicit pairs, sampled and topology measure bandwidth; the rest stop at
        collective."""
        measured = self.kind in vocabulary.BANDWIDTH_SWEEP_KINDS
        return self.params.get("last_stage") or ("bandwidth" if measured else "collective")

    def duration_s(self) -> float | None:
        if not self.started:
            return None
        return round(((self.finished or timezone.now()) - self.started).total_seconds(), 3)

    @property
    def collapsed_ok(self) -> int:
        """Passing pair rows retention deleted (``manage.py prune``); their results live in the stored matrix."""
        return int((self.params.get("collapsed") or {}).get("ok_rows", 0))

    @property
    def phase(self) -> str:
        """``confirming`` while a running sweep is in its confirmation pass (planned after the last planned round,
        its rounds from ``confirm_first``; its wait before them included), else ``probing``
        (cluster_health/sweeps/confirming.py)."""
        if self.status == "running" and self.params.get("confirm_first") is not None:
            return "confirming"
        return "probing"

    def confirmation(self) -> dict | None:
        """The confirmation pass as the sweep JSON shows it, once planned: its first round and how many it took."""
        if "confirm_first" not in self.params:
            return None
        out = {"first_round": self.params["confirm_first"], "rounds": self.params.get("confirm_rounds", 0)}
        if "confirm_at" in self.params:  # the pass waited (confirm_after_s) before its first round
            out["after_s"] = self.params["confirm_after_s"]
        return out

    def progress(self, round_only: bool = False) -> dict:
        """Counts by pair status (a gpu sweep's: by check status), rounds and failures: what a progress line
        or a browser shows.

        ``round_only`` counts the current round alone, cheap enough to send with every pair
        of a 1,024-node sweep; the whole-sweep count is for round changes and the end.
        """
        if self.kind in vocabulary.GPU_SWEEP_KINDS:  # its one round is every node's gpu check
            qs = GpuCheck.objects.filter(sweep=self)
        else:
            qs = self.pairs.filter(round=self.current_round) if round_only else self.pairs.all()
        # The confirmation pass's probes are counted apart: its rows are deleted as it ends, and counted
        # with the sweep's pairs they made progress read 15/21, then 15/15.
        gpu = self.kind in vocabulary.GPU_SWEEP_KINDS  # no confirmation pass: a node's own check
        again_from = self.params.get("confirm_first") if not (round_only or gpu) else None
        again: dict[str, int] = {}
        if again_from is not None:
            again = dict(
                qs.filter(round__gte=again_from)
                .values("status")
                .annotate(n=models.Count("id"))
                .values_list("status", "n")
            )
            qs = qs.filter(round__lt=again_from)
        if not round_only and not gpu and self.status == "running" and len(self.nodes) >= SETTLED_COUNT_NODES:
            counts = self._running_counts(qs, again_from)
        else:
            counts = _by_status(qs)
        if self.collapsed_ok and not round_only:  # rows deleted by retention; their matrix cells remain
            counts["ok"] = counts.get("ok", 0) + self.collapsed_ok
        total = sum(counts.values())
        done = total - counts.get("pending", 0) - counts.get("running", 0)
        bad = sum(counts.get(s, 0) for s in vocabulary.BAD_STATUSES)
        out = {
            "round": self.current_round,
            "rounds": self.total_rounds,
            "pairs_total": total,
            "pairs_done": done,
            "failures": bad,
            "counts": counts,
            "scope": "round" if round_only else "sweep",
            "unit": "checks" if self.kind in vocabulary.GPU_SWEEP_KINDS else "pairs",  # what pairs_* count
            "phase": self.phase,
        }
        if again:
            again_total = sum(again.values())
            out["again_total"] = again_total
            out["again_done"] = again_total - again.get("pending", 0) - again.get("running", 0)
        return out

    def _running_counts(self, qs, limit: int | None) -> dict[str, int]:
        """``_by_status(qs)`` of a running sweep's pair rows (``qs``: those before round ``limit``, when set),
        reading the current round's rows only.

        Rounds are a barrier: a running sweep's rounds before the current one are final, and a pair
        closes once, so their counts are kept by this process and added to as the sweep advances; the
        rounds after the current one are all pending (a round's rows are first written by its
        dispatch), so they are the rows not counted otherwise. Rows are only ever added to a running
        sweep past its last round, with ``total_rounds`` (bisect phases, the confirmation pass), so the
        number of rows is kept per ``total_rounds``. A 1,024-node sweep's whole count read 523,776 rows
        (50-90 ms of PostgreSQL, every 2 s of its broadcasts: 7 % of the ingest consumer's time).
        """
        current = self.current_round
        settle_to = current if limit is None else min(current, limit)
        through, settled = _settled.get((self.pk, limit), (1, {}))
        if through > settle_to:  # not this sweep's state as this process saw it: count afresh
            through, settled = 1, {}
        if settle_to > through:
            settled = _added(settled, _by_status(qs.filter(round__gte=through, round__lt=settle_to)))
            if len(_settled) >= _SETTLED_MAX:
                _settled.clear()
            _settled[(self.pk, limit)] = (settle_to, settled)
        rows_key = (self.pk, limit, self.total_rounds)
        rows = _rows.get(rows_key)
        if rows is None:
            if len(_rows) >= _SETTLED_MAX:
                _rows.clear()
            rows = _rows[rows_key] = qs.count()
        now = _by_status(qs.filter(round=current)) if limit is None or current < limit else {}
        counts = _added(settled, now)
        later = rows - sum(counts.values())
        if later < 0:  # rows gone since they were counted (never while it runs): the plain count
            _rows.pop(rows_key, None)
            return _by_status(qs)
        if later:
            counts["pending"] = counts.get("pending", 0) + later
        return counts


# A running sweep this large has its whole count read from its current round (Sweep._running_counts); below
# it the plain count is a few milliseconds. Per process: sweep, limit -> (first round not settled, counts of
# the rounds before it); sweep, limit, total_rounds -> its rows.
SETTLED_COUNT_NODES = 128
_SETTLED_MAX = 256
_settled: dict[tuple[int, int | None], tuple[int, dict[str, int]]] = {}
_rows: dict[tuple[int, int | None, int], int] = {}


def _by_status(qs) -> dict[str, int]:
    return dict(qs.values("status").annotate(n=models.Count("id")).values_list("status", "n"))


def _added(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in a.keys() | b.keys()}


class PairProbe(models.Model):
    """One pair of nodes probed in one round of a sweep; both agents' halves merged into one result."""

    # No index of their own for ``sweep`` and ``node_a``: pair_sweep_round_status and pair_history lead with
    # them. Each index is written again by every update that moves a row (a sweep updates each row 3-4 times).
    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="pairs", db_index=False)
    round = models.IntegerField()
    node_a = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+", db_index=False)  # rank 0
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
    evidence = models.JSONField(null=True, blank=True)  # both halves' evidence, merged (core/evidence.py)
    rendezvous = models.CharField(max_length=64, blank=True, default="")
    deadline = models.DateTimeField(null=True, blank=True)
    started = models.DateTimeField(null=True, blank=True)
    # When its commands were published; null while running: committed but not sent (sweeps/outbox.py).
    sent_at = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    duration_s = models.FloatField(null=True, blank=True)
    # The load it was measured under: the busier side's score, 0 to 1 (core/judging.py); null where unmeasured.
    load = models.FloatField(null=True, blank=True)
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
    sent_at = models.DateTimeField(null=True, blank=True)  # as PairProbe.sent_at
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]


class GpuCheck(models.Model):
    """One node's local GPU check in a ``gpu`` sweep (agents/gpu_check.py): its status, and the validated result
    with every GPU's figures (``result["devices"]``)."""

    STAGE_CHOICES = [(s, s) for s in gpu_contract.STAGES]

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="gpu_checks")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    status = models.CharField(max_length=10, choices=PAIR_STATUS_CHOICES, default="pending", db_index=True)
    stage = models.CharField(max_length=8, choices=STAGE_CHOICES, null=True, blank=True)
    reason = models.CharField(max_length=24, choices=REASON_CHOICES, null=True, blank=True)
    hint = models.TextField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)  # gpu_contract.validate_result's output, devices included
    deadline = models.DateTimeField(null=True, blank=True)
    started = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)  # as PairProbe.sent_at
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["sweep_id", "id"]
        constraints = [models.UniqueConstraint(fields=["sweep", "node"], name="gpu_check_one_per_node")]

    def __str__(self) -> str:
        return f"gpu check {self.pk}: {self.node_id} {self.status}"

    @property
    def is_final(self) -> bool:
        return self.status not in OPEN_PAIR_STATUSES


class Finding(models.Model):
    """One sentence of a sweep's verdict, naming its culprit: a node, a link, a setting."""

    SEVERITY_CHOICES = [("info", "info"), ("warn", "warn"), ("fail", "fail")]

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="findings")
    severity = models.CharField(max_length=5, choices=SEVERITY_CHOICES)
    code = models.CharField(max_length=40)
    subject = models.TextField()  # may join many node names (a version mismatch across a fleet)
    text = models.TextField()
    # The pairs that support it ("a-b"), and its evidence chain and next step, for the finding's own page.
    pairs = models.JSONField(default=list, blank=True)
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["id"]

    def as_dict(self) -> dict:
        out = {"severity": self.severity, "code": self.code, "subject": self.subject, "text": self.text}
        if self.pairs:
            out["pairs"] = self.pairs
        return out


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
    """A bearer token for the JSON API and the CLI on other machines; only its hash is stored.

    Issued by ``manage.py token issue`` (the raw value is shown once). A ``read``
    token may only read, whatever its user may do; an ``operate`` token has its
    user's permissions. A token past ``expires`` is refused.
    """

    READ = "read"
    OPERATE = "operate"
    SCOPE_CHOICES = [(READ, "read: GET only"), (OPERATE, "operate: the user's permissions")]

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    token_hash = models.CharField(max_length=64, unique=True)
    scope = models.CharField(max_length=10, choices=SCOPE_CHOICES, default=READ)
    created = models.DateTimeField(default=timezone.now)
    expires = models.DateTimeField(null=True, blank=True, help_text="refused after this; empty: never expires")
    last_used = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API token"  # not "Api token" in the admin

    @staticmethod
    def hash(raw: str) -> str:
        return hashlib.sha256(raw.encode()).hexdigest()

    @classmethod
    def issue(cls, user, name: str, *, scope: str, expires=None) -> tuple[ApiToken, str]:
        """Create a token; the raw value is returned once and never stored."""
        raw = "chk_" + secrets.token_urlsafe(32)
        token = cls.objects.create(user=user, name=name, token_hash=cls.hash(raw), scope=scope, expires=expires)
        return token, raw

    def is_expired(self, now=None) -> bool:
        return self.expires is not None and self.expires <= (now or timezone.now())

    def __str__(self) -> str:
        return f"{self.name} ({self.user}, {self.scope})"


def _key_cipher():
    """The cipher that seals agent secrets at rest, keyed from SECRET_KEY (a database dump alone cannot sign)."""
    import base64

    from cryptography.fernet import Fernet

    derived = hashlib.sha256(b"cluster-health agent keys:" + settings.SECRET_KEY.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(derived))


_OPENED_MAX = 65536  # sealed secrets kept opened by one process: well above a fleet's keys


def _opened(sealed: str) -> bytes:
    """A sealed secret, decrypted once per process (the sealed text names it; a rotated key is a new text)."""
    cached = (settings.SECRET_KEY, sealed)  # what opens it is part of the name
    secret = _opened_secrets.get(cached)
    if secret is None:
        if len(_opened_secrets) >= _OPENED_MAX:
            _opened_secrets.clear()
        secret = _opened_secrets[cached] = _key_cipher().decrypt(sealed.encode())
    return secret


_opened_secrets: dict[tuple[str, str], bytes] = {}


class AgentKey(models.Model):
    """A node's signing key: the agent holds the secret in its key file, the server keeps it sealed.

    HMAC needs the same secret on both sides, so it is stored encrypted rather than
    hashed. A node has at most one key in use: enrolling again (rotate) revokes the
    old one at once, and every message is checked against this table, uncached.
    """

    node_name = models.CharField(max_length=63, db_index=True)
    key_id = models.CharField(max_length=16, unique=True)
    secret_sealed = models.TextField()
    created = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["node_name", "-created"]

    def __str__(self) -> str:
        return f"{self.node_name} {self.key_id}" + (" (revoked)" if self.revoked_at else "")

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    @classmethod
    def enroll(cls, node: str, rotate: bool = False):
        """A new key for a node; returns (row, signing.NodeKey). Refuses a second key unless rotating."""
        from agents import signing

        active = cls.objects.filter(node_name=node, revoked_at__isnull=True)
        if active.exists() and not rotate:
            raise ValueError(f"{node} already has a key; rotate it to replace it")
        key = signing.new_key(node)
        active.update(revoked_at=timezone.now())
        row = cls.sealed(key)
        row.save()
        return row, key

    @classmethod
    def sealed(cls, key) -> AgentKey:
        """An unsaved row for a signing.NodeKey made elsewhere (test harnesses that hold the key)."""
        return cls(
            node_name=key.node, key_id=key.key_id, secret_sealed=_key_cipher().encrypt(key.secret.encode()).decode()
        )

    def secret(self) -> bytes:
        return _opened(self.secret_sealed)

    @classmethod
    def secret_for(cls, node: str, key_id: str) -> bytes | None:
        """The secret of a node's unrevoked key with this id; None for any other key."""
        return cls.secrets_for({(node, key_id)}).get((node, key_id))

    @classmethod
    def secrets_for(cls, wanted) -> dict[tuple[str, str], bytes]:
        """(node, key id) -> secret, in one query, for those of ``wanted`` that are a node's unrevoked key.

        For a batch of messages: the rows are read every time (a revoke takes effect at the next
        batch), and a sealed secret already opened by this process is not decrypted again.
        """
        wanted = set(wanted)
        rows = cls.objects.filter(node_name__in={node for node, _ in wanted}, revoked_at__isnull=True)
        found = {}
        for node, kid, sealed in rows.values_list("node_name", "key_id", "secret_sealed"):
            if (node, kid) in wanted:
                found[(node, kid)] = _opened(sealed)
        return found

    @classmethod
    def active_keys(cls, nodes) -> dict:
        """node name -> signing.NodeKey of its key in use, for the nodes that have one."""
        from agents import signing

        rows = cls.objects.filter(node_name__in=list(nodes), revoked_at__isnull=True).order_by("created")
        return {
            node: signing.NodeKey(node, kid, _opened(sealed).decode())
            for node, kid, sealed in rows.values_list("node_name", "key_id", "secret_sealed")
        }

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            AgentKey.objects.filter(pk=self.pk, revoked_at__isnull=True).update(revoked_at=self.revoked_at)


class SweepMatrix(models.Model):
    """A closed sweep's matrix payload (cluster_health.core.matrix), stored as JSON text once it no longer changes;
    or a large open sweep's snapshot (``open_round`` set: shapes/matrices.py).

    Reading 523,776 pair rows to build a 1,024-node matrix takes seconds; reading
    this row takes milliseconds, and pages and the API send the text as it is.
    """

    sweep = models.OneToOneField(Sweep, on_delete=models.CASCADE, primary_key=True, related_name="stored_matrix")
    payload = models.TextField()
    # The group matrix (cluster_health.core.groupmatrix) as JSON text, grouped as the sweep was
    # when it was stored; "" until first read.
    groups = models.TextField(blank=True, default="")
    built = models.DateTimeField(default=timezone.now)
    # None: the closed sweep's matrix. Otherwise an open sweep's snapshot, built while this round
    # was current (every earlier round final in it), when the sweep had ``open_total`` rounds.
    open_round = models.IntegerField(null=True, blank=True, default=None)
    open_total = models.IntegerField(null=True, blank=True, default=None)


class HangDiagnosis(models.Model):
    """One diagnosis of a running job (docs/HANGS.md): which job, where its agents looked, and the answer.

    Kept as a row, so yesterday's hang can be read tomorrow; ``result`` is the JSON that
    ``manage.py hang --json`` prints.
    """

    STATUS_CHOICES = [("collecting", "collecting"), ("probing", "probing"), ("finished", "finished")]
    master = models.CharField(max_length=270, blank=True, default="")  # MASTER_ADDR:MASTER_PORT
    slurm_job = models.CharField(max_length=64, blank=True, default="")
    nodes = models.JSONField(default=list, blank=True)  # where the agents were asked to look
    # Each node's inspect: {"sent": epoch seconds}, or {"busy": sweep id} while held back for a running sweep.
    inspects = models.JSONField(default=dict, blank=True)
    interval_s = models.FloatField(default=2.0)
    status = models.CharField(max_length=12, choices=STATUS_CHOICES, default="collecting")
    verdict = models.CharField(max_length=16, blank=True, default="")
    hung = models.BooleanField(null=True, blank=True)
    result = models.JSONField(default=dict, blank=True)
    sweep = models.ForeignKey("Sweep", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    source = models.CharField(max_length=16, default="command")
    requested_by = models.CharField(max_length=150, blank=True, default="")
    created = models.DateTimeField(default=timezone.now, db_index=True)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"hang #{self.pk} ({self.master or 'slurm job ' + self.slurm_job})"


class HangReport(models.Model):
    """What one node's agent saw of the job: its ranks there, or why it could not look."""

    diagnosis = models.ForeignKey(HangDiagnosis, on_delete=models.CASCADE, related_name="reports")
    node = models.CharField(max_length=63)
    ranks = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True, default="")
    received = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["diagnosis", "node"], name="hang_report_one_per_node")]


class AuditEntry(models.Model):
    """One operator action (who, when, what, why): maintenance, returns to service, acknowledgements,
    retiring and activating nodes, starting and cancelling sweeps. Written with the change it records."""

    ACTION_CHOICES = [
        (a, a)
        for a in (
            "maintenance",
            "return_requested",
            "returned",
            "return_failed",
            "acknowledge",
            "unacknowledge",
            "retire",
            "activate",
            "sweep_start",
            "sweep_cancel",
        )
    ]
    SOURCE_CHOICES = [(s, s) for s in ("page", "api", "command", "server")]

    created = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.CharField(max_length=150, blank=True, default="")  # a user name; "" for the server itself
    source = models.CharField(max_length=8, choices=SOURCE_CHOICES, default="command")
    action = models.CharField(max_length=20, choices=ACTION_CHOICES)
    subject = models.CharField(max_length=300)  # a node, a link, a finding's subject, "sweep #N"
    text = models.TextField(blank=True, default="")  # the reason or note given, or what the server decided
    sweep = models.ForeignKey(Sweep, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["-created", "-id"]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.created:%Y-%m-%d %H:%M} {self.actor or 'server'} {self.action} {self.subject}"

    @classmethod
    def record(cls, action: str, subject: str, *, actor: str, source: str, text: str = "", sweep=None) -> AuditEntry:
        return cls.objects.create(
            action=action, subject=subject[:300], actor=actor[:150], source=source, text=text, sweep=sweep
        )


class Acknowledgement(models.Model):
    """An operator's word that a finding is known: its alert is not sent again while the finding stays the same.

    Keyed by the finding's subject and code; a later sweep whose finding for them has another
    severity or text ends it (``ended``), as does the operator taking it back.
    """

    finding = models.ForeignKey(Finding, null=True, on_delete=models.SET_NULL, related_name="acknowledgements")
    subject = models.TextField()
    code = models.CharField(max_length=40, db_index=True)
    severity = models.CharField(max_length=5)
    text = models.TextField()
    note = models.TextField()
    by = models.CharField(max_length=150)
    created = models.DateTimeField(default=timezone.now)
    ended = models.DateTimeField(null=True, blank=True, db_index=True)
    ended_by = models.ForeignKey(Sweep, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    ended_why = models.CharField(max_length=300, blank=True, default="")

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.code} {self.subject[:60]} ({'ended' if self.ended else 'acknowledged'} by {self.by})"

    @classmethod
    def active_keys(cls, keys) -> set[tuple[str, str]]:
        """The (subject, code) pairs of ``keys`` acknowledged now."""
        keys = set(keys)
        if not keys:
            return set()
        rows = cls.objects.filter(ended__isnull=True, code__in={c for _, c in keys})
        return {(s, c) for s, c in rows.values_list("subject", "code")} & keys


class PairCoverage(models.Model):
    """When each pair was last measured (any final outcome but offline or skipped), and by which sweep."""

    node_a = models.CharField(max_length=63)  # pair_key order
    node_b = models.CharField(max_length=63)
    last_measured = models.DateTimeField(db_index=True)
    sweep = models.ForeignKey(
        Sweep, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_constraint=False
    )
    status = models.CharField(max_length=10, choices=PAIR_STATUS_CHOICES)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node_a", "node_b"], name="pair_coverage_unique")]

"""Rows for actions: alert channels, alerts (one per open problem), deliveries, Slurm drains, and the
outbox of a finished sweep's action tasks."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


def sweep_reference(blank: bool = True) -> models.ForeignKey:
    """A row's link to the sweep that opened, resolved or drained it; kept, as NULL, when that sweep is deleted."""
    return models.ForeignKey(
        "cluster_health.Sweep", null=True, blank=blank, on_delete=models.SET_NULL, related_name="+"
    )


class AlertChannel(models.Model):
    """Where alerts go: a JSON webhook, a Slack-compatible webhook or an e-mail address list."""

    KIND_CHOICES = [("webhook", "JSON webhook"), ("slack", "Slack-compatible webhook"), ("email", "E-mail")]
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=8, choices=KIND_CHOICES, default="webhook")
    # A URL for webhooks (may embed a token: never logged), comma-separated addresses for e-mail.
    target = models.CharField(max_length=1000)
    enabled = models.BooleanField(default=True)
    from_env = models.BooleanField(default=False, help_text="created from CLUSTER_HEALTH_ALERT_WEBHOOKS")
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["kind", "target"], name="alert_channel_unique_target")]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class Alert(models.Model):
    """One problem (a node, a link, a sweep kind's verdict, an offline agent) from its opening to its end.

    ``key`` names the problem; at most one open alert per key, so a problem that stays
    across sweeps alerts once, and one that clears sends one resolving message.
    """

    KIND_CHOICES = [("node", "node"), ("link", "link"), ("verdict", "verdict"), ("offline", "offline"), ("gpu", "gpu")]
    STATUS_CHOICES = [("open", "open"), ("resolved", "resolved")]
    key = models.CharField(max_length=300, db_index=True)
    kind = models.CharField(max_length=8, choices=KIND_CHOICES)
    subject = models.CharField(max_length=200)
    severity = models.CharField(max_length=5, default="fail")
    reason = models.CharField(max_length=40, blank=True, default="")
    text = models.TextField(blank=True, default="")
    url = models.CharField(max_length=500, blank=True, default="")
    status = models.CharField(max_length=8, choices=STATUS_CHOICES, default="open", db_index=True)
    opened_by = sweep_reference()
    resolved_by = sweep_reference()
    data = models.JSONField(default=dict, blank=True)  # what resolving needs (the verdict before, for one)
    opened = models.DateTimeField(default=timezone.now)
    resolved = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["key"], condition=models.Q(status="open"), name="alert_one_open_per_key")
        ]
        ordering = ["-opened"]

    def __str__(self) -> str:
        return f"{self.key} ({self.status})"


class AlertDelivery(models.Model):
    """One message (an alert opening or resolving) to one channel, with its attempts: the delivery log."""

    EVENT_CHOICES = [("open", "open"), ("resolve", "resolve")]
    STATUS_CHOICES = [
        ("pending", "pending"),
        ("sent", "sent"),
        ("failed", "failed"),
        ("rate_limited", "rate limited"),
        ("disabled", "channel disabled"),
    ]
    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.ForeignKey(AlertChannel, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=8, choices=EVENT_CHOICES)
    status = models.CharField(max_length=12, choices=STATUS_CHOICES, default="pending", db_index=True)
    attempts = models.IntegerField(default=0)
    last_error = models.TextField(blank=True, default="")
    created = models.DateTimeField(default=timezone.now, db_index=True)
    sent = models.DateTimeField(null=True, blank=True, db_index=True)
    # A deliver task holds the row until then (a second task for it does nothing meanwhile); after a
    # failed attempt, until its retry is due. Past it, a pending row whose task was lost is queued again.
    claimed_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]
        verbose_name_plural = "alert deliveries"


class SlurmDrain(models.Model):
    """A Slurm node that cluster-health drained: only these are ever resumed by it."""

    STATUS_CHOICES = [
        ("drained", "drained"),
        ("resumed", "resumed"),
        ("released", "released: changed outside cluster-health, left alone"),
    ]
    node = models.CharField(max_length=63, db_index=True)  # cluster-health's name
    slurm_node = models.CharField(max_length=200)
    sweep = sweep_reference(blank=False)
    reason = models.CharField(max_length=300)
    status = models.CharField(max_length=8, choices=STATUS_CHOICES, default="drained", db_index=True)
    resumed_by = sweep_reference()
    drained = models.DateTimeField(default=timezone.now)
    ended = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["slurm_node"], condition=models.Q(status="drained"), name="slurm_drain_one_per_node"
            )
        ]
        ordering = ["-drained"]


class ActionOutbox(models.Model):
    """One action task of a finished sweep (its alerts, its Slurm drains), written with the verdict.

    The task is sent after the commit; a worker killed in between, or a broker error, leaves
    the row unsent and the reaper sends it again. The task marks it done when it has acted;
    both tasks are idempotent, so a second copy changes nothing.
    """

    sweep = models.ForeignKey("cluster_health.Sweep", on_delete=models.CASCADE, related_name="+")
    task = models.CharField(max_length=64)
    created = models.DateTimeField(default=timezone.now)
    sent = models.DateTimeField(null=True, blank=True)
    done = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["sweep", "task"], name="action_outbox_one_per_task")]

    def __str__(self) -> str:
        return f"{self.task} for sweep {self.sweep_id}"

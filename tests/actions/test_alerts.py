"""Alerts: one per new problem, one resolving message when it clears, delivered to real receivers."""

from datetime import timedelta

import pytest
from aiosmtpd.controller import Controller
from django.utils import timezone

from cluster_health.actions import alerts, bootstrap, notify
from cluster_health.actions.models import Alert, AlertChannel, AlertDelivery
from cluster_health.actions.tasks import deliver
from cluster_health.models import Node
from devtools.services import free_port
from tests.support.action_fixtures import WebhookReceiver
from tests.support.action_rows import finished_sweep

pytestmark = pytest.mark.django_db

NODES = ["n0", "n1", "n2"]
N2_OFFLINE = ("fail", "node_offline", "n2", "n2 went offline: its agent stopped sending heartbeats")
BAD_N2 = {("n0", "n2"): "offline", ("n1", "n2"): "offline"}
# A dead link the confirmation pass probed again and found dead again: (bad, findings, outcomes).
DEAD_LINK_SEEN_TWICE = (
    {("n0", "n1"): "timeout"},
    [("fail", "link_failed", "n0<->n1", "n0<->n1 timeout at connect (connect_timeout)", ["n0<->n1"])],
    {("n0", "n1"): "confirmed"},
)


@pytest.fixture
def base_url(settings):
    settings.BASE_URL = "https://health.example.org"
    return settings.BASE_URL


def keys(delivery_ids):
    return [(d.alert.key, d.event) for d in AlertDelivery.objects.filter(pk__in=delivery_ids)]


def test_it_opens_one_alert_per_new_problem_and_resolves_it_when_a_sweep_clears_it(base_url):
    AlertChannel.objects.create(name="ops", kind="webhook", target="http://127.0.0.1:9/x")
    first = finished_sweep(NODES, BAD_N2, [N2_OFFLINE])
    assert keys(alerts.evaluate_sweep(first)) == [("node:n2", "open")]
    again = finished_sweep(NODES, BAD_N2, [N2_OFFLINE])
    assert alerts.evaluate_sweep(again) == []  # the same problem: no second alert
    fine = finished_sweep(NODES)
    assert keys(alerts.evaluate_sweep(fine)) == [("node:n2", "resolve")]
    alert = Alert.objects.get()
    assert (alert.status, alert.opened_by_id, alert.resolved_by_id) == ("resolved", first.pk, fine.pk)
    assert alert.url == "https://health.example.org/nodes/n2/"


def test_it_resolves_a_node_only_by_a_sweep_that_covered_it():
    AlertChannel.objects.create(name="ops", kind="webhook", target="http://127.0.0.1:9/x")
    alerts.evaluate_sweep(finished_sweep(NODES, BAD_N2, [N2_OFFLINE]))
    assert alerts.evaluate_sweep(finished_sweep(["n0", "n1"])) == []
    assert Alert.objects.get().status == "open"


def test_it_alerts_a_failed_link_and_a_worse_verdict_once():
    AlertChannel.objects.create(name="ops", kind="webhook", target="http://127.0.0.1:9/x")
    alerts.evaluate_sweep(finished_sweep(NODES, kind="full"))
    link = ("fail", "link_failed", "n1<->n0", "n1<->n0 failed at init (transport)")
    ids = alerts.evaluate_sweep(finished_sweep(NODES, {("n0", "n1"): "failed"}, [link], kind="full"))
    assert sorted(keys(ids)) == [("link:n0<->n1", "open"), ("verdict:full", "open")]
    verdict = Alert.objects.get(key="verdict:full")
    assert verdict.reason == "verdict_pass_to_fail" and verdict.data["previous_verdict"] == "pass"
    assert sorted(keys(alerts.evaluate_sweep(finished_sweep(NODES, kind="full")))) == [
        ("link:n0<->n1", "resolve"),
        ("verdict:full", "resolve"),
    ]


def test_it_ignores_a_late_evaluation_of_an_older_sweep():
    AlertChannel.objects.create(name="ops", kind="webhook", target="http://127.0.0.1:9/x")
    old = finished_sweep(NODES, BAD_N2, [N2_OFFLINE])
    newer = finished_sweep(NODES)
    alerts.evaluate_sweep(newer)
    assert alerts.evaluate_sweep(old) == []  # its task ran after the newer sweep's: nothing reopens


def test_it_alerts_an_agent_offline_past_the_threshold_and_resolves_when_it_returns(settings):
    settings.ALERT_OFFLINE_AFTER_S = 600
    AlertChannel.objects.create(name="ops", kind="slack", target="http://127.0.0.1:9/x")
    now = timezone.now()
    Node.objects.create(name="n5", address="127.0.0.1", last_heartbeat=now - timedelta(minutes=5))
    assert alerts.evaluate_offline(now) == []
    Node.objects.filter(name="n5").update(last_heartbeat=now - timedelta(minutes=20))
    assert keys(alerts.evaluate_offline(now)) == [("offline:n5", "open")]
    assert alerts.evaluate_offline(now) == []
    Node.objects.filter(name="n5").update(last_heartbeat=now)
    assert keys(alerts.evaluate_offline(now)) == [("offline:n5", "resolve")]


def test_it_bootstraps_channels_from_the_environment_once(settings):
    settings.ALERT_WEBHOOKS = [
        "https://hooks.example.org/a/SECRET",
        "slack+https://hooks.slack.com/services/T/B/X",
        "mailto:ops@example.org,oncall@example.org",
    ]
    bootstrap.ensure_env_channels()
    AlertChannel.objects.filter(kind="slack").update(enabled=False)
    bootstrap.ensure_env_channels()
    rows = {c.kind: c for c in AlertChannel.objects.all()}
    assert set(rows) == {"webhook", "slack", "email"} and AlertChannel.objects.count() == 3
    assert not rows["slack"].enabled  # the admin's choice stays
    assert "SECRET" not in rows["webhook"].name
    assert rows["email"].target == "ops@example.org,oncall@example.org"


def test_it_posts_json_and_slack_bodies_to_a_real_receiver_and_retries_a_failing_one(base_url):
    with WebhookReceiver(fail_first=2) as hook, WebhookReceiver() as slack:
        AlertChannel.objects.create(name="json", kind="webhook", target=hook.url)
        AlertChannel.objects.create(name="slack", kind="slack", target=slack.url)
        ids = alerts.evaluate_sweep(finished_sweep(NODES, BAD_N2, [N2_OFFLINE]))
        for pk in ids:
            deliver.apply(args=(pk,))  # eager: the two retries run at once instead of after the backoff
        body = hook.wait_for(lambda b: b["event"] == "open", 5)
        assert (body["subject"], body["reason"], body["key"]) == ("n2", "node_offline", "node:n2")
        assert body["url"] == "https://health.example.org/nodes/n2/"
        assert body["sweep_url"].startswith("https://health.example.org/sweeps/")
        text = slack.wait_for(lambda b: True, 5)["text"]
        assert "n2" in text and "node_offline" in text and "<https://health.example.org/nodes/n2/|n2>" in text
    log = {d.channel.name: d for d in AlertDelivery.objects.select_related("channel")}
    assert (log["json"].status, log["json"].attempts) == ("sent", 3)
    assert (log["slack"].status, log["slack"].attempts) == ("sent", 1)


def test_it_gives_up_after_the_retries_and_logs_the_failure(settings):
    settings.ALERT_TIMEOUT_S = 1
    with WebhookReceiver(fail_first=100) as hook:
        AlertChannel.objects.create(name="json", kind="webhook", target=hook.url)
        (pk,) = alerts.evaluate_sweep(finished_sweep(NODES, BAD_N2, [N2_OFFLINE]))
        deliver.apply(args=(pk,))
    delivery = AlertDelivery.objects.get(pk=pk)
    assert delivery.status == "failed" and delivery.attempts == deliver.max_retries + 1
    assert "HTTP 500" in delivery.last_error and hook.url not in delivery.last_error


def test_it_rate_limits_a_channel(settings):
    settings.ALERT_RATE_PER_HOUR = 2
    with WebhookReceiver() as hook:
        AlertChannel.objects.create(name="json", kind="webhook", target=hook.url)
        links = [("fail", "link_failed", f"n{i}<->n{i + 1}", "failed") for i in range(4)]
        ids = alerts.evaluate_sweep(finished_sweep([f"n{i}" for i in range(5)], findings=links))
        for pk in ids:
            deliver.apply(args=(pk,))
        assert len(hook.bodies) == 2
    statuses = sorted(AlertDelivery.objects.values_list("status", flat=True))
    assert statuses == ["rate_limited", "rate_limited", "sent", "sent"]
    assert deliver.apply(args=(ids[0],)).result in ("sent", "rate_limited")  # a redelivery sends nothing new
    assert len(hook.bodies) == 2


class Mailbox:
    def __init__(self):
        self.messages = []

    async def handle_DATA(self, server, session, envelope):
        self.messages.append((envelope.rcpt_tos, envelope.content.decode()))
        return "250 OK"


def test_it_mails_an_alert_through_a_real_smtp_server(settings, base_url):
    mailbox = Mailbox()
    port = free_port()
    controller = Controller(mailbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
        AlertChannel.objects.create(name="mail", kind="email", target="ops@example.org")
        bad, found, outcomes = DEAD_LINK_SEEN_TWICE
        (pk,) = alerts.evaluate_sweep(finished_sweep(NODES, bad, found, outcomes=outcomes))
        assert deliver.apply(args=(pk,)).result == "sent"
    finally:
        controller.stop()
    ((rcpt, content),) = mailbox.messages
    assert rcpt == ["ops@example.org"]
    assert "Subject: [cluster-health] FAIL n0<->n1: link_failed" in content
    assert "https://health.example.org/pairs/n0/n1/" in content


def test_a_fail_finding_pages_at_fail_only_when_the_confirmation_pass_saw_it_again():
    AlertChannel.objects.create(name="ops", kind="webhook", target="http://127.0.0.1:9/x")
    bad, found, outcomes = DEAD_LINK_SEEN_TWICE
    # Seen once (the pass did not look again): a warning that says so.
    alerts.evaluate_sweep(finished_sweep(NODES, bad, found))
    once = Alert.objects.get(key="link:n0<->n1")
    assert once.severity == "warn" and once.text.endswith(f"({alerts.UNCONFIRMED})"), once.text
    # The verdict alert of a fail no second look confirmed is a warning too.
    alerts.evaluate_sweep(finished_sweep(NODES))
    alerts.evaluate_sweep(finished_sweep(NODES, bad, found, kind="connectivity"))
    assert Alert.objects.get(key="verdict:connectivity", status="open").severity == "warn"
    alerts.evaluate_sweep(finished_sweep(NODES))
    # Seen again: fail. A node the server did not hear from is never confirmed: a warning.
    alerts.evaluate_sweep(finished_sweep(NODES, bad, found, outcomes=outcomes))
    assert Alert.objects.get(key="link:n0<->n1", status="open").severity == "fail"
    assert Alert.objects.get(key="verdict:connectivity", status="open").severity == "fail"
    alerts.evaluate_sweep(finished_sweep(NODES, BAD_N2, [N2_OFFLINE]))
    assert Alert.objects.get(key="node:n2").severity == "warn"


def test_it_raises_a_delivery_error_for_an_unreachable_webhook(settings):
    settings.ALERT_TIMEOUT_S = 1
    with pytest.raises(notify.DeliveryError, match="unreachable"):
        notify.send("webhook", f"http://127.0.0.1:{free_port()}/x", {"title": "t", "text": "t"})


def test_actions_lost_after_the_commit_are_sent_again_and_deliver_once(monkeypatch, django_capture_on_commit_callbacks):
    """A server worker killed right after the commit that finished a sweep (or a broker error then) lost
    its alert task for good: the outbox row written with the verdict makes the reaper send it again."""
    from django.db import transaction

    from cluster_health import vocabulary
    from cluster_health.actions import tasks
    from cluster_health.actions.models import ActionOutbox
    from cluster_health.queues import dispatch

    sent: list[tuple[str, dict]] = []
    monkeypatch.setattr(dispatch, "send_to_server", lambda task, **kwargs: sent.append((task, kwargs)))
    later = timezone.now() + timedelta(seconds=tasks.UNSENT_GRACE_S + 1)
    with WebhookReceiver() as hook:
        AlertChannel.objects.create(name="json", kind="webhook", target=hook.url)
        sweep = finished_sweep(NODES, BAD_N2, [N2_OFFLINE])
        with django_capture_on_commit_callbacks(execute=False), transaction.atomic():
            tasks.sweep_finished(sweep.pk)  # committed; the process dies before its after-commit sends
        assert sent == [] and tasks.resend_lost(timezone.now()) == 0  # not before the grace
        assert tasks.resend_lost(later) == 1
        assert sent == [(vocabulary.TASK_AFTER_SWEEP, {"sweep_id": sweep.pk})]
        for _ in range(2):  # the lost task and a late copy of it: one alert, one delivery
            with django_capture_on_commit_callbacks(execute=True):
                tasks.after_sweep(sweep.pk)
        assert ActionOutbox.objects.get(sweep=sweep).done is not None
        (delivery,) = AlertDelivery.objects.all()
        # The delivery task was lost too: the reaper sends it again, and two copies send once.
        sent.clear()
        assert tasks.resend_lost(later) == 1 and sent == [(vocabulary.TASK_DELIVER, {"delivery_id": delivery.pk})]
        tasks.deliver.apply(args=(delivery.pk,))
        tasks.deliver.apply(args=(delivery.pk,))
        hook.wait_for(lambda b: b["event"] == "open", 5)
        assert tasks.resend_lost(later + timedelta(hours=1)) == 0
    assert len(hook.bodies) == 1
    assert AlertDelivery.objects.get().status == "sent"

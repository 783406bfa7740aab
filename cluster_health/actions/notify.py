"""Network I/O for alerts, in one place: a JSON webhook, a Slack-compatible webhook, e-mail.

A failed delivery raises DeliveryError (the task retries it with backoff). Error
texts never carry the channel's target: webhook URLs often embed a token.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from django.conf import settings
from django.core.mail import send_mail

MAX_ERROR_BODY = 300  # characters of a failing receiver's answer kept in the delivery log


class DeliveryError(Exception):
    """A message did not reach its channel; worth retrying."""


def send(kind: str, target: str, message: dict) -> str:
    """Deliver one alert message to one channel; return a short description of the answer."""
    if kind == "webhook":
        return _post_json(target, message)
    if kind == "slack":
        return _post_json(target, {"text": slack_text(message)})
    if kind == "email":
        return _email(target, message)
    raise DeliveryError(f"unknown channel kind {kind!r}")


def slack_text(message: dict) -> str:
    """One Slack message: the title, the explanation, and links in Slack's <url|label> form."""
    lines = [f"*{message['title']}*", message["text"]]
    if message.get("url"):
        lines.append(
            f"<{message['url']}|{message['subject']}> · <{message['sweep_url']}|sweep #{message['sweep']}>"
            if message.get("sweep_url")
            else f"<{message['url']}|{message['subject']}>"
        )
    return "\n".join(lines)


def _post_json(url: str, body: dict) -> str:
    if not url.startswith(("http://", "https://")):
        raise DeliveryError("webhook target is not an http(s) URL")
    data = json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data, method="POST", headers={"Content-Type": "application/json", "User-Agent": "cluster-health"}
    )
    try:
        with urllib.request.urlopen(req, timeout=settings.ALERT_TIMEOUT_S) as resp:
            return f"HTTP {resp.status}"
    except urllib.error.HTTPError as exc:
        detail = exc.read(MAX_ERROR_BODY).decode(errors="replace")
        raise DeliveryError(f"HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise DeliveryError(f"webhook unreachable: {reason}") from None


def _email(target: str, message: dict) -> str:
    recipients = [a.strip() for a in target.removeprefix("mailto:").split(",") if a.strip()]
    if not recipients:
        raise DeliveryError("e-mail channel has no recipients")
    body = message["text"]
    if message.get("url"):
        body += f"\n\n{message['url']}"
    if message.get("sweep_url"):
        body += f"\nsweep #{message['sweep']}: {message['sweep_url']}"
    try:
        send_mail(message["title"], body, settings.DEFAULT_FROM_EMAIL, recipients, fail_silently=False)
    except OSError as exc:  # smtplib's errors are OSErrors
        raise DeliveryError(f"SMTP: {exc}") from None
    return f"mailed {len(recipients)} recipient(s)"

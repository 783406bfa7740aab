"""The shape of a finding, shared by every rule that produces one. Pure."""

from __future__ import annotations


def finding(severity: str, code: str, subject: str, text: str) -> dict[str, str]:
    """A finding row: severity (fail, warn, info), a code, the node/link/cluster it names, and the text."""
    return {"severity": severity, "code": code, "subject": subject, "text": text}

"""An operator's day in a real browser, against the real ASGI server, Celery worker and three local agents.

From the pages: a node put in maintenance with a reason, a finding acknowledged with a note, the node
returned to service (its verification sweep runs on the real agents and passes it), the coverage
panel's shares after that sweep, and the audit page listing who did what and why. Every assertion
reads what the operator reads. Screenshots are kept under test-artifacts/.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from cluster_health.models import Node
from devtools.services import wait_until
from tests.support.action_rows import finished_sweep
from tests.support.artifacts import shot
from tests.support.dashboard_rows import PASSWORD, make_user

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

AGENTS = ("op1", "op2", "op3")
REASON = "NIC swap, ticket 4411"
NOTE = "cable ordered, ticket 4412"
VERIFY_S = 120  # the verification sweep: two pairs with bandwidth, and its confirmation pass if one is needed


def operator_user(name: str) -> None:
    """Made in a thread of its own: saving a user tells its sockets (web/consumers.py) through async_to_sync,
    which cannot run in this thread while Playwright's event loop runs here."""
    from django.db import connection

    def make() -> None:
        try:
            make_user(name, operator=True)
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(make).result(timeout=30)


def text(page, selector: str) -> str:
    return " ".join(page.text_content(selector).split())


def submit(page, form: str, fields: dict, then: str) -> str:
    """Fill a form of the page as a person does, send it, and read the section that shows the result."""
    for name, value in fields.items():
        page.fill(f"{form} input[name={name}]", value)
    page.click(f"{form} button[type=submit]")
    page.wait_for_selector(then)
    return text(page, then)


def test_an_operator_maintains_a_node_acknowledges_a_finding_and_the_audit_page_says_so(stack, chromium):
    operator_user("olivia")
    for name in AGENTS:
        stack.start_agent(name, "127.0.0.1")  # they start while the operator works on the pages
    context = None
    try:
        # Last night's sweep: the op1<->op3 link failed (a finding to acknowledge).
        sweep = finished_sweep(
            list(AGENTS), {("op1", "op3"): "timeout"}, [("fail", "link_failed", "op1<->op3", "op1<->op3 failed")]
        )
        finding = sweep.findings.get()
        base = stack.start_web()
        context = chromium.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        # Logged in from the node's page: the overview (and its coverage panel, cached a minute) not seen yet.
        page.goto(f"{base}/nodes/op2/")
        page.fill("#id_username", "olivia")
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(f"{base}/nodes/op2/")

        # Maintenance, from the node's page.
        panel = submit(page, "[data-maintenance-form]", {"reason": REASON}, "section[data-operator-state=maintenance]")
        assert "Operator state: maintenance" in panel and REASON in panel and "olivia" in panel
        page.goto(f"{base}/nodes/")
        pill = page.locator("tr[data-node=op2] [data-operator-state]")
        assert pill.text_content().strip() == "maintenance" and pill.get_attribute("title") == REASON
        assert page.locator("tr[data-node=op1] [data-operator-state]").count() == 0
        shot(page, "operator-maintenance")

        # An acknowledgement, from the finding's page.
        page.goto(f"{base}/sweeps/{sweep.pk}/findings/{finding.pk}/")
        ack = submit(page, "[data-acknowledge-form]", {"note": NOTE}, "section[data-acknowledgement=active]")
        assert "Acknowledged by olivia" in ack and NOTE in ack and "not sent again until the finding changes" in ack

        # Return to service: a verification sweep with two healthy partners on the real agents.
        wait_until(
            lambda: Node.objects.filter(Node.online_q(), name__in=AGENTS).exclude(agent_version="").count() == 3,
            60,
            message="the three agents heard from",
        )
        page.goto(f"{base}/nodes/op2/")
        page.click("[data-return-form] button[type=submit]")
        page.wait_for_selector("section[data-operator-state=returning], section[data-operator-state=service]")
        verify = Node.objects.get(name="op2").return_sweep_id
        assert verify is not None

        def back_in_service() -> bool:
            page.goto(f"{base}/nodes/op2/")
            return page.locator("section[data-operator-state=service]").count() == 1

        wait_until(back_in_service, VERIFY_S, interval=2.0, message="op2 back in service after its verification")
        assert "Operator state: in service" in text(page, "section[data-operator-state]")
        page.goto(f"{base}/nodes/")
        assert page.locator("tr[data-node=op2] [data-operator-state]").count() == 0
        shot(page, "operator-returned")

        # Coverage: the verification sweep measured op1-op2 and op2-op3 (recorded before the node returned);
        # op1-op3 only failed to connect, in a sweep of last night's that never reached the coverage record.
        page.goto(f"{base}/")
        page.wait_for_selector("[data-coverage]")
        cover = text(page, "[data-coverage]")
        assert "3 pairs of 3 nodes in service" in cover
        assert "67% measured within a day · 67% within 7 days" in cover
        assert "Stalest: op1 ↔ op3 (never)" in cover
        shot(page, "operator-coverage")

        # The audit page: who, what, why, for each of those actions, newest first.
        page.goto(f"{base}/audit/")
        rows = [
            [" ".join(c.split()) for c in row]
            for row in page.eval_on_selector_all(
                "#audit tbody tr", "rows => rows.map(r => [...r.cells].slice(1, 6).map(c => c.textContent))"
            )
        ]
        assert rows == [
            ["server", "server", "returned", "op2", f"sweep #{verify}: 2 pair(s) passed"],
            ["olivia", "page", "return_requested", "op2", f"verification sweep #{verify} with op1, op3"],
            ["olivia", "page", "acknowledge", "op1<->op3", f"link_failed: {NOTE}"],
            ["olivia", "page", "maintenance", "op2", REASON],
        ], rows
        shot(page, "operator-audit")
    finally:
        if context is not None:
            context.close()
        for name in AGENTS:
            stack.stop_agent(name)

"""Operator actions from the pages and the API: maintenance, return to service, acknowledging a finding; the
audit log that records them; the fleet's pair coverage.

Changing anything needs the operator permission (``cluster_health.start_sweep``), as starting a
sweep does; reading the audit log and the coverage needs a login. The work is done by
cluster_health/operator_states.py and cluster_health/coverage.py.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.paginator import Paginator
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from cluster_health import coverage, operator_states
from cluster_health.models import AuditEntry, Finding, Node
from cluster_health.nodes import node_dict
from cluster_health.web.api import START_PERMISSION, api_view, error, json_body
from cluster_health.web.heavy import heavy

AUDIT_PAGE = 100
OPERATOR_ONLY = "maintenance, returns to service and acknowledgements need the operator permission"


@login_required
@permission_required(START_PERMISSION, raise_exception=True)
@require_POST
def node_maintenance(request, name: str):
    """Put a node in maintenance (``action=on``, a reason), or start its return to service (``action=off``)."""
    get_object_or_404(Node, name=name)
    actor = operator_states.actor_of(request.user)
    try:
        if request.POST.get("action") == "off":
            sweep = operator_states.return_to_service(name, actor=actor, source="page", user=request.user)
            messages.info(request, f"{name} returns to service once verification sweep #{sweep.pk} passes it.")
        else:
            operator_states.set_maintenance(name, request.POST.get("reason"), actor=actor, source="page")
            messages.info(request, f"{name} is in maintenance: out of sweeps, alerts and drains.")
    except operator_states.OperatorError as exc:
        messages.error(request, f"{name}: {exc}")
    return redirect(reverse("node", args=[name]))


@login_required
@permission_required(START_PERMISSION, raise_exception=True)
@require_POST
def finding_acknowledge(request, finding_id: int):
    finding = get_object_or_404(Finding, pk=finding_id)
    try:
        operator_states.acknowledge(
            finding, request.POST.get("note"), actor=operator_states.actor_of(request.user), source="page"
        )
        messages.info(request, "Acknowledged: its alert is not sent again until the finding changes.")
    except operator_states.OperatorError as exc:
        messages.error(request, str(exc))
    return redirect(reverse("finding", args=[finding.sweep_id, finding.pk]))


@login_required
def audit_log(request):
    """Every operator action, newest first."""
    page = Paginator(AuditEntry.objects.select_related("sweep"), AUDIT_PAGE).get_page(request.GET.get("page"))
    return render(request, "cluster_health/audit.html", {"page": page})


def audit_dict(entry: AuditEntry) -> dict:
    return {
        "id": entry.pk,
        "created": entry.created.isoformat(),
        "actor": entry.actor or None,
        "source": entry.source,
        "action": entry.action,
        "subject": entry.subject,
        "text": entry.text,
        "sweep": entry.sweep_id,
    }


operator_change = api_view(methods=("POST",), permission=START_PERMISSION, denied=OPERATOR_ONLY)


@operator_change
def api_node_maintenance(request, name):
    """``{"reason": "..."}``: the node goes into maintenance."""
    body = json_body(request)
    if isinstance(body, JsonResponse):
        return body
    try:
        node = operator_states.set_maintenance(
            name, body.get("reason"), actor=operator_states.actor_of(request.user), source="api"
        )
    except Node.DoesNotExist:
        return error(404, f"no node {name}")
    except operator_states.OperatorError as exc:
        return error(400, str(exc))
    return JsonResponse(node_dict(node))


@operator_change
def api_node_return(request, name):
    """Start the node's return to service: 202 with the verification sweep."""
    try:
        sweep = operator_states.return_to_service(
            name, actor=operator_states.actor_of(request.user), source="api", user=request.user
        )
    except Node.DoesNotExist:
        return error(404, f"no node {name}")
    except operator_states.OperatorError as exc:
        return error(409, str(exc))
    node = Node.objects.get(name=name)
    return JsonResponse({"node": node_dict(node), "sweep": sweep.pk}, status=202)


@operator_change
def api_finding_acknowledge(request, pk):
    """``{"note": "..."}``: acknowledge the finding until it changes."""
    finding = Finding.objects.filter(pk=pk).first()
    if finding is None:
        return error(404, f"no finding {pk}")
    body = json_body(request)
    if isinstance(body, JsonResponse):
        return body
    try:
        ack = operator_states.acknowledge(
            finding, body.get("note"), actor=operator_states.actor_of(request.user), source="api"
        )
    except operator_states.OperatorError as exc:
        return error(400, str(exc))
    return JsonResponse(
        {"finding": finding.pk, "subject": ack.subject, "code": ack.code, "note": ack.note, "by": ack.by}
    )


@api_view()
def api_audit(request):
    entries = AuditEntry.objects.all()[:AUDIT_PAGE]
    return JsonResponse({"entries": [audit_dict(e) for e in entries]})


@api_view()
@heavy
def api_coverage(request):
    """Each pair's last measured time, summed up: shares within 1 and 7 days, the stalest, each node's."""
    return JsonResponse(coverage.summary())

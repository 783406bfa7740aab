"""JSON API: nodes, sweeps, a sweep's matrix, a pair's history, CSV export.

Authentication: the login session, or ``Authorization: Bearer <token>`` (ApiToken,
``manage.py token``; an expired one is a 401, a ``read`` one may only GET).
Starting or cancelling a sweep, and retiring or activating a node, needs the
operator permission (``cluster_health.start_sweep``). Every parameter is bounded; errors are JSON with
a message naming the parameter.
"""

from __future__ import annotations

import csv
import json
from functools import wraps

from django.db.models import F
from django.http import HttpResponse, JsonResponse, StreamingHttpResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from cluster_health import hang_diagnoses, sweeps, vocabulary
from cluster_health.models import ApiToken, HangDiagnosis, Node, PairProbe, Sweep
from cluster_health.nodes import node_dict, set_active
from cluster_health.queues import dispatch
from cluster_health.shapes import documents, gpus, matrices, offenders, pairs
from cluster_health.web.heavy import heavy

START_PERMISSION = "cluster_health.start_sweep"
MAX_LIST = 200
PAIRS_PAGE = 1000  # pairs in a sweep's JSON unless ?limit= asks for fewer or more
MAX_PAIRS_PAGE = 5000
MAX_BODY = 1024 * 1024


BEARER = "Bearer"  # Authorization: Bearer <token>


def error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


class TokenRefused(Exception):
    """An Authorization header that names no usable token: answered 401 with this message."""


def _token(request) -> ApiToken | None:
    """The request's bearer token; None without an Authorization header. Raises TokenRefused for a bad one."""
    if "Authorization" not in request.headers:
        return None
    scheme, _, raw = request.headers["Authorization"].partition(" ")
    if scheme != BEARER or not raw.strip():
        raise TokenRefused("invalid or revoked API token")
    token = ApiToken.objects.select_related("user").filter(token_hash=ApiToken.hash(raw.strip())).first()
    if token is None or not token.user.is_active:
        raise TokenRefused("invalid or revoked API token")
    now = timezone.now()
    if token.is_expired(now):
        raise TokenRefused(f"API token {token.name!r} expired at {token.expires:%Y-%m-%d %H:%M %Z}; issue a new one")
    ApiToken.objects.filter(pk=token.pk).update(last_used=now)
    return token


def api_view(methods=("GET",), permission=None, denied="starting or cancelling sweeps needs the operator permission"):
    """Authenticate (token or session, CSRF-checked for session writes), check method and permission."""

    def wrap(view):
        @csrf_exempt
        @wraps(view)
        def inner(request, *args, **kwargs):
            if request.method not in methods:
                return error(405, f"method {request.method} not allowed (use {', '.join(methods)})")
            try:
                token = _token(request)
            except TokenRefused as exc:
                return error(401, str(exc))
            if token is not None and token.scope != ApiToken.OPERATE and request.method not in ("GET", "HEAD"):
                return error(403, f"API token {token.name!r} has scope {token.scope}: it may only read")
            user = token.user if token is not None else None
            if user is None:
                if not request.user.is_authenticated:
                    return error(401, "log in or send Authorization: Bearer <token>")
                user = request.user
                if request.method not in ("GET", "HEAD"):
                    rejected = CsrfViewMiddleware(lambda r: None).process_view(request, None, (), {})
                    if rejected is not None:
                        return error(403, "CSRF check failed (send the csrftoken cookie's value as X-CSRFToken)")
            request.user = user
            if permission and not user.has_perm(permission):
                return error(403, denied)
            return view(request, *args, **kwargs)

        return inner

    return wrap


def _bounded_int(request, name, default, lo, hi):
    raw = request.GET.get(name)
    if raw is None:
        return default
    try:
        val = int(raw)
    except ValueError:
        raise sweeps.SweepRequestError(f"{name}: expected a whole number, got {raw!r}") from None
    if not lo <= val <= hi:
        raise sweeps.SweepRequestError(f"{name}: {val} is outside {lo}..{hi}")
    return val


def bad_requests(view):
    @wraps(view)
    def inner(request, *args, **kwargs):
        try:
            return view(request, *args, **kwargs)
        except sweeps.SweepRequestError as exc:
            return error(400, str(exc))

    return inner


@api_view()
def nodes(request):
    now = timezone.now()
    found = offenders.current(now)
    listed = [
        {**node_dict(n, now), "repeat_offender": offenders.api_field(found.get(n.name))}
        for n in Node.objects.order_by("name")
    ]
    links = [offenders.api_field(f) for subject, f in found.items() if "<->" in subject]
    return JsonResponse({"nodes": listed, "repeat_offender_links": links})


@api_view()
def node_gpus(request, name):
    """A node's GPUs: NVML facts, its latest gpu check's figures and the GPU x GPU matrix (shapes/gpus.py)."""
    node = Node.objects.filter(name=name).first()
    if node is None:
        return error(404, f"no node {name}")
    return JsonResponse(gpus.node_gpus(node))


def _set_node_active(request, name: str, active: bool) -> JsonResponse:
    try:
        (node,) = set_active([name], active, actor=request.user.get_username(), source="api")
    except Node.DoesNotExist:
        return error(404, f"no node {name}")
    return JsonResponse(node_dict(node))


# Retiring and activating nodes: POST, by operators.
fleet_change = api_view(
    methods=("POST",), permission=START_PERMISSION, denied="retiring or activating nodes needs the operator permission"
)


@fleet_change
def node_retire(request, name):
    """Take a node out of the fleet: sweeps leave it out until it is activated."""
    return _set_node_active(request, name, False)


@fleet_change
def node_activate(request, name):
    return _set_node_active(request, name, True)


@api_view(methods=("GET", "POST"))
@bad_requests
def sweep_list(request):
    if request.method == "POST":
        return _create_sweep(request)
    limit = _bounded_int(request, "limit", 50, 1, MAX_LIST)
    offset = _bounded_int(request, "offset", 0, 0, 10**9)
    qs = Sweep.objects.order_by("-created")
    for field, choices in (("status", Sweep.STATUS_CHOICES), ("kind", Sweep.KIND_CHOICES)):
        val = request.GET.get(field)
        if val is not None:
            if val not in dict(choices):
                raise sweeps.SweepRequestError(f"{field}: {val!r} is not one of {', '.join(dict(choices))}")
            qs = qs.filter(**{field: val})
    page = qs[offset : offset + limit]
    return JsonResponse(
        {"sweeps": [documents.sweep_json(s, with_pairs=False) for s in page], "limit": limit, "offset": offset}
    )


def json_body(request) -> dict | JsonResponse:
    """A request's body as a JSON object (empty: {}), or the 400 answer saying why it is not one."""
    if len(request.body) > MAX_BODY:
        return error(400, "body: larger than 1 MiB")
    try:
        body = json.loads(request.body or b"{}")
    except ValueError as exc:
        return error(400, f"body: not valid JSON ({exc})")
    return body if isinstance(body, dict) else error(400, "body: expected a JSON object")


def _create_sweep(request):
    if not request.user.has_perm(START_PERMISSION):
        return error(403, "starting sweeps needs the operator permission")
    body = json_body(request)
    if isinstance(body, JsonResponse):
        return body
    allowed = {
        "kind",
        "backend",
        "nodes",
        "pairs",
        "sizes",
        "timeouts",
        "iterations",
        "warmup",
        "latency_iterations",
        "deadline_s",
        "baseline",
        "master",
        "master_port",
        "env",
        "multi_group",
        "last_stage",
        "rounds",
        "seed",
        "confirm_after_s",
    }
    unknown = sorted(set(body) - allowed)
    if unknown:
        return error(400, f"{unknown[0]}: unknown parameter (allowed: {', '.join(sorted(allowed))})")
    sweep = sweeps.request_sweep(source="api", user=request.user, **body)
    page = _PairPage(sweep, 0, PAIRS_PAGE)
    return JsonResponse(page.sweep_json(request), status=201)


def with_sweep(view):
    """The view is given the sweep row of ``pk`` instead of the id; an unknown id is a 404."""

    @wraps(view)
    def inner(request, pk, *args, **kwargs):
        sweep = Sweep.objects.filter(pk=pk).first()
        if sweep is None:
            return error(404, f"no sweep {pk}")
        return view(request, sweep, *args, **kwargs)

    return inner


class _PairPage:
    """One page of a sweep's pairs, in round order: ``offset``, ``limit``, the total and the next page's URL."""

    def __init__(self, sweep: Sweep, offset: int, limit: int):
        self.sweep, self.offset, self.limit = sweep, offset, limit
        self.total = PairProbe.objects.filter(sweep=sweep).count() + sweep.collapsed_ok

    @classmethod
    def of_request(cls, request, sweep: Sweep) -> _PairPage:
        limit = _bounded_int(request, "limit", PAIRS_PAGE, 1, MAX_PAIRS_PAGE)
        return cls(sweep, _bounded_int(request, "offset", 0, 0, 10**9), limit)

    @property
    def window(self) -> slice:
        return slice(self.offset, self.offset + self.limit)

    def meta(self, request) -> dict:
        following = self.offset + self.limit
        url = reverse("api-sweep-pairs", args=[self.sweep.pk]) + f"?offset={following}&limit={self.limit}"
        return {
            "total": self.total,
            "offset": self.offset,
            "limit": self.limit,
            "next": request.build_absolute_uri(url) if following < self.total else None,
        }

    def sweep_json(self, request) -> dict:
        """The sweep JSON with this page of its pairs, and ``pairs_page`` saying where the rest are."""
        data = documents.sweep_json(self.sweep, pair_window=self.window)
        data["pairs_page"] = self.meta(request)
        return data


@api_view()
@bad_requests
@with_sweep
def sweep_detail(request, sweep):
    """The sweep JSON with its first ``limit`` pairs (from ``offset``); ``pairs_page.next`` pages on."""
    data = _PairPage.of_request(request, sweep).sweep_json(request)
    data["progress"] = sweep.progress()
    return JsonResponse(data)


@api_view()
@bad_requests
@with_sweep
def sweep_pairs(request, sweep):
    """A page of a sweep's pairs alone: ``{"sweep", "total", "offset", "limit", "next", "pairs"}``."""
    page = _PairPage.of_request(request, sweep)
    shown = documents.pair_dicts(sweep, window=page.window)
    return JsonResponse({"sweep": sweep.pk, **page.meta(request), "pairs": shown})


@api_view(methods=("POST",), permission=START_PERMISSION)
@with_sweep
def sweep_cancel(request, sweep):
    if not sweeps.cancel(sweep.pk):
        return error(409, f"sweep {sweep.pk} is already {sweep.status}")
    sweep.refresh_from_db()
    return JsonResponse(documents.sweep_json(sweep, with_pairs=False))


MAX_DRILL_GROUPS = 2  # a drill-down is one cell of the group matrix: one group, or a pair of them
MAX_GROUP_CHARS = 255


def drill_groups(request) -> list[str]:
    """The ``group`` parameters of a drill-down (none: the whole matrix); SweepRequestError if unusable."""
    wanted = request.GET.getlist("group")
    if len(wanted) > MAX_DRILL_GROUPS:
        raise sweeps.SweepRequestError(f"group: at most {MAX_DRILL_GROUPS} (one cell of the group matrix)")
    for g in wanted:
        if not g or len(g) > MAX_GROUP_CHARS or "\x00" in g:
            raise sweeps.SweepRequestError(f"group: expected a group name of 1 to {MAX_GROUP_CHARS} characters")
    return list(dict.fromkeys(wanted))


def matrix_response(sweep, wanted: list[str]) -> HttpResponse:
    """The sweep's node matrix, or with groups named the node matrix of their members only."""
    head = {"sweep": sweep.pk, "status": sweep.status, "verdict": sweep.verdict}
    if not wanted:
        text = matrices.matrix_text(sweep)
    else:
        try:
            text = matrices.drill_down_text(sweep, wanted)
        except matrices.DrillDownError as exc:
            return error(exc.status, str(exc))
    return HttpResponse(documents.json_object(head, spread=text), content_type="application/json")


@api_view()
@bad_requests
@with_sweep
def sweep_matrix(request, sweep):
    """The node matrix; ``?group=A[&group=B]``: only the nodes of those groups (a cell of the group matrix)."""
    return matrix_response(sweep, drill_groups(request))


@api_view()
@with_sweep
def sweep_groups(request, sweep):
    """The group matrix (cluster_health.core.groupmatrix): group x group worst status, counts, busbw."""
    head = {"status": sweep.status, "verdict": sweep.verdict}
    return HttpResponse(
        documents.json_object(head, spread=matrices.group_matrix_text(sweep)), content_type="application/json"
    )


class _Echo:
    def write(self, value):
        return value


@api_view()
@heavy
@with_sweep
def sweep_csv(request, sweep):
    writer = csv.writer(_Echo())
    response = StreamingHttpResponse((writer.writerow(r) for r in documents.csv_rows(sweep)), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="sweep-{sweep.pk}.csv"'
    return response


@api_view()
@bad_requests
def pair_history(request, a, b):
    limit = _bounded_int(request, "limit", 50, 1, MAX_LIST)
    found = Node.objects.filter(name__in=(a, b)).count()
    if found < (1 if a == b else 2):
        return error(404, f"unknown node in {a}, {b}")
    qs = PairProbe.objects.filter(node_a__name__in=(a, b), node_b__name__in=(a, b))
    rows = qs.order_by("-id").values(
        *pairs.PAIR_MODEL_FIELDS, "sweep_id", "finished", a=F("node_a__name"), b=F("node_b__name")
    )[:limit]
    history = [
        {
            **pairs.pair_dict(row),
            "sweep": row["sweep_id"],
            "finished": row["finished"] and row["finished"].isoformat(),
        }
        for row in rows
    ]
    return JsonResponse({"a": a, "b": b, "history": history})


# Hang diagnoses: asked for by operators, read by anyone logged in (docs/HANGS.md).
MAX_HANG_TIMEOUT_S = 600.0


def _hang_json(diagnosis: HangDiagnosis) -> dict:
    head = {
        "diagnosis": diagnosis.pk,
        "status": diagnosis.status,
        "master": diagnosis.master or None,
        "slurm_job": diagnosis.slurm_job or None,
        "nodes": diagnosis.nodes,
        "created": diagnosis.created.isoformat(),
        "finished": diagnosis.finished and diagnosis.finished.isoformat(),
        "verdict": diagnosis.verdict or None,
        "hung": diagnosis.hung,
        "url": reverse("hang", args=[diagnosis.pk]),
    }
    return {**head, "result": diagnosis.result or None}


@api_view(methods=("GET", "POST"))
def hang_list(request):
    """GET: recent diagnoses. POST {"master": "ADDR:PORT"} or {"slurm_job": ID}, optional "nodes",
    "timeout_s": an operator asks for one; 202 with its id and URL, the answer follows on GET."""
    if not request.user.has_perm(START_PERMISSION):  # a report holds a job's stacks, launch variables, peers
        return error(403, "hang diagnoses are read and asked for by operators")
    if request.method == "GET":
        recent = HangDiagnosis.objects.order_by("-created")[: _bounded_int(request, "limit", 50, 1, MAX_LIST)]
        return JsonResponse({"diagnoses": [{**_hang_json(d), "result": None} for d in recent]})
    if len(request.body) > MAX_BODY:
        return error(400, "body: larger than 1 MiB")
    try:
        body = json.loads(request.body or b"{}")
        if not isinstance(body, dict):
            raise ValueError("expected a JSON object")
        timeout_s = float(body.get("timeout_s", 30.0))
        if not 5.0 <= timeout_s <= MAX_HANG_TIMEOUT_S:
            raise ValueError(f"timeout_s: between 5 and {MAX_HANG_TIMEOUT_S:.0f}")
        nodes = body.get("nodes")
        if nodes is not None and (not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes)):
            raise ValueError("nodes: a list of node names")
        diagnosis = hang_diagnoses.request(
            master=body.get("master"),
            slurm_job=body.get("slurm_job"),
            nodes=nodes,
            source="api",
            requested_by=request.user.get_username(),
        )
    except (ValueError, TypeError, hang_diagnoses.HangRequestError) as exc:
        return error(400, str(exc))
    dispatch.send_to_server(vocabulary.TASK_HANG, diagnosis_id=diagnosis.pk, timeout_s=timeout_s)
    return JsonResponse(_hang_json(diagnosis), status=202)


@api_view()
def hang_detail(request, pk):
    if not request.user.has_perm(START_PERMISSION):
        return error(403, "hang diagnoses are read and asked for by operators")
    diagnosis = HangDiagnosis.objects.filter(pk=pk).first()
    if diagnosis is None:
        return error(404, f"no hang diagnosis {pk}")
    return JsonResponse(_hang_json(diagnosis))

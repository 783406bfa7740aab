"""The Hangs pages (operators): diagnose a running job, and read the diagnoses kept."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from cluster_health import hang_diagnoses, vocabulary
from cluster_health.models import HangDiagnosis
from cluster_health.queues import dispatch


@login_required
def hang_list(request):
    """The Hangs page (operators: a report holds a job's stacks, launch variables and peers): diagnose a
    running job, and every diagnosis so far."""
    if not request.user.has_perm("cluster_health.start_sweep"):
        return HttpResponse("Hang diagnoses are read and asked for by operators.", status=403)
    if request.method == "POST":
        target = (request.POST.get("job") or "").strip()
        master, slurm_job = (None, target.removeprefix("slurm:")) if target.startswith("slurm:") else (target, None)
        nodes = [n.strip() for n in (request.POST.get("nodes") or "").split(",") if n.strip()] or None
        try:
            diagnosis = hang_diagnoses.request(
                master=master or None,
                slurm_job=slurm_job,
                nodes=nodes,
                source="web",
                requested_by=request.user.get_username(),
            )
        except hang_diagnoses.HangRequestError as exc:
            messages.error(request, str(exc))
            return redirect("hangs")
        dispatch.send_to_server(vocabulary.TASK_HANG, diagnosis_id=diagnosis.pk, timeout_s=30.0)
        return redirect("hang", diagnosis.pk)
    recent = HangDiagnosis.objects.order_by("-created")[:100]
    return render(request, "cluster_health/hangs.html", {"diagnoses": recent})


@login_required
def hang_detail(request, pk: int):
    """One diagnosis: verdict and culprits on top, then every rank (its place, and its frames on click)."""
    if not request.user.has_perm("cluster_health.start_sweep"):
        return HttpResponse("Hang diagnoses are read by operators.", status=403)
    diagnosis = get_object_or_404(HangDiagnosis, pk=pk)
    return render(request, "cluster_health/hang.html", {"d": diagnosis, "r": diagnosis.result or {}})

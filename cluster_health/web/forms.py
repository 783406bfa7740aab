"""The start-sweep form: kind, nodes, backend. Validation of bounds is the control plane's (sweeps.clean_request)."""

from __future__ import annotations

from django import forms

from cluster_health.core import matrix
from cluster_health.models import Node, Sweep

PAGE_KINDS = ("connectivity", "quick", "full", "group", "discover")
KIND_HELP = {
    "connectivity": "every pair reaches the collective stage (fast, no bandwidth)",
    "quick": "a quick pass with small messages",
    "full": "every pair, bandwidth over the message-size sweep, then a group all_reduce",
    "group": "one all_reduce across all chosen nodes",
    "discover": "every interface combination of every pair: which GLOO_SOCKET_IFNAME works on each node",
}


class StartSweepForm(forms.Form):
    kind = forms.ChoiceField(
        choices=[(k, f"{k}: {KIND_HELP[k]}") for k in PAGE_KINDS if k in dict(Sweep.KIND_CHOICES)],
        initial="connectivity",
    )
    backend = forms.ChoiceField(choices=[("gloo", "gloo (CPU, TCP)"), ("nccl", "nccl (GPU)")], initial="gloo")
    nodes = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="none ticked: every active node (an offline one fails the sweep)",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        online = Node.objects.filter(Node.online_q(), active=True).values_list("name", flat=True)
        self.fields["nodes"].choices = [(n, n) for n in matrix.natural_sorted(online)]


class HistoryFilterForm(forms.Form):
    kind = forms.ChoiceField(required=False, choices=[("", "any kind"), *Sweep.KIND_CHOICES])
    status = forms.ChoiceField(required=False, choices=[("", "any status"), *Sweep.STATUS_CHOICES])
    verdict = forms.ChoiceField(
        required=False, choices=[("", "any verdict"), *[(v, v) for v in ("pass", "warn", "fail", "unknown")]]
    )
    backend = forms.ChoiceField(required=False, choices=[("", "any backend"), ("gloo", "gloo"), ("nccl", "nccl")])
    node = forms.CharField(required=False, max_length=63, widget=forms.TextInput(attrs={"placeholder": "node name"}))
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))

    def filter(self, qs):
        if not self.is_valid():
            return qs
        data = self.cleaned_data
        for field in ("kind", "status", "verdict", "backend"):
            if data.get(field):
                qs = qs.filter(**{field: data[field]})
        if data.get("since"):
            qs = qs.filter(created__date__gte=data["since"])
        if data.get("node"):
            qs = qs.filter(nodes__icontains=f'"{data["node"]}"')
        return qs

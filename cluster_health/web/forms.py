"""The start-sweep form: kind, nodes, backend. Validation of bounds is the control plane's (sweeps.clean_request)."""

from __future__ import annotations

from django import forms

from cluster_health.core import matrix, planner
from cluster_health.models import Node, Sweep

PAGE_KINDS = ("connectivity", "quick", "full", "group", "discover", "sampled", "topology", "bisect", "gpu")
KIND_HELP = {
    "connectivity": "every pair reaches the collective stage (fast, no bandwidth)",
    "quick": "a quick pass with small messages",
    "full": "every pair, bandwidth over the message-size sweep, then a group all_reduce",
    "group": "one all_reduce across all chosen nodes",
    "discover": "every interface combination of every pair: which GLOO_SOCKET_IFNAME works on each node",
    "sampled": "large fleets: rounds of random disjoint pairs with bandwidth, every node in each round",
    "topology": "large fleets: every pair inside each group (rack, leaf), one pair between every two groups",
    "bisect": "large fleets: a quick pass, then probes around the suspects until each failure is pinned",
    "gpu": "every node's GPUs checked locally: memory, bf16/fp16 matmul, host copies, against the fleet",
}


class StartSweepForm(forms.Form):
    kind = forms.ChoiceField(
        choices=[(k, f"{k}: {KIND_HELP[k]}") for k in PAGE_KINDS if k in dict(Sweep.KIND_CHOICES)],
        initial="connectivity",
    )
    backend = forms.ChoiceField(choices=[("gloo", "gloo (CPU, TCP)"), ("nccl", "nccl (GPU)")], initial="gloo")
    rounds = forms.IntegerField(
        required=False,
        min_value=1,
        help_text=f"sampled: rounds of random pairs (empty: {planner.SAMPLED_ROUNDS})",
    )
    seed = forms.IntegerField(
        required=False, min_value=0, help_text="sampled: the seed of an earlier sweep, to draw its pairs again"
    )
    nodes = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="none ticked: every active node (an offline one fails the sweep)",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Every active node, as "none ticked" means: an offline one is listed too, marked, since a sweep
        # over it fails on it rather than leaving it out.
        active = set(Node.objects.filter(active=True).values_list("name", flat=True))
        online = set(Node.objects.filter(Node.online_q(), active=True).values_list("name", flat=True))
        self.fields["nodes"].choices = [
            (n, n if n in online else f"{n} (offline)") for n in matrix.natural_sorted(active)
        ]

    def request(self) -> dict:
        """The sweep request the form asks for (sweeps.request_sweep bounds it)."""
        data = self.cleaned_data
        out = {"kind": data["kind"], "backend": data["backend"], "nodes": list(data["nodes"]) or None}
        if data["kind"] == "sampled":
            out.update({key: data[key] for key in ("rounds", "seed") if data.get(key) is not None})
        return out


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

"""JSON API routes, mounted at /api/."""

from django.urls import path

from cluster_health.web import api, expected, operator_views

urlpatterns = [
    path("nodes", api.nodes, name="api-nodes"),
    path("nodes/<str:name>/gpus", api.node_gpus, name="api-node-gpus"),
    path("nodes/<str:name>/retire", api.node_retire, name="api-node-retire"),
    path("nodes/<str:name>/activate", api.node_activate, name="api-node-activate"),
    path("nodes/<str:name>/maintenance", operator_views.api_node_maintenance, name="api-node-maintenance"),
    path("nodes/<str:name>/return", operator_views.api_node_return, name="api-node-return"),
    path("findings/<int:pk>/acknowledge", operator_views.api_finding_acknowledge, name="api-finding-acknowledge"),
    path("audit", operator_views.api_audit, name="api-audit"),
    path("coverage", operator_views.api_coverage, name="api-coverage"),
    path("expected", expected.expected, name="api-expected"),
    path("sweeps", api.sweep_list, name="api-sweeps"),
    path("sweeps/<int:pk>", api.sweep_detail, name="api-sweep"),
    path("sweeps/<int:pk>/pairs", api.sweep_pairs, name="api-sweep-pairs"),
    path("sweeps/<int:pk>/cancel", api.sweep_cancel, name="api-sweep-cancel"),
    path("sweeps/<int:pk>/matrix", api.sweep_matrix, name="api-sweep-matrix"),
    path("sweeps/<int:pk>/groups", api.sweep_groups, name="api-sweep-groups"),
    path("sweeps/<int:pk>/pairs.csv", api.sweep_csv, name="api-sweep-csv"),
    path("pairs/<str:a>/<str:b>/history", api.pair_history, name="api-pair-history"),
    path("hangs", api.hang_list, name="api-hangs"),
    path("hangs/<int:pk>", api.hang_detail, name="api-hang"),
]

"""Dashboard pages, mounted at "/"."""

from django.urls import path

from cluster_health.web import views

urlpatterns = [
    path("", views.overview, name="overview"),
    path("nodes/", views.consistency_view, name="consistency"),
    path("nodes.json", views.nodes_state, name="nodes-state"),
    path("nodes/<str:name>/", views.node_detail, name="node"),
    path("pairs/<str:a>/<str:b>/", views.pair_detail, name="pair"),
    path("probes/<int:probe_id>/", views.probe_detail, name="probe"),
    path("sweeps/", views.history, name="history"),
    path("sweeps/new/", views.start_sweep, name="sweep-new"),
    path("sweeps/compare/", views.compare, name="compare"),
    path("sweeps/compare.json", views.compare_state, name="compare-state"),
    path("sweeps/<int:sweep_id>/", views.sweep_detail, name="sweep"),
    path("sweeps/<int:sweep_id>/state.json", views.sweep_state, name="sweep-state"),
    path("sweeps/<int:sweep_id>/cancel/", views.cancel_sweep, name="sweep-cancel"),
    path("sweeps/<int:sweep_id>/report/", views.report, name="sweep-report"),
    path("sweeps/<int:sweep_id>/findings/<int:finding_id>/", views.finding_detail, name="finding"),
    path("hangs/", views.hang_list, name="hangs"),
    path("hangs/<int:pk>/", views.hang_detail, name="hang"),
]

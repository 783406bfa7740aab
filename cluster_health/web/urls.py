"""Dashboard pages, mounted at "/"."""

from django.urls import path

from cluster_health.web import operator_views, schedules, views
from cluster_health.web.views.topology import topology_view

urlpatterns = [
    path("", views.overview, name="overview"),
    path("nodes/", views.nodes_view, name="nodes"),
    # No trailing slash: "nodes/<name>/" stays every node's page, one named "versions" included.
    path("nodes/versions", views.consistency_view, name="consistency"),
    path("nodes.json", views.nodes_state, name="nodes-state"),
    path("nodes/<str:name>/", views.node_detail, name="node"),
    path("nodes/<str:name>/activity/", views.node_activity, name="node-activity"),
    path("pairs/<str:a>/<str:b>/", views.pair_detail, name="pair"),
    path("probes/<int:probe_id>/", views.probe_detail, name="probe"),
    path("sweeps/", views.history, name="history"),
    path("sweeps/new/", views.start_sweep, name="sweep-new"),
    path("sweeps/compare/", views.compare, name="compare"),
    path("sweeps/compare.json", views.compare_state, name="compare-state"),
    path("sweeps/<int:sweep_id>/", views.sweep_detail, name="sweep"),
    path("sweeps/<int:sweep_id>/state.json", views.sweep_state, name="sweep-state"),
    path("sweeps/<int:sweep_id>/cancel/", views.cancel_sweep, name="sweep-cancel"),
    path("sweeps/<int:sweep_id>/rerun/", views.rerun_pairs, name="sweep-rerun"),
    path("sweeps/<int:sweep_id>/report/", views.report, name="sweep-report"),
    path("sweeps/<int:sweep_id>/findings/<int:finding_id>/", views.finding_detail, name="finding"),
    path("schedules/", schedules.schedule_list, name="schedules"),
    path("schedules/new/", schedules.schedule_edit, name="schedule-new"),
    path("schedules/<int:pk>/", schedules.schedule_edit, name="schedule-edit"),
    path("nodes/<str:name>/maintenance/", operator_views.node_maintenance, name="node-maintenance"),
    path("findings/<int:finding_id>/acknowledge/", operator_views.finding_acknowledge, name="finding-acknowledge"),
    path("audit/", operator_views.audit_log, name="audit"),
    path("hangs/", views.hang_list, name="hangs"),
    path("hangs/<int:pk>/", views.hang_detail, name="hang"),
    path("topology/", topology_view, name="topology"),
]

"""Dashboard pages, a module per page family. Everyone logged in sees everything; only operators act.

Views read rows and hand them to templates; the heatmaps fetch their data from the JSON
endpoints here (the compact payload of cluster_health.core.matrix) and then follow the sweep
over a WebSocket. The page views are named here for the routes (cluster_health/web/urls.py).
"""

from cluster_health.web.views.comparison import compare, compare_state, report
from cluster_health.web.views.findings import finding_detail
from cluster_health.web.views.hangs import hang_detail, hang_list
from cluster_health.web.views.home import nodes_state, overview
from cluster_health.web.views.nodes import consistency_view, node_activity, node_detail, nodes_view
from cluster_health.web.views.pairs import pair_detail, probe_detail
from cluster_health.web.views.sweeps import cancel_sweep, history, rerun_pairs, start_sweep, sweep_detail, sweep_state

__all__ = [
    "cancel_sweep",
    "compare",
    "compare_state",
    "consistency_view",
    "finding_detail",
    "hang_detail",
    "hang_list",
    "history",
    "node_activity",
    "node_detail",
    "nodes_state",
    "nodes_view",
    "overview",
    "pair_detail",
    "probe_detail",
    "report",
    "rerun_pairs",
    "start_sweep",
    "sweep_detail",
    "sweep_state",
]

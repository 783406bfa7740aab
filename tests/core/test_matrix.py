"""The compact matrix payload and the diff of two sweeps (pure functions)."""

import json
import math

from cluster_health.core import matrix
from tests.support.dashboard_rows import matrix_payload


def pair(a, b, status, busbw=None, **kw):
    return {"a": a, "b": b, "status": status, "busbw_gbps": busbw, **kw}


def test_it_orders_nodes_naturally():
    assert matrix.natural_sorted(["node10", "node2", "node1", "Node3"]) == ["node1", "node2", "Node3", "node10"]


def test_it_indexes_the_upper_triangle_densely():
    n = 5
    seen = [matrix.pair_index(i, j, n) for i in range(n) for j in range(i + 1, n)]
    assert seen == list(range(n * (n - 1) // 2))
    assert matrix.pair_index(3, 1, n) == matrix.pair_index(1, 3, n)


def test_it_encodes_status_busbw_and_details_per_pair():
    payload = matrix_payload(
        ["n10", "n2", "n1"],
        [
            pair("n2", "n1", "ok", 1.5, latency_us=120.0),
            pair("n1", "n10", "timeout", stage="connect", reason="connect_timeout", hint="firewall?"),
        ],
    )
    assert payload["nodes"] == ["n1", "n2", "n10"]
    status = matrix.decode(payload["status"], "B")
    busbw = matrix.decode(payload["busbw_gbps"], "f")
    lat = matrix.decode(payload["latency_us"], "f")
    k12, k1_10, k2_10 = matrix.pair_index(0, 1, 3), matrix.pair_index(0, 2, 3), matrix.pair_index(1, 2, 3)
    assert matrix.STATUS_CODES[status[k12]] == "ok" and busbw[k12] == 1.5 and lat[k12] == 120.0
    assert matrix.STATUS_CODES[status[k1_10]] == "timeout" and math.isnan(busbw[k1_10])
    assert matrix.STATUS_CODES[status[k2_10]] == "untested"
    assert payload["details"] == {str(k1_10): ["connect", "connect_timeout", "firewall?"]}


def test_its_text_is_the_json_of_its_payload_and_a_copy_is_its_own():
    nodes = ['n"1', "n\\2", "nœud-3", "n4"]
    rows = [
        ('n"1', "n\\2", "ok", 1.25, 90.5, None, None, None),
        ("nœud-3", "n4", "timeout", None, None, "connect", "connect_timeout", 'firewall "eth0"?'),
    ]
    arrays = matrix.build_matrix_arrays(nodes, rows)
    assert arrays.text() == json.dumps(arrays.payload(), separators=(",", ":"))
    assert json.loads(arrays.text()) == arrays.payload()
    before = arrays.text()
    copy = arrays.copy().apply(
        [("n4", "n\\2", "failed", None, None, "init", "x", None), ('n"1', "n\\2", "ok", 9.0, 1.0, None, None, None)]
    )
    copy.apply([("nœud-3", "n4", "ok", 3.0, 2.0, None, None, None)])
    assert arrays.text() == before  # the copy's changes, details included, never reach the original
    assert matrix.status_counts(copy.payload()) == {"ok": 2, "failed": 1, "untested": 3}


def test_it_never_moves_a_final_result_back_to_running():
    payload = matrix_payload(["a", "b"], [pair("a", "b", "ok", 2.0), pair("b", "a", "running")])
    assert matrix.status_counts(payload) == {"ok": 1}


def test_it_ignores_pairs_naming_unknown_nodes():
    payload = matrix_payload(["a", "b"], [pair("a", "zz", "failed", reason="dns")])
    assert matrix.status_counts(payload) == {"untested": 1}


def test_it_diffs_status_changes_and_busbw_ratio():
    before = matrix_payload(
        ["a", "b", "c"],
        [pair("a", "b", "ok", 10.0), pair("a", "c", "failed", reason="refused"), pair("b", "c", "ok", 10.0)],
    )
    after = matrix_payload(
        ["a", "b", "c", "d"],
        [
            pair("a", "b", "ok", 5.0),
            pair("a", "c", "ok", 9.0),
            pair("b", "c", "timeout", reason="connect_timeout"),
            pair("a", "d", "ok", 1.0),
        ],
    )
    diff = matrix.build_diff(before, after)
    assert diff["nodes"] == ["a", "b", "c", "d"]
    change = matrix.decode(diff["change"], "B")
    ratio = matrix.decode(diff["busbw_ratio"], "f")
    code = lambda i, j: matrix.DIFF_CODES[change[matrix.pair_index(i, j, 4)]]
    assert [code(0, 1), code(0, 2), code(1, 2), code(0, 3)] == ["same", "fixed", "broke", "absent"]
    assert ratio[matrix.pair_index(0, 1, 4)] == 0.5
    assert diff["broke"] == [{"a": "b", "b": "c", "before": "ok", "after": "timeout"}]
    assert diff["fixed"] == [{"a": "a", "b": "c", "before": "failed", "after": "ok"}]
    assert [(p["a"], p["b"], p["ratio"]) for p in diff["slower"]] == [("a", "b", 0.5)]
    assert diff["added_nodes"] == ["d"] and diff["removed_nodes"] == []

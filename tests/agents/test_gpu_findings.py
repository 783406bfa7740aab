"""Fleet findings about GPUs: from heartbeat facts (recorded NVML nodes) and from gpu check results."""

import copy

from agents import gpu, gpu_findings
from tests.support.nvml_fake import FakeNvml


def node_facts(recording: str, **gpus_over) -> dict:
    g = gpu.collect(FakeNvml.load(recording))
    g.update(gpus_over)
    return {"gpus": g}


def healthy_fleet(n: int = 5) -> dict:
    return {f"n{i}": node_facts("h100_node") for i in range(n)}


def texts(findings, severity=None):
    return [f["text"] for f in findings if severity in (None, f["severity"])]


def test_it_finds_nothing_in_a_healthy_fleet():
    assert gpu_findings.fleet_findings(healthy_fleet()) == []


def test_it_names_the_gpu_whose_pcie_link_is_slower_than_its_peers():
    fleet = healthy_fleet()
    fleet["gpu-017"] = node_facts("degraded_pcie")
    [f] = gpu_findings.fleet_findings(fleet)
    assert f["severity"] == "warn" and f["subject"] == "gpu-017"
    assert f["text"].startswith(
        "GPU 2 of gpu-017 runs PCIe Gen4 x8 where its peers (NVIDIA H100 80GB HBM3) run Gen5 x16"
    )


def test_a_link_narrower_than_its_own_maximum_is_named_without_peers():
    facts = node_facts("h100_node")
    facts["gpus"]["devices"] = facts["gpus"]["devices"][:1]
    facts["gpus"]["devices"][0]["pcie"]["width"] = 8
    assert texts(gpu_findings.fleet_findings({"solo": facts})) == ["GPU 0 of solo trained its PCIe link at x8 of x16"]


def test_it_names_the_nodes_whose_driver_differs():
    fleet = healthy_fleet(6)
    for name in ("n1", "n3", "n4"):
        fleet[name]["gpus"]["driver"] = "535.104.05"
    [f] = gpu_findings.fleet_findings(fleet)
    assert f["severity"] == "warn"
    assert f["text"] == "driver differs on 3 nodes: n1, n3, n4 run 535.104.05, where 3 nodes run 550.54.15"


def test_it_fails_uncorrectable_ecc_errors_and_names_the_gpu():
    fleet = healthy_fleet()
    fleet["n5"] = node_facts("faulty_gpus")
    found = gpu_findings.fleet_findings(fleet)
    fails = [f for f in found if f["severity"] == "fail"]
    assert any(
        f["subject"] == "n5"
        and f["text"].startswith("uncorrectable ECC errors on GPU 3 of n5 (2 since the last reset, 5 in its lifetime)")
        for f in fails
    )
    assert any(
        f["text"].startswith("NVLink links 15, 17 down on GPU 5 of n5 (16 active where its peers have 18)")
        for f in fails
    )
    assert any(t.startswith("remapped rows pending on GPU 3 of n5") for t in texts(found, "warn"))
    assert any("persistence mode is off on n5" in t for t in texts(found, "info"))
    assert found == sorted(found, key=lambda f: gpu_findings.SEVERITY_ORDER[f["severity"]])  # worst first


def test_lifetime_only_ecc_errors_and_pending_retired_pages_warn():
    facts = node_facts("h100_node")
    dev = facts["gpus"]["devices"][0]
    dev["ecc"]["aggregate"]["uncorrected"] = 1
    dev["retired_pages"] = {"double_bit": 1, "single_bit": 0, "pending": True}
    found = gpu_findings.fleet_findings({"old": facts})
    assert [f["severity"] for f in found] == ["warn", "warn"]
    assert any(t.startswith("retired pages pending on GPU 0 of old") for t in texts(found))


def test_a_failed_row_remap_fails():
    facts = node_facts("h100_node")
    facts["gpus"]["devices"][4]["remapped_rows"]["failure"] = True
    assert texts(gpu_findings.fleet_findings({"n0": facts}), "fail") == [
        "row remapping failed on GPU 4 of n0: it has no spare rows left; replace it"
    ]


def test_a_node_missing_a_gpu_or_all_of_them_fails():
    fleet = healthy_fleet()
    fleet["n1"]["gpus"]["devices"].pop()
    fleet["n2"] = node_facts("cpu_node")
    found = gpu_findings.fleet_findings(fleet)
    assert texts(found, "fail") == [
        "n1 has 7 GPUs where its peers have 8 (00000000:88:00.0, where its peers have one, is not listed): a GPU is "
        "missing (fallen off the bus, Xid 79) or hidden",
        "n2 reports no GPUs (no NVML library (libnvidia-ml.so): no NVIDIA driver is installed on this node) "
        "where its peers have 8",
    ]


def test_a_cpu_only_fleet_and_old_agents_give_no_findings():
    assert gpu_findings.fleet_findings({"c0": node_facts("cpu_node"), "c1": node_facts("cpu_node")}) == []
    assert gpu_findings.fleet_findings({"old": {"gpus": []}, "older": {}}) == []


# -- gpu check results ------------------------------------------------------------------


def check_result(node, bf16=700.0, h2d=52.0, status="ok", reason=None, hint=None, gpus=8):
    return {
        "v": 1,
        "kind": "gpu",
        "probe_id": 1,
        "node": node,
        "status": status,
        "stage": "copy",
        "reason": reason,
        "hint": hint,
        "devices": [
            {
                "index": i,
                "name": "NVIDIA H100 80GB HBM3",
                "status": "ok",
                "stage": "copy",
                "bf16_tflops": bf16 + i,
                "fp16_tflops": bf16 + i,
                "h2d_gbps": h2d,
                "d2h_gbps": h2d,
            }
            for i in range(gpus)
        ],
    }


def test_a_gpu_slow_against_its_model_across_the_fleet_is_flagged():
    results = {f"n{i}": check_result(f"n{i}") for i in range(4)}
    slow = check_result("n9")
    slow["devices"][6]["bf16_tflops"] = 420.0
    results["n9"] = slow
    found = gpu_findings.check_findings(results)
    assert [(f["severity"], f["subject"]) for f in found] == [("warn", "n9")]
    assert found[0]["text"].startswith(
        "GPU 6 of n9 (NVIDIA H100 80GB HBM3) is slow at bf16 matmul: 420 TFLOP/s where "
        "the fleet's 40 NVIDIA H100 80GB HBM3 GPUs have a median of 703 (60%)"
    )


def test_ordinary_spread_is_not_flagged_and_few_gpus_are_not_compared():
    results = {f"n{i}": check_result(f"n{i}", bf16=690.0 + 5 * i) for i in range(5)}
    assert gpu_findings.check_findings(results) == []
    assert gpu_findings.slow_outliers([("a", 100.0), ("b", 10.0)]) == (None, [])


def test_failed_and_degraded_checks_become_findings():
    results = {
        "n0": check_result("n0", status="timeout", reason="gpu_error", hint="GPU 3 hung"),
        "n1": check_result("n1", status="degraded", reason="below_baseline", hint="GPU 2: copies slow"),
        "n2": {"v": 1, "kind": "gpu", "node": "n2", "status": "skipped", "reason": "no_gpu", "devices": []},
    }
    found = gpu_findings.check_findings(copy.deepcopy(results))
    assert [(f["severity"], f["subject"]) for f in found] == [("fail", "n0"), ("warn", "n1")]
    assert found[0]["text"] == "gpu check timeout on n0 (gpu_error): GPU 3 hung"


def _matrix_result(figures: dict[tuple[int, int], float], gpus: int = 4, link: str = "nvlink") -> dict:
    pairs = [
        {"src": a, "dst": b, "link": link, "p2p_gbps": figures.get((min(a, b), max(a, b)), 380.0)}
        for a in range(gpus)
        for b in range(gpus)
        if a != b
    ]
    return {
        "status": "ok",
        "devices": [{"index": i, "name": "NVIDIA H100 80GB HBM3"} for i in range(gpus)],
        "pairs": pairs,
    }


def test_it_names_a_gpu_pair_far_below_its_siblings_and_its_peers():
    results = {"n0": _matrix_result({}), "n1": _matrix_result({(1, 3): 41.0}), "n2": _matrix_result({})}
    found = gpu_findings.pair_findings(results)
    assert [(f["severity"], f["subject"]) for f in found] == [("fail", "n1")]
    assert found[0]["text"] == (
        "n1 GPU 1↔3: 41 GB/s peer-to-peer copy where its other NVLink pairs run 380 and GPU 1↔3 of 2 peers "
        "380 GB/s: an NVLink lane down, or the pair falling back to PCIe"
    )


def test_a_pair_its_peers_share_or_a_small_drop_is_not_named():
    slow_everywhere = {(1, 3): 150.0}  # a property of the model's wiring, not a fault of one node
    results = {n: _matrix_result(slow_everywhere) for n in ("n0", "n1", "n2")}
    results["n3"] = _matrix_result({(0, 2): 359.0})  # one NVLink lane of 18 down: 17/18 of the rate
    assert gpu_findings.pair_findings(results) == []


def test_a_single_node_is_judged_against_its_own_pairs():
    found = gpu_findings.pair_findings({"n0": _matrix_result({(0, 1): 20.0}, link="pcie_switch")})
    assert [f["text"].split(":")[0] for f in found] == ["n0 GPU 0↔1"]
    assert "PCIe-switch pairs run 380 GB/s: the PCIe path" in found[0]["text"]

"""Quiet when healthy: sweeps through the real lifecycle, closing, confirmation pass and findings, each half
carrying the load it was measured under (the agents' side played in-process, devtools/sweep_driver.py)."""

from __future__ import annotations

import pytest

from cluster_health.models import BaselinePair
from cluster_health.shapes import documents
from devtools.sweep_driver import heartbeat, in_pass, pair_of, result_for

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]
NODES = [f"n{i}" for i in range(1, 7)]
CLEAN_SWEEPS = 5  # enough for every link to reach expected_busbw.MIN_HISTORY clean figures


def loaded(cmd, busbw, pressure=0.05, **load):
    """A half measured under ``pressure`` (PSI's share of the time some task waited for a CPU)."""
    figures = {"seconds": 3.0, "own_bytes": 10**9, "nic_bytes": 10**9, "cpu_pressure": pressure, **load}
    return result_for(cmd, busbw=busbw, evidence={"interface": "eth0", "load": figures})


def run_sweep(driver, reply) -> dict:
    for n in NODES:
        heartbeat(n)
    sweep = driver.sweep(kind="full", nodes=NODES)
    driver.answer_all(reply)
    sweep.refresh_from_db()
    assert sweep.status == "finished"
    return documents.sweep_json(sweep)


def scatter(cmd) -> float:
    """A healthy link's figure on a quiet night: 1 GB/s, a few percent either way."""
    return 1.0 + (cmd["probe_id"] % 5 - 2) / 50


def history(driver, sweeps=CLEAN_SWEEPS):
    for _ in range(sweeps):
        assert run_sweep(driver, lambda cmd: loaded(cmd, scatter(cmd)))["verdict"] == "pass"


def not_ok(report) -> list[str]:
    return [f"{p['a']}<->{p['b']} {p['status']} {p['reason']}" for p in report["pairs"] if p["status"] != "ok"]


def test_a_busy_night_where_every_link_runs_slow_alike_alarms_on_nothing(driver):
    history(driver)
    # Every core busy beside the probes: each link at 55-70 % of its quiet history, every node under pressure.
    report = run_sweep(driver, lambda cmd: loaded(cmd, 0.55 + cmd["probe_id"] % 4 * 0.05, pressure=0.85))
    assert report["verdict"] == "pass", report["findings"]
    assert {p["status"] for p in report["pairs"]} <= {"ok", "contended"}, not_ok(report)
    contended = [p for p in report["pairs"] if p["status"] == "contended"]
    assert contended and all("CPU pressure 85% during the probe" in p["hint"] for p in contended), contended
    assert not [f for f in report["findings"] if f["severity"] in ("warn", "fail")], report["findings"]
    [slow] = [f for f in report["findings"] if f["code"] == "sweep_slow"]
    assert slow["severity"] == "info" and "while the nodes were busy" in slow["text"]
    # Its contended figures never enter a baseline: the next sweep's expectation is still the quiet one.
    report = run_sweep(driver, lambda cmd: loaded(cmd, scatter(cmd)))
    assert report["verdict"] == "pass" and not not_ok(report)
    latest = BaselinePair.objects.filter(baseline__source="rolling").order_by("-baseline_id")[0]
    assert 0.95 <= latest.busbw_gbps <= 1.05 and latest.samples >= 4


def test_a_shaped_node_on_a_busy_bed_is_still_found_named_and_confirmed(driver):
    history(driver)

    def reply(cmd):  # every node equally busy; n3 shaped to a tenth, in the planned rounds and the pass
        return loaded(cmd, 0.1 if "n3" in pair_of(cmd) else 0.6 + cmd["probe_id"] % 3 * 0.05, pressure=0.85)

    report = run_sweep(driver, reply)
    [slow] = [f for f in report["findings"] if f["code"] == "slow_node"]
    assert (slow["severity"], slow["subject"]) == ("fail", "n3"), report["findings"]
    assert report["verdict"] == "fail"
    others = [p for p in report["pairs"] if "n3" not in (p["a"], p["b"])]
    assert {p["status"] for p in others} <= {"ok", "contended"}, not_ok(report)


def test_a_node_busy_alone_is_contended_with_its_figure_and_nothing_is_acted_on(driver):
    history(driver)

    def reply(cmd):  # n3 runs someone's job: its probes wait for a CPU, every time they are measured
        if "n3" in pair_of(cmd):
            return loaded(cmd, 0.4, pressure=0.9 if cmd["node"] == "n3" else 0.05)
        return loaded(cmd, scatter(cmd))

    report = run_sweep(driver, reply)
    mine = [p for p in report["pairs"] if "n3" in (p["a"], p["b"])]
    assert {p["status"] for p in mine} == {"contended"}, mine
    # Judged next to its peers (0.4 of them: "n3: CPU pressure ...") or by the pass ("n3 was busy (CPU pressure ...").
    assert all("n3" in p["hint"] and "CPU pressure 90% during the probe" in p["hint"] for p in mine), mine
    assert report["verdict"] == "pass" and not [f for f in report["findings"] if f["severity"] == "fail"]


def test_a_link_slow_again_only_under_heavier_load_confirms_nothing(driver):
    history(driver)

    def reply(cmd):  # n2<->n5 slow on a quiet moment, and again in the pass, but then with n5 swamped
        if pair_of(cmd) == {"n2", "n5"}:
            busy = in_pass(cmd) and cmd["node"] == "n5"
            return loaded(cmd, 0.45, pressure=0.9 if busy else 0.05)
        return loaded(cmd, scatter(cmd))

    report = run_sweep(driver, reply)
    [cell] = [p for p in report["pairs"] if {p["a"], p["b"]} == {"n2", "n5"}]
    assert cell["status"] == "contended" and "heavier load than the first time" in cell["hint"], cell
    assert report["verdict"] == "pass", report["findings"]


def test_a_young_history_judges_nothing_and_the_links_peers_do(driver):
    history(driver, sweeps=2)
    # A healthy link 30 % under a two-sweep median (the noise a young baseline called below_baseline) ...
    report = run_sweep(driver, lambda cmd: loaded(cmd, 0.7 if pair_of(cmd) == {"n1", "n4"} else scatter(cmd)))
    assert report["verdict"] == "pass" and not not_ok(report), not_ok(report)
    # ... while a link at a tenth of its peers is still slow, from its peers alone.
    report = run_sweep(driver, lambda cmd: loaded(cmd, 0.1 if pair_of(cmd) == {"n1", "n4"} else scatter(cmd)))
    [cell] = [p for p in report["pairs"] if {p["a"], p["b"]} == {"n1", "n4"}]
    assert (cell["status"], cell["reason"]) == ("degraded", "below_peers"), cell


def test_after_a_fault_is_cleared_the_next_sweep_is_judged_against_the_history_before_it(driver):
    history(driver)

    def faulty(cmd):  # n4 shaped to a tenth: the sweep fails, and gives the rolling baseline nothing
        return loaded(cmd, 0.1 if "n4" in pair_of(cmd) else scatter(cmd))

    assert run_sweep(driver, faulty)["verdict"] == "fail"
    report = run_sweep(driver, lambda cmd: loaded(cmd, scatter(cmd)))
    assert report["verdict"] == "pass" and not not_ok(report), not_ok(report)


def test_a_saturated_bed_whose_links_scatter_four_times_alarms_on_nothing_and_a_shaped_node_still_fails(driver):
    history(driver)
    # Every CPU busy the whole sweep: a TCP probe's figure is its share of the CPU, 0.2 to 0.8 of a quiet night.
    report = run_sweep(driver, lambda cmd: loaded(cmd, 0.2 if pair_of(cmd) == {"n1", "n2"} else 0.8, pressure=1.0))
    assert report["verdict"] == "pass", report["findings"]
    assert {p["status"] for p in report["pairs"]} <= {"ok", "contended"}, not_ok(report)
    [noisy] = [p for p in report["pairs"] if {p["a"], p["b"]} == {"n1", "n2"}]
    assert noisy["status"] == "contended" and "every node's CPU was saturated" in noisy["hint"], noisy
    # n4 shaped to a fortieth of its peers on the same saturated bed: found, named and confirmed.
    report = run_sweep(driver, lambda cmd: loaded(cmd, 0.02 if "n4" in pair_of(cmd) else 0.8, pressure=1.0))
    assert report["verdict"] == "fail", report["findings"]
    assert any(f["severity"] == "fail" and f["subject"] == "n4" for f in report["findings"]), report["findings"]


def test_a_fall_measured_at_saturation_is_no_drift_and_the_same_fall_on_quiet_nodes_is(driver):
    def falling(pressure):
        for night in range(7):  # n1<->n2 loses a tenth a night, its peers hold
            level = 1.0 - 0.1 * night
            run_sweep(
                driver,
                lambda cmd, level=level: loaded(
                    cmd, level if pair_of(cmd) == {"n1", "n2"} else scatter(cmd), pressure=pressure
                ),
            )
        return [
            f
            for f in run_sweep(
                driver,
                lambda cmd: loaded(cmd, 0.3 if pair_of(cmd) == {"n1", "n2"} else scatter(cmd), pressure=pressure),
            )["findings"]
            if f["code"] == "drift"
        ]

    assert falling(1.0) == []
    drift = falling(0.05)
    assert [f["subject"] for f in drift] == ["n1<->n2"], drift

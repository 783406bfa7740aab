"""The fleet simulator (benchmarks/fleet.py) against the real server stack, small: it keeps working.

It plays agents through the real message contract (signed heartbeats and halves, per-node
queues); the server refuses anything else, so a simulator that drifted from the contract
shows here as nodes that never come online or halves that are never applied.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def simulate(*args: str) -> tuple[dict, int]:
    """Run the simulator with ``args`` and --json: (its figures, its exit code)."""
    proc = subprocess.run(
        [sys.executable, "benchmarks/fleet.py", *args, "--json"], cwd=ROOT, capture_output=True, text=True, timeout=220
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, proc.stderr[-3000:]
    return json.loads(lines[-1]), proc.returncode


def test_the_simulated_fleet_sweeps_through_the_real_stack_and_a_cut_link_fails_its_pair(tmp_path):
    figures, code = simulate(
        "--nodes", "6", "--failing-link", "f0000,f0003", "--timeout", "150", "--logs", str(tmp_path / "logs")
    )
    assert code == 1, figures  # not every pair ok
    assert (figures["status"], figures["verdict"]) == ("finished", "fail"), figures
    assert (figures["rounds"], figures["pairs"], figures["pairs_ok"]) == (5, 15, 14)
    cut = [(sorted(pair.split("-")), outcome) for pair, outcome in figures["pairs_not_ok"].items()]
    assert cut == [(["f0000", "f0003"], "failed/connect_timeout")]
    assert figures["overhead_per_round_s"] is not None and figures["overhead_per_round_s"] >= 0


@pytest.mark.browser
def test_watch_reads_the_matrix_api_and_the_overview_while_the_sweep_is_ingested():
    figures, code = simulate("--nodes", "4", "--probe-s", "4", "--watch")
    assert (figures["status"], figures["pairs_ok"], code) == ("finished", 6, 0), figures
    watched = figures["while_ingested"]
    assert watched["errors"] == [], watched
    for figure in ("matrix_api", "overview_to_heatmap"):  # at least one look while the sweep ran (3 rounds of 4 s)
        assert watched[figure]["samples"] >= 1 and watched[figure]["p95_ms"] > 0, watched

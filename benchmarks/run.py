"""Run every benchmark, print the figures and rewrite docs/BENCHMARKS.md.

    .venv/bin/python benchmarks/run.py [--database postgres://postgres@127.0.0.1:5432/postgres]
                                       [--nodes 1024] [--only planner ingest_throughput ...]

Convention: a benchmark is a module ``benchmarks/<name>.py`` with an entry point
``run(**options) -> dict`` returning its figures (plain numbers and strings). The
runner calls the ones below with the options they take; any other module that
defines ``run()`` is called without arguments and its figures are listed as they
come. A target whose benchmark is absent, or fails, is written down as "not
measured", never estimated. Each benchmark makes its own scratch database
(``benchmarks/scratch.py``) and drops it. The figures are kept in
``docs/benchmarks.json`` with the time and the commit each was measured on, so that
``--only`` re-measures some targets and the page still shows the others, each row with
its date and commit, and saying so where the code it measures has changed since
(``CODE``). The page's hand-written sections stay: only the blocks between the
``<!-- benchmarks/run.py ... -->`` marks are rewritten.

``--ci-report`` is what ``.ci/run`` runs: the short fleet benchmark (``fleet_ci``: 64
simulated agents on SQLite, the sweep bounded to 45 s) printed beside the figure
recorded in ``docs/benchmarks.json``, as a ratio. A report, never a verdict on timing: it exits 0
whatever the timing, on a slow machine as on a fast one, and 1 only when the benchmark itself fails.
The namespace benchmarks need root, iproute2, nftables and iperf3 (``scripts/setup
--with-netns``); they hold ``/tmp/netns.lock`` while they run.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DOC = ROOT / "docs" / "BENCHMARKS.md"
FIGURES = ROOT / "docs" / "benchmarks.json"
KNOWN = (
    "planner",
    "ingest_throughput",
    "fleet",
    "fleet_ci",
    "dashboard_load",
    "probe_overhead",
    "agent_idle",
    "netns_sweep",
    "bandwidth_honesty",
    "dead_link",
    "false_alarms",
    "storage",
    "coverage",
    "topology",
)
NETNS = ("netns_sweep", "bandwidth_honesty", "dead_link", "false_alarms", "topology")
# The code each benchmark measures (besides its own module): a figure taken on a commit older than the
# last change to any of these is shown as such. The control plane's hot path, for the ingest figures.
_CONTROL_PLANE = (
    "cluster_health/ingest",
    "cluster_health/sweeps",
    "cluster_health/queues",
    "cluster_health/bulk.py",
    "cluster_health/models.py",
    "cluster_health/core/merge.py",
    "cluster_health/core/evidence.py",
    "agents/contract.py",
    "agents/signing.py",
)
CODE = {
    "planner": ("cluster_health/core/planner.py",),
    "ingest_throughput": _CONTROL_PLANE,
    "fleet": (*_CONTROL_PLANE, "cluster_health/celery.py", "devtools/devstack.py"),
    "fleet_ci": (*_CONTROL_PLANE, "cluster_health/celery.py", "devtools/devstack.py", "benchmarks/fleet.py"),
    "dashboard_load": ("cluster_health/web", "cluster_health/shapes", "cluster_health/core/matrix.py", "templates"),
    "probe_overhead": ("agents/probe", "agents/runner.py", "agents/warmhost.py"),
    "agent_idle": ("agents",),
    "netns_sweep": ("agents", "cluster_health/sweeps", "cluster_health/ingest", "cluster_health/queues"),
    "bandwidth_honesty": ("agents/probe", "agents/runner.py"),
    "dead_link": ("agents/probe", "agents/runner.py", "cluster_health/sweeps"),
    "false_alarms": ("agents/probe", "cluster_health/core", "cluster_health/sweeps"),
    "storage": ("cluster_health/models.py", "cluster_health/ingest", "cluster_health/migrations"),
    "coverage": ("cluster_health/sweeps/idle.py", "cluster_health/coverage.py", "cluster_health/core/planner.py"),
    "hang": (
        "agents/hangs",
        "cluster_health/core/hangs.py",
        "cluster_health/core/init_hangs.py",
        "cluster_health/core/stragglers.py",
        "cluster_health/hang_diagnoses.py",
    ),
    "topology": (
        "cluster_health/core/topology_inference.py",
        "cluster_health/shapes/topology_report.py",
        "cluster_health/core/planner.py",
        "devtools/testbed.py",
    ),
}
# Which benchmark a row of the targets table comes from, by the words its target starts with.
SOURCES = (
    ("planner", "planner"),
    ("ingest into", "ingest_throughput"),
    ("overhead per round, 64 simulated agents", "fleet_ci"),
    ("overhead per round,", "fleet"),
    ("full sweep, 1,024", "fleet"),
    ("matrix API while", "fleet"),
    ("overview drawn while", "fleet"),
    ("matrix API", "dashboard_load"),
    ("overview page", "dashboard_load"),
    ("live updates", "dashboard_load"),
    ("result arrival", "dashboard_load"),
    ("probe overhead per round (warm", "probe_overhead"),
    ("full connectivity sweep, namespace", "netns_sweep"),
    ("sweep time on the namespace", "netns_sweep"),
    ("probe overhead per round inside", "netns_sweep"),
    ("busbw vs", "bandwidth_honesty"),
    ("dead link", "dead_link"),
    ("false alarms", "false_alarms"),
    ("agent idle", "agent_idle"),
    ("idle-gap sweeps", "coverage"),
    ("topology", "topology"),
)
# The short run .ci/run reports: small enough for CI's budget, the same path as the fleet figures.
CI_NODES, CI_SWEEP_S = 64, 45.0
CI_FIGURES = ("overhead_per_round_s", "overhead_per_round_p95_s", "halves_per_s", "sweep_s", "setup_s")
# The blocks of docs/BENCHMARKS.md this runner writes; everything outside them is kept as it is.
BEGIN, END = "<!-- benchmarks/run.py writes from here -->", "<!-- benchmarks/run.py writes up to here -->"
# A recorded table (docs/benchmarks.json, "tables"; a run by hand, one row per run) is placed on the page
# between these marks, named by its key.
TABLE_BEGIN, TABLE_END = "<!-- benchmarks/run.py table {} -->", "<!-- benchmarks/run.py end of table {} -->"


def planner_run(nodes: int = 1024) -> dict:
    """All rounds of a full sweep over ``nodes`` planned (circle method), best of three."""
    from cluster_health.core import planner

    names = [f"node{i}" for i in range(nodes)]
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        plan = planner.plan("full", names)
        times.append(time.perf_counter() - t0)
    return {"nodes": nodes, "rounds": len(plan.rounds), "pairs": plan.pair_count, "plan_s": round(min(times), 3)}


def fleet_ci_run() -> dict:
    """The short fleet run of ``.ci/run``: CI_NODES agents on a scratch SQLite file, one server worker."""
    from benchmarks import fleet

    figures: dict = fleet.run(database=None, nodes=CI_NODES, workers=(1,), timeout_s=CI_SWEEP_S)["workers_1"]
    return figures


def call(name: str, **options) -> dict:
    try:
        if name == "planner":
            return planner_run(**options)
        if name == "fleet_ci":
            return fleet_ci_run()
        module = importlib.import_module(f"benchmarks.{name}")
        if not hasattr(module, "run"):
            return {"error": f"benchmarks/{name}.py has no run() entry point"}
        return module.run(**options)
    except Exception:
        return {"error": traceback.format_exc(limit=4)[-2000:]}


def isolated(name: str, options: dict) -> dict:
    """Run one benchmark in its own interpreter: each sets Django up on its own scratch database."""
    code = (
        f"import json, sys; sys.path.insert(0, {str(ROOT)!r}); from benchmarks.run import call; "
        f"print('\\nFIGURES ' + json.dumps(call({name!r}, **{options!r})))"
    )
    argv = [sys.executable, "-c", code]
    if name in NETNS:  # one user of network namespaces at a time on this machine
        argv = ["flock", "/tmp/netns.lock", *argv]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("FIGURES "):
            return json.loads(line[8:])
    return {"error": f"exit {proc.returncode}: {(proc.stderr or proc.stdout)[-1500:]}"}


def machine() -> str:
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        platform.processor() or "unknown CPU",
    )
    mem = (
        int(next(ln.split()[1] for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal")))
        / 2**20
    )
    return (
        f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def fmt(value, unit="") -> str:
    if value is None:
        return "not measured"
    if isinstance(value, float):
        value = f"{value:,.3g}" if value < 100 else f"{value:,.0f}"
    elif isinstance(value, int):
        value = f"{value:,}"
    return f"{value}{unit}"


def ratio(a, b) -> str:
    return f"{a / b:.1f}x" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else "-"


Row = tuple[str, str, str, str, str, str]
# A target as its section lists it: (target, goal, measured figure or None, unit, met(figure), reference).
Target = tuple[str, str, Any, str, Callable[[Any], bool], str]
# The same, with the run its figure comes from (its "measured" time and "commit"), where runs differ.
Stamped = tuple[str, str, Any, str, Callable[[Any], bool], str, dict]


def at_most(limit: float, also: bool = True) -> Callable[[float], bool]:
    """Met when the figure is no more than ``limit`` (and ``also`` holds)."""
    return lambda v: v <= limit and also


def within(share: float) -> Callable[[float], bool]:
    """Met when a ratio to the reference is within ``share`` of 1."""
    return lambda v: abs(v - 1) <= share


def git(*args: str) -> str:
    """git's answer in this repository, or "" where it has none (no git, not a checkout)."""
    try:
        proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def head_commit() -> str:
    """The commit the figures are measured on, with ``+`` when the code they measure differs from it."""
    commit = git("rev-parse", "--short=10", "HEAD")
    return commit + ("+" if commit and git("status", "--porcelain", "--", *_CONTROL_PLANE, "agents") else "")


def provenance(name: str, when: str | None, commit: str | None) -> str:
    """When and on which commit a benchmark's figures were taken, and whether its code changed since."""
    if when is None:
        return "not measured"
    by_date = ""
    if not commit:  # figures from before commits were recorded: the commit that was current then
        commit, by_date = git("rev-list", "-1", f"--before={when}", "HEAD")[:10], " (by its date)"
    if not commit:
        return f"{when}, commit unknown"
    text = f"{when}, {commit.rstrip('+')}{by_date}"
    if commit.endswith("+"):
        text += " with changes"
    # The wording depends only on whether the code changed after the commit (not on how often), so the page
    # changes when a row turns stale, not at every later commit.
    later = git(
        "rev-list", "--count", f"{commit.rstrip('+')}..HEAD", "--", *CODE.get(name, ()), f"benchmarks/{name}.py"
    )
    if later and later != "0":
        text += f"; stale: code changed since {commit.rstrip('+')[:7]}"
    elif not later:
        text += "; commit not in this history"
    return text


def source_of(target: str) -> str:
    return next((name for words, name in SOURCES if target.startswith(words)), "storage")


def targets(fig: dict, nodes: int, measured_at: dict | None = None, commits: dict | None = None) -> list[Row]:
    """(target, goal, measured, reference, met, measured on) rows; missing figures stay missing."""
    rows: list[Row] = []
    seen: dict[str, str] = {}
    for section in (
        _control_plane_rows,
        _fleet_rows,
        _probe_rows,
        _bed_rows,
        _link_rows,
        _alarm_rows,
        _agent_rows,
        _storage_rows,
        _coverage_rows,
        _topology_rows,
    ):
        for name, goal, value, unit, ok, reference, *stamp in section(fig, nodes):
            run = stamp[0] if stamp else None
            met = "not measured" if value is None else ("yes" if ok(value) else "no")
            source = source_of(name)
            if run is not None:  # a run of its own, with its own time (fleet keeps runs of several sizes)
                where = provenance(source, run.get("measured", "")[:16].replace("T", " ") or None, run.get("commit"))
            else:
                if source not in seen:
                    seen[source] = provenance(source, (measured_at or {}).get(source), (commits or {}).get(source))
                where = seen[source]
            rows.append((name, goal, fmt(value, unit), reference, met, where if value is not None else ""))
    return rows


def _control_plane_rows(fig: dict, nodes: int) -> list[Target]:
    """Planner, ingest, matrix API and pages."""
    p, i, d = fig.get("planner", {}), fig.get("ingest_throughput", {}), fig.get("dashboard_load", {})
    db_name = {"postgresql": "PostgreSQL", "sqlite": "SQLite"}.get(i.get("database"), i.get("database", "PostgreSQL"))
    ingest = f"ingest into {db_name}, {nodes} nodes ({fmt(i.get('pairs', nodes * (nodes - 1) // 2))} pairs)"
    single = i.get("single_results_per_s")
    single_ref = f"one half per call: {fmt(single, '/s')} ({ratio(i.get('results_per_s'), single)} faster)"
    matrix_ms, rows_ms = d.get(f"matrix_api_ms_{nodes}"), d.get(f"matrix_build_from_rows_ms_{nodes}")
    rows_ref = f"built from the rows: {fmt(rows_ms, ' ms')} ({ratio(rows_ms, matrix_ms)} slower)"
    overview_ms = d.get(f"overview_to_heatmap_ms_{nodes}")
    pages_ref = (
        f"64 nodes: {fmt(d.get('overview_to_heatmap_ms_64'), ' ms')}; sweep page, 64 nodes: "
        f"{fmt(d.get('sweep_page_to_heatmap_ms_64_cold'), ' ms')}"
    )
    cells_ok, rereads = d.get("live_cells_ok"), d.get("live_state_rereads")
    cells = d.get("live_cells_total", cells_ok)
    live = (
        None
        if cells_ok is None
        else f"{cells_ok:,} of {cells:,} cells, {d.get('live_rate_sent_per_s')} results/s sent, last cell "
        f"{d.get('live_last_result_to_last_cell_ms')} ms after the last result, {rereads} state re-read(s)"
    )
    lossless = rereads is not None and cells_ok == cells
    p50 = d.get("result_to_cell_ms_p50")
    p95_ref = f"p95 {fmt(d.get('result_to_cell_ms_p95'), ' ms')}" if "result_to_cell_ms_p95" in d else ""
    return [
        (f"planner, {nodes} nodes, all rounds", "< 1 s", p.get("plan_s"), " s", lambda v: v < 1, ""),
        (ingest, ">= 2,000 results/s", i.get("results_per_s"), " results/s", lambda v: v >= 2000, single_ref),
        (f"matrix API, {nodes} nodes", "<= 300 ms", matrix_ms, " ms", at_most(300), rows_ref),
        (f"overview page drawn, {nodes} nodes", "<= 2 s", overview_ms, " ms", at_most(2000), pages_ref),
        ("live updates at 500 results/s reach an open page", "no loss", live, "", lambda v: lossless, ""),
        ("result arrival to its cell changing in the browser", "(reported)", p50, " ms", lambda v: True, p95_ref),
    ]


def _fleet_rows(fig: dict, nodes: int) -> list[Target | Stamped]:
    """Simulated fleets against the real stack: overhead per round, and the full 1,024-node sweep."""
    f = fig.get("fleet", {})
    every_run = [r for r in f.values() if isinstance(r, dict) and "nodes" in r]
    # A watched run (--watch) carries a browser's load beside the stack: its rounds are not the stack's own.
    runs = sorted((r for r in every_run if "while_ingested" not in r), key=lambda r: (r["nodes"], r.get("workers", 1)))
    rows: list[Target | Stamped] = []
    for r in runs or [{"nodes": 256, "workers": 1}]:
        n, k = r["nodes"], r.get("workers", 1)
        goal = 0.15 if n <= 256 else 0.5  # issue 40's targets
        every = r.get("pairs_ok") is not None and r.get("pairs_ok") == r.get("pairs")
        beside = (
            f"{fmt(r.get('pairs_ok'))} of {fmt(r.get('pairs'))} pairs ok, {fmt(r.get('rounds'))} rounds in "
            f"{fmt(r.get('sweep_s'), ' s')}, {fmt(r.get('halves_per_s'), ' halves/s')}; p95 "
            f"{fmt(r.get('overhead_per_round_p95_s'), ' s')}"
            if "overhead_per_round_s" in r
            else ""
        )
        if "redis_peak_mib" in r:
            beside += f"; Redis +{fmt(r['redis_peak_mib'], ' MiB')}, database +{fmt(r.get('db_growth_mib'), ' MiB')}"
        if "setup_s" in r:
            beside += f"; setup {fmt(r['setup_s'], ' s')} before the sweep"
        if "load_average" in r:
            beside += f"; load average {r['load_average']}"
        if "machine_load" in r:
            beside += f"; {r['machine_load']}"
        if r.get("status") not in (None, "finished"):
            beside = (
                f"sweep stopped at --timeout after {fmt(r.get('request_to_end_s'), ' s')}: "
                f"{fmt(r.get('rounds_measured'))} of {fmt(r.get('rounds'))} rounds measured, "
                f"{fmt(r.get('pairs_ok'))} pairs ok by then; p95 {fmt(r.get('overhead_per_round_p95_s'), ' s')}"
            )
        if cpu := r.get("cpu_s_per_round"):
            beside += "; CPU a round: " + ", ".join(
                f"{role} {seconds} s" for role, seconds in sorted(cpu.items(), key=lambda kv: -kv[1]) if seconds >= 0.01
            )
        content = "real halves" if r.get("halves_content") == "real" else "minimal synthetic halves"
        consumers = f", {r['consumers']} ingest consumers" if r.get("consumers", 1) > 1 else ""
        name = f"overhead per round, {n} simulated agents, {k} server worker(s){consumers}, {content}"
        rows.append((name, f"<= {goal} s", r.get("overhead_per_round_s"), " s", at_most(goal, every), beside, r))
    # The whole sweep: a run that finished with real halves, else the best there is.
    at_1024 = sorted(
        (r for r in runs if r["nodes"] == 1024),
        key=lambda r: (r.get("status") != "finished", r.get("halves_content") != "real"),
    )
    full = at_1024[0] if at_1024 else {}
    every_pair = full.get("pairs_ok") == full.get("pairs")
    full_ref = (
        f"{fmt(full.get('pairs_ok'))} of {fmt(full.get('pairs'))} pairs ok, {fmt(full.get('workers'))} server "
        f"worker(s), {fmt(full.get('overhead_per_round_s'), ' s')} a round (p95 "
        f"{fmt(full.get('overhead_per_round_p95_s'), ' s')})"
        if full
        else ""
    )
    if full.get("status") not in (None, "finished") and full.get("overhead_per_round_s"):
        projected = full["overhead_per_round_s"] * full["rounds"] / 60
        full_ref = (
            f"stopped at --timeout after {fmt(full.get('request_to_end_s'), ' s')} "
            f"({fmt(full.get('rounds_measured'))} of {fmt(full.get('rounds'))} rounds); at its median round, "
            f"the whole sweep would take about {projected:.0f} min (projected, not measured)"
        )
    ci = fig.get("fleet_ci", {})
    if ci:  # the short run .ci/run repeats and prints beside this one
        n = ci.get("nodes", CI_NODES)
        beside = f"{fmt(ci.get('pairs_ok'))} of {fmt(ci.get('pairs'))} pairs ok; what `.ci/run` measures again"
        name = f"overhead per round, {n} simulated agents, SQLite, 1 server worker, the CI run"
        rows.append((name, "(reported)", ci.get("overhead_per_round_s"), " s", lambda v: True, beside))
    name = "full sweep, 1,024 simulated agents, 0-s probes"
    rows.append((name, "<= 600 s, every pair", full.get("sweep_s"), " s", at_most(600, every_pair), full_ref, full))
    for r in sorted((r for r in every_run if "while_ingested" in r), key=lambda r: r["nodes"]):
        seen, n = r["while_ingested"], r["nodes"]
        context = (
            f"{fmt(r.get('rounds_measured'))} rounds of a {n}-node sweep, {r.get('workers', 1)} server worker(s), "
            f"looked at every 5 s; rounds meanwhile {fmt(r.get('overhead_per_round_s'), ' s')}"
        )
        for what, goal, label in (
            ("matrix_api", 300, f"matrix API while a {n}-node sweep is ingested, p95"),
            ("overview_to_heatmap", 2000, f"overview drawn while a {n}-node sweep is ingested, p95"),
        ):
            got = seen.get(what, {})
            beside = f"p50 {fmt(got.get('p50_ms'), ' ms')}, max {fmt(got.get('max_ms'), ' ms')}, {got.get('samples', 0)} samples; {context}"
            rows.append(
                (label, f"<= {goal} ms", got.get("p95_ms"), " ms", at_most(goal, bool(got.get("samples"))), beside, r)
            )
    return rows


def _probe_rows(fig: dict, nodes: int) -> list[Target]:
    """The warm probe process's overhead per round."""
    o = fig.get("probe_overhead", {})
    warm, cold = o.get("warm_overhead_s"), o.get("cold_overhead_s")
    cold_ref = (
        f"cold start: {fmt(cold, ' s')} ({ratio(cold, warm)} slower); worst warm round "
        f"{fmt(o.get('warm_overhead_max_s'), ' s')}"
    )
    return [("probe overhead per round (warm probe process)", "<= 0.3 s", warm, " s", at_most(0.3), cold_ref)]


def _bed_rows(fig: dict, nodes: int) -> list[Target]:
    """Sweeps on the namespace test bed."""
    w = fig.get("netns_sweep", {})
    goal = "<= 1.2 x (N-1) x one round"
    if not w:
        return [("sweep time on the namespace test bed, N = 2..8", goal, None, "", bool, "")]
    rows: list[Target] = []
    sizes = sorted(int(key.rsplit("_", 1)[1]) for key in w if key.startswith("ratio_") and key[6:].isdigit())
    for n in sizes:
        # One round of N hosts runs N/2 pairs at once on this machine's few cores: the reference is
        # such a round, as a sweep of its own; a lone pair's round is beside it.
        beside = (
            f"{fmt(w.get(f'sweep_s_{n}'), ' s')} for {w.get(f'rounds_{n}')} round(s), one round alone "
            f"{fmt(w.get(f'one_round_s_{n}'), ' s')}; against a lone pair's round "
            f"({fmt(w.get('round_s'), ' s')}): {fmt(w.get(f'ratio_{n}'), ' x')}"
        )
        name = f"full connectivity sweep, namespace bed, N = {n}"
        rows.append((name, goal, w.get(f"ratio_one_round_{n}"), " x", at_most(1.2), beside))
    overhead = w.get("overhead_per_round_s")
    rows.append(("probe overhead per round inside namespace sweeps", "<= 0.3 s", overhead, " s", at_most(0.3), ""))
    return rows


def _link_rows(fig: dict, nodes: int) -> list[Target]:
    """Bandwidth honesty against iperf3 and a bare loop, and dead links."""
    b, k = fig.get("bandwidth_honesty", {}), fig.get("dead_link", {})
    rows: list[Target] = []
    for cond, label in (("unshaped", "unshaped"), ("tbf_1gbit", "tbf 1 Gbit/s"), ("tbf_100mbit", "tbf 100 Mbit/s")):
        probe, iperf3 = fmt(b.get(f"{cond}_probe_busbw_mbit"), " Mbit/s"), fmt(b.get(f"{cond}_iperf3_mbit"), " Mbit/s")
        bare = f"bare loop {fmt(b.get(f'{cond}_bare_busbw_mbit'), ' Mbit/s')}"
        vs_iperf3, vs_bare = b.get(f"{cond}_probe_vs_iperf3"), b.get(f"{cond}_probe_vs_bare")
        iperf3_ref = f"probe {probe}, iperf3 {iperf3}"
        rows.append((f"busbw vs iperf3, {label}", "within 10%", vs_iperf3, " x", within(0.10), iperf3_ref))
        rows.append((f"busbw vs a bare all_reduce loop, {label}", "within 5%", vs_bare, " x", within(0.05), bare))
    for mode, label in (("drop", "nft drop both ways"), ("down", "interface down")):
        cell = f"{k.get(f'{mode}_status', '')} at {k.get(f'{mode}_stage', '')}, {k.get(f'{mode}_reason', '')}"
        seconds, cell_ref = k.get(f"{mode}_to_failed_cell_s"), cell if k.get(f"{mode}_status") else ""
        rows.append((f"dead link ({label}) to a failed cell", "<= 15 s", seconds, " s", at_most(15), cell_ref))
    return rows


def _alarm_rows(fig: dict, nodes: int) -> list[Target]:
    """False alarms on a healthy bed under load."""
    f = fig.get("false_alarms", {})
    measured = "sweeps" in f and "false_alarm_sweeps" in f
    codes = ", ".join(f"{code} {n}" for code, n in (f.get("findings_by_code") or {}).items()) or "none"
    not_pass = f"{f['false_alarm_sweeps']} of {f['sweeps']} sweeps not pass" if measured else None
    beside = (
        f"{fmt(f.get('false_pairs'))} pair(s) not ok; warn/fail findings: {codes}; {f.get('hosts')} hosts, "
        f"{f.get('load_processes')} busy loops, {fmt(f.get('seconds'), ' s')} "
        f"(a sweep {fmt(f.get('sweep_s_median'), ' s')}, worst {fmt(f.get('sweep_s_max'), ' s')})"
        if measured
        else ""
    )
    quiet = measured and f["sweeps"] >= 20 and f["false_alarm_sweeps"] == 0 and f.get("false_pairs") == 0
    name = "false alarms on a healthy loaded bed"
    return [(name, "none in 20 sweeps", not_pass, "", lambda v: quiet and codes == "none", beside)]


def _agent_rows(fig: dict, nodes: int) -> list[Target]:
    """The idle agent's cost."""
    a = fig.get("agent_idle", {})
    rss_ref = (
        f"warm probe process beside it: {fmt(a.get('warm_rss_mib'), ' MiB')} (exits after 15 min without "
        f"probes); bare Python: {fmt(a.get('python_rss_mib'), ' MiB')}"
    )
    cpu_ref = f"warm probe process: {fmt(a.get('warm_cpu_pct'), ' %')}"
    rss_mib = a.get("agent_rss_mib")
    return [
        ("agent idle resident memory", "<= 80 MB", rss_mib, " MiB", lambda v: v * 1.048576 <= 80, rss_ref),  # MiB, MB
        ("agent idle CPU", "<= 1% of a core", a.get("agent_cpu_pct"), " %", at_most(1), cpu_ref),
    ]


def _storage_rows(fig: dict, nodes: int) -> list[Target]:
    """What one nightly full sweep adds to PostgreSQL, and a year of them at the retention defaults."""
    s = fig.get("storage", {})
    n = s.get("nodes", nodes)
    mib = 2**20
    per = (
        ""
        if not s
        else (
            f"{fmt(s.get('pairs'))} pairs: {fmt(s.get('fresh_bytes_per_pair'), ' B')} a pair fresh, "
            f"{fmt(s.get('pruned_bytes_per_pair'), ' B')} pruned, {fmt(s.get('collapsed_bytes_per_pair'), ' B')} "
            f"collapsed (stored matrix {fmt(round(s['stored_matrix_bytes'] / mib, 1), ' MiB')})"
        )
    )
    year_ref = (
        ""
        if not s
        else (
            f"{s.get('year_rule')}; without collapsing, "
            f"{fmt(round(s['year_without_collapse_bytes'] / 2**30, 1), ' GiB')}"
        )
    )

    def mib_of(key):
        return round(s[key] / mib, 1) if key in s else None

    return [
        (f"one nightly full sweep, {n} nodes, fresh", "reported", mib_of("fresh_bytes"), " MiB", bool, per),
        (
            f"the same sweep collapsed (past PAIR_ROWS_DAYS), {n} nodes",
            "reported",
            mib_of("collapsed_bytes"),
            " MiB",
            bool,
            "",
        ),
        (
            f"a year of nightly full sweeps, {n} nodes",
            "reported",
            round(s["year_bytes"] / 2**30, 1) if "year_bytes" in s else None,
            " GiB",
            bool,
            year_ref,
        ),
    ]


def _coverage_rows(fig: dict, nodes: int) -> list[Target]:
    """Idle-gap sweeps on a simulated busy fleet: days until every pair was measured, per busy share."""
    c = fig.get("coverage", {})
    runs = sorted((v for v in c.values() if isinstance(v, dict) and "busy_share" in v), key=lambda r: r["busy_share"])
    rows: list[Target] = []
    for r in runs or [{"busy_share": 0.8}]:
        share = round(r["busy_share"] * 100)
        name = (
            f"idle-gap sweeps, {fmt(c.get('nodes', 1024))} simulated nodes, {share} % busy: days until every pair "
            f"measured (simulated)"
        )
        beside = (
            f"{fmt(r.get('share_measured_day_1', 0) * 100, ' %')} of pairs after a day, "
            f"{fmt(r.get('share_measured_day_7', 0) * 100, ' %')} after a week; {fmt(r.get('idle_sweeps'))} idle "
            f"sweeps of at most {c.get('max_nodes')} nodes{_in_rounds(c)} every {c.get('schedule_min')} min, holding "
            f"{fmt(r.get('held_share', 0) * 100, ' %')} of node-time; {c.get('round_s')} s a round (modelled)"
            if "idle_sweeps" in r
            else ""
        )
        days = r.get("days_to_every_pair")
        if days is None and r.get("pairs_unmeasured_at_end"):  # the simulation ended first
            days = f"over {r['days_simulated']:g}"
            beside += f"; {fmt(r['pairs_unmeasured_at_end'])} pairs never measured by then"
        rows.append((name, "<= 7 days", days, " days", _days_within(7), beside))
    return rows


def _days_within(limit: float) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int | float) and v <= limit


def _in_rounds(c: dict) -> str:
    return f" in at most {c['max_rounds']} rounds" if c.get("max_rounds") else ""


def _equal_to(n: int) -> Callable[[Any], bool]:
    return lambda v: v == n


def _topology_rows(fig: dict, nodes: int) -> list[Target]:
    """Topology from the matrix on the two-tier beds, per shape: racks found, moved host named, uplinks measured."""
    t = fig.get("topology", {})
    shapes = {k: v for k, v in t.items() if isinstance(v, dict) and "runs" in v}
    rows: list[Target] = []
    for label in sorted(shapes) or ["2x4", "3x3"]:
        r = shapes.get(label, {})
        runs = len(r.get("runs") or [])
        every = f"{runs} of {runs} runs" if runs else "every run"
        shape = r.get("shape", label)
        load = f"{r.get('busy_loops', 0)} busy loops" if r else ""
        rows.append(
            (
                f"topology, {shape}: inferred groups equal the racks (ARI 1.0)",
                every,
                r.get("ari_1_runs"),
                f" of {runs}",
                _equal_to(runs),
                load,
            )
        )
        right = r.get("labels_right") or {}
        named_right = (
            "nothing named with the labels right"
            if r and not right.get("named")
            else (f"named with the labels right: {', '.join(right.get('named') or [])}" if r else "")
        )
        rows.append(
            (
                f"topology, {shape}: the moved host named",
                every,
                r.get("moved_named_runs"),
                f" of {runs}",
                _equal_to(runs) if not right.get("named") else (lambda v: False),
                named_right,
            )
        )
        uplinks = (r.get("uplink_sweep") or {}).get("uplinks") or []
        within = [u for u in uplinks if u.get("vs_shaping") is not None and abs(u["vs_shaping"] - 1) <= 0.2]
        unsure = [u for u in uplinks if u not in within and u.get("concurrent") is False]  # low confidence, said
        told = ", ".join(f"{u.get('group')}: {u.get('vs_shaping')} x" for u in uplinks)
        rows.append(
            (
                f"topology, {shape}: uplinks within 20 % of their shaping",
                "each, or marked low confidence",
                len(within) if r else None,
                f" of {len(uplinks)}",
                _equal_to(len(uplinks) - len(unsure)) if uplinks else (lambda v: False),
                told,
            )
        )
    return rows


METHODS = {
    "planner": "`planner.plan('full', nodes)` over synthetic names, best of three.",
    "ingest_throughput": "Synthetic nodes register by heartbeat; a connectivity sweep is requested and started "
    "(every pair row created at start); every command of every round is answered through `ingest.ingest_results` "
    "in batches of 500 halves (what the ingest buffer's drainer runs, `cluster_health/ingest/buffer.py`), with round "
    "advances, broadcasts (in-memory channel layer) and the verdict inside the time. The first 8 rounds go one half "
    "per call (`ingest_result`) as the reference. It is the database's share only: `fleet` measures the path agents' "
    "messages take.",
    "dashboard_load": "Histories of 64 and N nodes written through the same ingest path into a scratch database; "
    "the matrix API is timed through Django's test client (median of 5), beside building the matrix from the pair "
    "rows; daphne and a private redis-server serve headless Debian chromium (Playwright): sweep pages and the "
    "overview, load to heatmap drawn; then a running 64-node sweep is ingested at 500 results/s in another thread "
    "while its page is open, and every cell must turn ok from WebSocket frames.",
    "false_alarms": "Four hosts of the namespace test bed with the whole system (`benchmarks/bed.py`: scratch "
    "database, private Redis over its unix socket, server worker, beat, one agent per host), every setting at the "
    "product's default and no fault injected. Once the agents are online, one busy-loop process per core (as "
    "`scripts/soak --load` runs them) keeps the machine loaded until the end. Then 20 full sweeps run one after "
    'another, each requested as the nightly schedule requests it (`source="schedule"`, kind `full`), so the '
    "rolling baseline and each link's history (flapping, drift) build up over the run as in production. Every alarm "
    "is a false one: sweeps whose verdict is not pass (`false_alarm_sweeps`), pair rows not ok (`false_pairs`), "
    "and findings of severity warn or fail, counted by code (`findings_by_code`); `alarms` lists the first of them. "
    "`seconds` is the time from the first request to the last sweep closed.",
}


def methods() -> list[str]:
    """A section per benchmark: the fixed texts above, the others from their module docstrings."""
    out = []
    for name in KNOWN:
        text = METHODS.get(name)
        where = "`benchmarks/run.py`" if name == "planner" else f"`benchmarks/{name}.py`"
        if text is None:
            try:
                doc = importlib.import_module(f"benchmarks.{name}").__doc__ or ""
            except Exception:
                continue
            paras = [p.strip("\n") for p in doc.strip().split("\n\n")]
            body = [p for p in paras[1:] if not p.lstrip().startswith((".venv", "flock"))]
            text = "\n\n".join("\n".join(line.strip() for line in p.splitlines()) for p in [paras[0], *body])
        out += [f"### {name} ({where})", "", text, ""]
    return out


def target_lines(fig: dict, measured_at: dict, commits: dict, nodes: int) -> list[str]:
    """The targets table, each row with the date and commit its figure was measured on."""
    lines = [
        "| target | goal | measured | reference | met | measured on |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    lines += [f"| {' | '.join(r)} |" for r in targets(fig, nodes, measured_at, commits)]
    return lines


def table_lines(table: dict) -> list[str]:
    """One recorded table of docs/benchmarks.json ("tables"): its columns, then a row per run, each with
    when and on which commit it was measured and whether the code it measures changed since."""
    columns = [*table["columns"], "measured on"]
    lines = ["| " + " | ".join(columns) + " |", "| " + " | ".join("---" for _ in columns) + " |"]
    for row in table["rows"]:
        cells = [*row["cells"], provenance(table["benchmark"], row.get("measured"), row.get("commit"))]
        if len(cells) != len(columns):
            raise ValueError(f"a row of {table['columns'][0]!r}... has {len(cells) - 1} cells, not {len(columns) - 1}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render_doc(text: str, kept: dict, nodes: int = 1024) -> str:
    """``text`` (docs/BENCHMARKS.md) with every generated block rewritten from ``kept`` (docs/benchmarks.json):
    the targets table and all figures (the two ``BEGIN``/``END`` blocks, in that order) and each recorded
    table between its ``TABLE_BEGIN``/``TABLE_END`` marks. Everything else is kept as it is."""
    fig, measured_at, commits = kept["figures"], kept["measured_at"], kept["measured_commit"]
    blocks = [
        target_lines(fig, measured_at, commits, nodes),
        ["```json", json.dumps(fig, indent=2), "```"],
    ]
    if text.count(BEGIN) == len(blocks) and text.count(END) == len(blocks):
        parts, rest = [], text
        for block in blocks:
            head, _, after = rest.partition(BEGIN)
            _, _, rest = after.partition(END)
            parts += [head, BEGIN, "\n", "\n".join(block), "\n", END]
        text = "".join(parts) + rest
    for name, table in kept.get("tables", {}).items():
        begin, end = TABLE_BEGIN.format(name), TABLE_END.format(name)
        if begin not in text or end not in text:
            continue  # a table recorded but not placed on the page yet
        head, _, after = text.partition(begin)
        _, _, rest = after.partition(end)
        text = head + begin + "\n" + "\n".join(table_lines(table)) + "\n" + end + rest
    return text


def write_doc(fig: dict, measured_at: dict, commits: dict, nodes: int, database: str | None) -> None:
    """Rewrite the generated blocks of docs/BENCHMARKS.md (``render_doc``); a page without the marks is
    written whole."""
    text = DOC.read_text() if DOC.exists() else ""
    kept = {**load_figures(), "figures": fig, "measured_at": measured_at, "measured_commit": commits}
    if text.count(BEGIN) == 2 and text.count(END) == 2:
        DOC.write_text(render_doc(text, kept, nodes))
        return
    blocks = [
        target_lines(fig, measured_at, commits, nodes),
        ["```json", json.dumps(fig, indent=2), "```"],
    ]
    lines = [
        "# Benchmarks",
        "",
        "Written by `.venv/bin/python benchmarks/run.py --database postgres://postgres@127.0.0.1:5432/postgres` "
        "(the README's benchmark command); run it again to reproduce. Targets are those of the performance and "
        "scale work; where the same run measured a reference, the ratio or the reference is beside the figure. "
        "Nothing here is estimated: a target without a figure says so.",
        "",
        f"Machine: {machine()}. Database: "
        f"{'PostgreSQL (scratch database on ' + database.split('@')[-1] + ')' if database else 'SQLite (scratch file)'}.",
        "",
        "## Targets",
        "",
        BEGIN,
        *blocks[0],
        END,
        "",
        "## Method",
        "",
        *methods(),
        "## All figures",
        "",
        BEGIN,
        *blocks[1],
        END,
        "",
    ]
    DOC.write_text("\n".join(lines))


def ci_report() -> int:
    """The short fleet run, printed beside the recorded one (CI's report: exits 0 whatever it measured)."""
    kept = load_figures()
    recorded = kept["figures"].get("fleet_ci", {})
    print(f"short benchmark: {CI_NODES} simulated agents, SQLite, the sweep bounded to {CI_SWEEP_S:.0f} s")
    started = time.perf_counter()
    now = call("fleet_ci")
    load = os.getloadavg()
    print(
        f"({time.perf_counter() - started:.0f} s; load average {load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f}; {os.cpu_count()} cores)"
    )
    if "error" in now:  # a benchmark that crashes is a defect, unlike a slow one
        print("the benchmark failed:\n" + str(now["error"]).strip()[-1500:])
    where = provenance("fleet_ci", kept["measured_at"].get("fleet_ci"), kept["measured_commit"].get("fleet_ci"))
    print(f"{'figure':<28} {'this run':>12} {'recorded':>12} {'ratio':>8}   recorded on {where}")
    for key in CI_FIGURES:
        mine, theirs = now.get(key), recorded.get(key)
        print(f"{key:<28} {fmt(mine):>12} {fmt(theirs):>12} {ratio(mine, theirs):>8}")
    print("(a report: timings on a shared or slower machine differ; no timing fails the build, a crash does)")
    return 1 if "error" in now else 0


def add_row(table: str, cells: list[str], when: str | None, commit: str | None) -> int:
    """Append a row to a recorded table and rewrite the page from docs/benchmarks.json."""
    kept = load_figures()
    tables = kept.setdefault("tables", {})
    if table not in tables:
        print(f"no table {table!r} in {FIGURES.relative_to(ROOT)}; tables: {', '.join(sorted(tables))}")
        return 2
    if len(cells) != len(tables[table]["columns"]):
        print(f"{table} has {len(tables[table]['columns'])} columns: {' | '.join(tables[table]['columns'])}")
        return 2
    row = {"cells": cells, "measured": when or time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    row["commit"] = commit or head_commit()
    tables[table]["rows"].append(row)
    FIGURES.write_text(json.dumps(kept, indent=2) + "\n")
    DOC.write_text(render_doc(DOC.read_text(), kept))
    print(f"added a row to {table}; wrote {DOC.relative_to(ROOT)} and {FIGURES.relative_to(ROOT)}")
    return 0


def load_figures() -> dict:
    try:
        kept: dict = json.loads(FIGURES.read_text())
    except (OSError, ValueError):
        kept = {}
    for key in ("figures", "measured_at", "measured_commit"):
        kept.setdefault(key, {})
    return kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    scratch = "postgres:// server URL for scratch databases (default: scratch SQLite)"
    parser.add_argument("--database", default=os.environ.get("BENCH_DATABASE_URL"), help=scratch)
    parser.add_argument("--nodes", type=int, default=1024)
    parser.add_argument("--only", nargs="+", default=None, help="benchmark names to run")
    parser.add_argument("--skip", nargs="+", default=(), help="benchmark names not to run")
    parser.add_argument("--no-doc", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    parser.add_argument(
        "--ci-report",
        action="store_true",
        help="the short fleet run beside its recorded figures (.ci/run); exits 0 whatever the timing, 1 on a crash",
    )
    parser.add_argument(
        "--doc-only", action="store_true", help="rewrite docs/BENCHMARKS.md from docs/benchmarks.json, measure nothing"
    )
    parser.add_argument(
        "--add-row",
        nargs="+",
        metavar=("TABLE", "CELL"),
        help="record a run measured by hand: a row of the named table of docs/benchmarks.json (its cells in the "
        "table's column order), measured now on this commit unless --when/--commit say otherwise; rewrites the page",
    )
    parser.add_argument("--when", default=None, help="with --add-row: when it was measured (YYYY-MM-DD HH:MM, UTC)")
    parser.add_argument("--commit", default=None, help="with --add-row: the commit it was measured on")
    opts = parser.parse_args()
    if opts.ci_report:
        return ci_report()
    if opts.add_row:
        return add_row(opts.add_row[0], opts.add_row[1:], opts.when, opts.commit)
    options: dict[str, Any] = {
        "planner": {"nodes": opts.nodes},
        "ingest_throughput": {"database": opts.database, "nodes": opts.nodes},
        "fleet": {"database": opts.database, "nodes": 256},
        "dashboard_load": {"database": opts.database, "nodes": [64, opts.nodes]},
        "netns_sweep": {"database": opts.database},
        "bandwidth_honesty": {"runs": 5},
        "dead_link": {"database": opts.database},
        "false_alarms": {"database": opts.database},
        # Storage scales with the pairs: 256 nodes measure it; 1,024 would take about 25 minutes.
        "storage": {"database": opts.database, "nodes": 256},
        "coverage": {"busy": (0.5, 0.8, 0.9), "max_nodes": 256, "max_rounds": 20, "compare": False, "max_days": 21},
        # One bed shape a process (Django keeps the first scratch database it set up): figures by shape.
        "topology": [(shape, {"shape": shape, "runs": 5, "database": opts.database}) for shape in ("2x4", "3x3")],
    }
    others = sorted(
        p.stem
        for p in (ROOT / "benchmarks").glob("*.py")
        if p.stem not in (*KNOWN, "run", "scratch", "bed", "__init__") and "def run(" in p.read_text()
    )
    kept = load_figures()
    figures, measured_at = kept["figures"], kept["measured_at"]
    commits = kept.setdefault("measured_commit", {})
    failed = 0
    for name in [*KNOWN, *others]:
        if opts.doc_only or (opts.only and name not in opts.only) or name in opts.skip:
            continue
        print(f"== {name}", flush=True)
        started = time.perf_counter()
        wanted = options.get(name, {})
        result: dict[str, Any]
        if isinstance(wanted, list):  # a process per option set, its figures under its label
            result = {label: isolated(name, each) for label, each in wanted}
            broken = [f"{label}: {r['error']}" for label, r in result.items() if "error" in r]
            result = {"error": "; ".join(broken)} if broken else result
        else:
            result = isolated(name, wanted)
        print(json.dumps(result, indent=2), flush=True)
        print(f"   ({time.perf_counter() - started:.0f} s)", flush=True)
        if "error" in result:
            failed += 1
            # A failed run leaves the last good figures, if any, rather than wiping them.
            if name in figures:
                continue
        commit = head_commit()
        if name == "topology":  # the raw halves of an uplink round stay in the benchmark's own output
            for shape in result.values():
                if isinstance(shape, dict):
                    (shape.get("uplink_sweep") or {}).pop("uplink_pairs", None)
        if name == "fleet":  # runs of other sizes (1,024 nodes, watched) stay, each with its own time
            for run in result.values():
                if isinstance(run, dict):
                    run["commit"] = commit
            result = {**figures.get(name, {}), **result}
        figures[name] = result
        measured_at[name] = time.strftime("%Y-%m-%d %H:%M")
        commits[name] = commit
    if not opts.no_doc:
        kept.update(figures=figures, measured_at=measured_at, measured_commit=commits)
        FIGURES.write_text(json.dumps(kept, indent=2) + "\n")
        write_doc(figures, measured_at, commits, opts.nodes, opts.database)
        print(f"wrote {DOC.relative_to(ROOT)} and {FIGURES.relative_to(ROOT)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Run every benchmark, print the figures and rewrite docs/BENCHMARKS.md.

    .venv/bin/python benchmarks/run.py [--database postgres://postgres@127.0.0.1:5432/postgres]
                                       [--nodes 1024] [--only planner ingest dashboard ...]

Convention: a benchmark is a module ``benchmarks/<name>.py`` with an entry point
``run(**options) -> dict`` returning its figures (plain numbers and strings). The
runner calls the ones below with the options they take; any other module that
defines ``run()`` is called without arguments and its figures are listed as they
come. A target whose benchmark is absent, or fails, is written down as "not
measured in this run", never estimated. Each benchmark makes its own scratch
database (``benchmarks/scratch.py``) and drops it.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DOC = ROOT / "docs" / "BENCHMARKS.md"
KNOWN = ("planner", "ingest_throughput", "dashboard_load")


def planner_run(nodes: int = 1024) -> dict:
    """All rounds of a full sweep over ``nodes`` planned (circle method), best of three."""
    from cluster_health import planner

    names = [f"node{i}" for i in range(nodes)]
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        plan = planner.plan("full", names)
        times.append(time.perf_counter() - t0)
    return {"nodes": nodes, "rounds": len(plan.rounds), "pairs": plan.pair_count, "plan_s": round(min(times), 3)}


def call(name: str, **options) -> dict:
    try:
        if name == "planner":
            return planner_run(**options)
        module = importlib.import_module(f"benchmarks.{name}")
        if not hasattr(module, "run"):
            return {"error": f"benchmarks/{name}.py has no run() entry point"}
        return module.run(**options)
    except Exception:
        return {"error": traceback.format_exc(limit=4)[-2000:]}


def isolated(name: str, options: dict) -> dict:
    """Run one benchmark in its own interpreter: each sets Django up on its own scratch database."""
    code = (f"import json, sys; sys.path.insert(0, {str(ROOT)!r}); from benchmarks.run import call; "
            f"print('\\nFIGURES ' + json.dumps(call({name!r}, **{options!r})))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("FIGURES "):
            return json.loads(line[8:])
    return {"error": f"exit {proc.returncode}: {(proc.stderr or proc.stdout)[-1500:]}"}


def machine() -> str:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor() or "unknown CPU")
    mem = int(next(ln.split()[1] for ln in Path("/proc/meminfo").read_text().splitlines()
                   if ln.startswith("MemTotal"))) / 2**20
    return f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, {platform.system()} {platform.release()}, " \
           f"Python {platform.python_version()}"


def fmt(value, unit="") -> str:
    if value is None:
        return "not measured in this run"
    if isinstance(value, float):
        value = f"{value:,.3g}" if value < 100 else f"{value:,.0f}"
    elif isinstance(value, int):
        value = f"{value:,}"
    return f"{value}{unit}"


def ratio(a, b) -> str:
    return f"{a / b:.1f}x" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else "-"


def targets(fig: dict, nodes: int) -> list[tuple[str, str, str, str, str]]:
    """(target, goal, measured, reference, met) rows; missing figures stay missing."""
    p, i, d = fig.get("planner", {}), fig.get("ingest_throughput", {}), fig.get("dashboard_load", {})
    rows = []

    def row(name, goal, value, unit, ok, reference=""):
        met = "not measured" if value is None else ("yes" if ok(value) else "no")
        rows.append((name, goal, fmt(value, unit), reference, met))

    row(f"planner, {nodes} nodes, all rounds", "< 1 s", p.get("plan_s"), " s", lambda v: v < 1)
    row(f"ingest into {i.get('database', 'PostgreSQL')}, {nodes} nodes ({fmt(i.get('pairs'))} pairs)",
        ">= 2,000 results/s", i.get("results_per_s"), " results/s", lambda v: v >= 2000,
        f"one half per call: {fmt(i.get('single_results_per_s'), '/s')} "
        f"({ratio(i.get('results_per_s'), i.get('single_results_per_s'))} faster)")
    row(f"matrix API, {nodes} nodes", "<= 300 ms", d.get(f"matrix_api_ms_{nodes}"), " ms", lambda v: v <= 300,
        f"built from the rows: {fmt(d.get(f'matrix_build_from_rows_ms_{nodes}'), ' ms')} "
        f"({ratio(d.get(f'matrix_build_from_rows_ms_{nodes}'), d.get(f'matrix_api_ms_{nodes}'))} slower)")
    row(f"overview page drawn, {nodes} nodes", "<= 2 s", d.get(f"overview_to_heatmap_ms_{nodes}"), " ms",
        lambda v: v <= 2000, f"64 nodes: {fmt(d.get('sweep_page_to_heatmap_ms_64_cold'), ' ms')} (sweep page)")
    lossless = d.get("live_state_rereads")
    row("live updates at 500 results/s reach an open page", "no loss",
        None if "live_cells_ok" not in d else f"{d['live_cells_ok']:,} of {d['live_cells_ok']:,} cells, "
        f"{d.get('live_rate_sent_per_s')} results/s sent, last cell {d.get('live_last_result_to_last_cell_ms')} ms "
        f"after the last result, {lossless} state re-read(s)", "", lambda v: lossless is not None and lossless <= 1)
    for name, goal in (("probe overhead per round (warm probe process)", "<= 0.3 s"),
                       ("sweep time on the namespace test bed, N = 2..8", "<= 1.2 x (N-1) x one round"),
                       ("busbw vs iperf3 (unshaped, tbf 100 Mbit/s, 1 Gbit/s)", "within 10%"),
                       ("busbw vs a bare all_reduce loop", "within 5%"),
                       ("dead link turns to a failure", "<= 15 s"),
                       ("agent idle memory / CPU", "<= 80 MB / <= 1% of a core")):
        rows.append((name, goal, "not measured in this run", "", "not measured"))
    return rows


def write_doc(fig: dict, nodes: int, database: str | None, took_s: float) -> None:
    lines = ["# Benchmarks", "",
             "Written by `.venv/bin/python benchmarks/run.py` (" + time.strftime("%Y-%m-%d %H:%M %Z") + f", "
             f"{took_s / 60:.0f} min); run it again to reproduce. Targets are those of the performance and "
             "scale work; where the same run measured a reference, the ratio is beside the figure.", "",
             f"Machine: {machine()}. Database: {'PostgreSQL (scratch database on ' + database.split('@')[-1] + ')' if database else 'SQLite (scratch file)'}.", "",
             "## Targets", "", "| target | goal | measured | reference | met |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {' | '.join(r)} |" for r in targets(fig, nodes)]
    lines += ["", "## Method", "",
              "- **planner**: `planner.plan('full', nodes)` over synthetic names, best of three.",
              "- **ingest_throughput**: synthetic nodes register by heartbeat; a connectivity sweep is requested "
              "and started (every pair row created at start); every command of every round is answered through "
              "`ingest.ingest_results` in batches of 500 halves (what the `server.results` task runs), with "
              "round advances, broadcasts (in-memory channel layer) and the verdict inside the time. The first "
              "8 rounds go one half per call (`ingest_result`, the one-message path) as the reference.",
              "- **dashboard_load**: histories of 64 and N nodes written through the same ingest path into a "
              "scratch database; the matrix API is timed through Django's test client (median of 5), beside "
              "building the matrix from the pair rows; daphne and a private redis-server serve headless "
              "Debian chromium (Playwright): sweep pages and the overview, load to heatmap drawn; then a "
              "running 64-node sweep is ingested at 500 results/s in another thread while its page is open, "
              "and every cell must turn ok from WebSocket frames.",
              "- Targets without a benchmark module here (`run()` in `benchmarks/<name>.py`) are listed as not "
              "measured; they belong to the probe and test bed benchmarks.", "",
              "## All figures", "", "```json", json.dumps(fig, indent=2), "```", ""]
    DOC.write_text("\n".join(lines))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", default=os.environ.get("BENCH_DATABASE_URL"),
                        help="postgres:// server URL for scratch databases (default: scratch SQLite)")
    parser.add_argument("--nodes", type=int, default=1024)
    parser.add_argument("--only", nargs="+", default=None, help="benchmark names to run")
    parser.add_argument("--no-doc", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    opts = parser.parse_args()
    options = {"planner": {"nodes": opts.nodes},
               "ingest_throughput": {"database": opts.database, "nodes": opts.nodes},
               "dashboard_load": {"database": opts.database, "nodes": [64, opts.nodes]}}
    others = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py")
                    if p.stem not in (*KNOWN, "run", "scratch", "__init__") and "def run(" in p.read_text())
    started = time.perf_counter()
    figures = {}
    for name in [*KNOWN, *others]:
        if opts.only and name not in opts.only:
            continue
        print(f"== {name}", flush=True)
        figures[name] = isolated(name, options.get(name, {}))
        print(json.dumps(figures[name], indent=2), flush=True)
    if not opts.no_doc:
        write_doc(figures, opts.nodes, opts.database, time.perf_counter() - started)
        print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Dashboard at scale: page load to heatmap drawn, matrix API time, and live updates under load.

Runs the real ASGI server (daphne) and a private redis-server against a scratch
database, and drives Debian's headless chromium with Playwright:

    .venv/bin/python benchmarks/dashboard_load.py [--nodes 64 1024] [--database postgres://...]

The sweeps' histories are written through the real ingest path (the batches of
``benchmarks/ingest_throughput.py``), so the matrix a closed sweep stores as it
finishes is the one served. Figures:

- overview ``/`` and sweep page: load -> heatmap drawn, for each sweep size, first
  visit ("cold") and again ("warm");
- ``GET /api/sweeps/<id>/matrix``, beside the reference of building the same
  matrix from the pair rows;
- live: an open page of a running 64-node sweep while its results are ingested at
  ``--rate`` halves/s with broadcasts over Redis; every cell must turn ok from
  WebSocket frames alone (no state re-read), and the time from the last result to
  the last cell is reported;
- groups: a topology sweep over ``--group-nodes`` nodes (64 racks, every pair inside
  each rack and one between every two racks, every half through ingest): the group
  matrix API and a drill-down into one rack pair, and in the browser the overview and
  the sweep page to the group matrix drawn, and a click on a cell to its nodes drawn.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cluster_health import vocabulary  # noqa: E402
from devtools import devstack  # noqa: E402
from devtools.captured import by_probe, take_probe_commands  # noqa: E402

PASSWORD = "bench-password-123"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--database", default=None, help="postgres:// server URL (default: scratch SQLite)")
    parser.add_argument("--rate", type=int, default=500, help="live results per second")
    parser.add_argument("--group-nodes", type=int, default=4096, help="nodes of the topology sweep (0: none)")
    opts = parser.parse_args()
    print(json.dumps(run(opts.database, opts.nodes, opts.rate, opts.group_nodes), indent=2))
    return 0


def run(database: str | None = None, nodes=(64, 1024), rate: int = 500, group_nodes: int = 4096) -> dict:
    """Runner entry point: a scratch database, histories through ingest, then the browser figures."""
    from benchmarks.scratch import scratch_database

    with scratch_database(database):
        from django.conf import settings

        if 0 < group_nodes <= settings.NODE_MATRIX_MAX_NODES:  # its pages would draw the node matrix instead
            raise SystemExit(
                f"dashboard_load: --group-nodes {group_nodes}: the group matrix is drawn only past "
                f"CLUSTER_HEALTH_NODE_MATRIX_MAX_NODES ({settings.NODE_MATRIX_MAX_NODES}); give more, or 0 for none"
            )
        from benchmarks.ingest_throughput import measure as ingest_sweep

        sweeps = {n: ingest_sweep(n, 500, reference_rounds=0)["sweep_id"] for n in sorted(nodes)}
        grouped = topology_sweep(group_nodes) if group_nodes else None
        return measure(sweeps, rate, grouped)


RACK_SIZE = 64  # nodes per rack of the topology sweep: 4,096 nodes are 64 racks of 64


def topology_sweep(n: int) -> dict:
    """A finished topology sweep over ``n`` synthetic nodes in racks, every half through ingest."""
    from datetime import timedelta

    from django.conf import settings
    from django.utils import timezone

    from benchmarks.ingest_throughput import _answer_rounds
    from cluster_health import sweeps, tasks
    from cluster_health.models import Node, PairProbe, Sweep
    from cluster_health.queues import dispatch

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    settings.NODE_ONLINE_AFTER_S = 24 * 3600
    names = [f"r{k // RACK_SIZE:02d}-n{k % RACK_SIZE:02d}" for k in range(n)]
    now = timezone.now()
    Node.objects.bulk_create(
        Node(name=name, address=f"10.{k // 250}.{k % 250}.2", last_heartbeat=now, agent_version="bench")
        for k, name in enumerate(names)
    )
    t0 = time.perf_counter()
    # A request names at most 1,024 nodes (a collective's world size): this sweep takes the whole
    # fleet instead, as the nightly one does, with the other sweeps' nodes out of it meanwhile.
    others = list(Node.objects.exclude(name__in=names).filter(active=True).values_list("pk", flat=True))
    Node.objects.filter(pk__in=others).update(active=False)
    closed_tasks: list = []
    try:
        with dispatch.capture() as sent:
            sweep = sweeps.request_sweep(source="command", kind="topology")
            sweeps.start_sweep(sweep.pk)
            _answer_rounds(sent, 500, 0, closed_tasks)
    finally:
        Node.objects.filter(pk__in=others).update(active=True)
    # What the server worker runs as the sweep closes, before anyone opens it: the pair table's statistics.
    analyzed_s = sum(tasks.analyze_pairs() for task, _ in closed_tasks if task == vocabulary.TASK_ANALYZE_PAIRS)
    # Not the newest until its own figures: the overview figures before them follow another sweep.
    Sweep.objects.filter(pk=sweep.pk).update(created=timezone.now() - timedelta(days=1))
    sweep = Sweep.objects.get(pk=sweep.pk)
    racks = -(-n // RACK_SIZE)
    return {
        "sweep_id": sweep.pk,
        "drill": [min(3, racks - 1), 2 * racks // 3],  # the racks whose cell is clicked
        "nodes": n,
        "groups": racks,
        "pairs": PairProbe.objects.filter(sweep=sweep).count(),
        "rounds": sweep.total_rounds,
        "status": sweep.status,
        "ingest_s": round(time.perf_counter() - t0, 1),
        "analyze_s": round(analyzed_s, 2),
    }


def measure(sweeps: dict[int, int], rate: int = 500, grouped: dict | None = None) -> dict:
    """Figures for finished sweeps ``{nodes: sweep id}`` already in the current database."""
    work = Path(tempfile.mkdtemp(prefix="ch-bench-web-"))
    redis_port, web_port = devstack.free_port(), devstack.free_port()
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    os.environ.update(REDIS_URL=redis_url, DJANGO_ALLOW_ASYNC_UNSAFE="true")
    env = devstack.python_env(
        DJANGO_SETTINGS_MODULE="cluster_health.settings",
        REDIS_URL=redis_url,
        DATABASE_URL=os.environ["DATABASE_URL"],
        CLUSTER_HEALTH_VAR_DIR=os.environ.get("CLUSTER_HEALTH_VAR_DIR", str(work)),
    )
    sup = devstack.Supervisor(work / "logs", env)
    out: dict = {}
    try:
        proc = sup.start("redis", devstack.redis_args(redis_port, work))
        devstack.wait_for_port("127.0.0.1", redis_port, 10, proc)
        from channels.layers import channel_layers
        from django.conf import settings
        from django.contrib.auth.models import User

        settings.CHANNEL_LAYERS = {
            "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [redis_url]}}
        }
        # Writing the histories made (and cached) an in-memory layer: broadcasts must reach daphne.
        channel_layers.backends.clear()
        User.objects.create_user("bench", password=PASSWORD)
        out.update(api_figures(sweeps))
        if grouped:
            out.update({f"groups_{k}": v for k, v in grouped.items() if k not in ("sweep_id", "drill")})
            out.update(group_api_figures(grouped["sweep_id"], grouped["drill"]))
        proc = sup.start("web", devstack.web_args("127.0.0.1", web_port))
        devstack.wait_for_port("127.0.0.1", web_port, 60, proc)
        out.update(browser_figures(f"http://127.0.0.1:{web_port}", sweeps, rate, grouped))
        if grouped:  # last: they change the table every figure above was read from
            out.update(drill_down_after_maintenance(grouped["sweep_id"], grouped["drill"]))
    finally:
        sup.stop_all()
    return out


def api_figures(sweeps: dict[int, int]) -> dict:
    from django.test import Client

    from cluster_health.models import Sweep
    from cluster_health.shapes import matrices

    client = Client()
    client.login(username="bench", password=PASSWORD)
    out = {}
    for n, pk in sweeps.items():
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            body = client.get(f"/api/sweeps/{pk}/matrix").content
            times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        matrices.sweep_matrix_arrays(Sweep.objects.get(pk=pk)).payload()
        out[f"matrix_api_ms_{n}"] = round(sorted(times)[len(times) // 2] * 1000)
        out[f"matrix_build_from_rows_ms_{n}"] = round((time.perf_counter() - t0) * 1000)
        out[f"matrix_api_bytes_{n}"] = len(body)
    return out


def _median_ms(client, url: str, times: int = 5) -> tuple[int, int]:
    """The median time of GET ``url`` (after one first read, not counted) and its size in bytes."""
    first = client.get(url)
    assert first.status_code == 200, first.content[:300]
    spent = []
    for _ in range(times):
        t0 = time.perf_counter()
        body = client.get(url).content
        spent.append(time.perf_counter() - t0)
    return round(sorted(spent)[len(spent) // 2] * 1000), len(body)


def rack(g: int) -> str:
    return f"r{g:02d}"


def group_api_figures(pk: int, drill: list[int]) -> dict:
    """The group matrix API of a closed sweep (stored as it closed), and a drill-down into two racks."""
    from django.test import Client

    from cluster_health.models import Sweep
    from cluster_health.shapes import matrices

    client = Client()
    client.login(username="bench", password=PASSWORD)
    out = {}
    out["groups_api_ms"], out["groups_api_bytes"] = _median_ms(client, f"/api/sweeps/{pk}/groups")
    wanted = [rack(g) for g in drill]
    url = f"/api/sweeps/{pk}/matrix?" + "&".join(f"group={g}" for g in wanted)
    out["drill_down_api_ms"], out["drill_down_api_bytes"] = _median_ms(client, url)
    sweep = Sweep.objects.get(pk=pk)
    # The reference: the drill-down's own work (database and encoding), without the request around it.
    out["drill_down_build_ms"] = _drill_down_build_ms(sweep, wanted)
    # The reference: the same group matrix built again from the sweep's stored node matrix.
    t0 = time.perf_counter()
    matrices.build_group_text(sweep, matrices.sweep_matrix_arrays(sweep))
    out["groups_build_from_rows_ms"] = round((time.perf_counter() - t0) * 1000)
    out["state_ms"], out["state_bytes"] = _median_ms(client, f"/sweeps/{pk}/state.json", times=3)
    # The overview's node table, which its page reads again every NODE_POLL_MS.
    out["nodes_json_ms"], out["nodes_json_bytes"] = _median_ms(client, "/nodes.json")
    return out


def drill_down_after_maintenance(pk: int, drill: list[int]) -> dict:
    """References for the drill-down of a sweep just ingested: its own work again once the pair table's
    statistics are fresh (ANALYZE), then once its dead row versions are gone too (VACUUM), on PostgreSQL."""
    from django.db import connection

    from cluster_health.models import PairProbe, Sweep
    from cluster_health.sweeps import statistics

    if connection.vendor != "postgresql":
        return {}
    sweep, wanted = Sweep.objects.get(pk=pk), [rack(g) for g in drill]
    statistics.analyze_pairs()  # again: what the worker ran as the sweep closed
    out = {"drill_down_build_after_analyze_ms": _drill_down_build_ms(sweep, wanted)}
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM {connection.ops.quote_name(PairProbe._meta.db_table)}")
    out["drill_down_build_after_vacuum_ms"] = _drill_down_build_ms(sweep, wanted)
    return out


def _drill_down_build_ms(sweep, wanted: list[str], times: int = 3) -> int:
    """The median time of the drill-down's own work into groups ``wanted`` of ``sweep``."""
    from cluster_health.shapes import matrices

    spent = []
    for _ in range(times):
        t0 = time.perf_counter()
        matrices.drill_down_text(sweep, wanted)
        spent.append(time.perf_counter() - t0)
    return round(sorted(spent)[len(spent) // 2] * 1000)


def group_browser_figures(page, base: str, pk: int, drill: list[int]) -> dict:
    """The overview and the sweep page of the topology sweep, to its group matrix drawn; a click to its nodes."""
    from django.utils import timezone

    from cluster_health.models import Sweep

    Sweep.objects.filter(pk=pk).update(created=timezone.now())  # the newest: the overview follows it
    out = {}
    loaded = (
        f"() => document.body.dataset.loaded === '{pk}' && document.getElementById('groups').dataset.loaded === '{pk}'"
    )
    page.goto(f"{base}/", timeout=120_000)
    page.wait_for_function(loaded, timeout=120_000)
    out["groups_overview_to_drawn_ms"] = round(page.evaluate("CH.firstDrawMs"))
    out["groups_overview_nodes_listed"] = page.locator("#nodes-table tbody tr").count()
    for attempt in ("cold", "warm"):
        page.goto(f"{base}/sweeps/{pk}/", timeout=120_000)
        page.wait_for_function(loaded, timeout=120_000)
        out[f"groups_sweep_page_to_drawn_ms_{attempt}"] = round(page.evaluate("CH.firstDrawMs"))
    groups = page.evaluate("CH.groups.names.length")
    box = page.locator("#groups [data-groups-plot] .nsewdrag").bounding_box()
    g, h = drill
    t0 = time.perf_counter()
    page.mouse.click(box["x"] + box["width"] * (h + 0.5) / groups, box["y"] + box["height"] * (g + 0.5) / groups)
    page.wait_for_function(
        f"() => document.getElementById('groups').dataset.drilled === '{rack(g)} {rack(h)}'", timeout=60_000
    )
    out["groups_click_to_drill_down_drawn_ms"] = round((time.perf_counter() - t0) * 1000)
    out["groups_drill_down_nodes"] = page.evaluate("CH.groups.drillMatrix.nodes.length")
    return out


def browser_figures(base: str, sweeps: dict[int, int], rate: int, grouped: dict | None = None) -> dict:
    from playwright.sync_api import sync_playwright

    from devtools.browser import ARGS, CHROMIUM

    out = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        page.goto(base + "/accounts/login/")
        page.fill("#id_username", "bench")
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(base + "/")
        for n, pk in sweeps.items():
            for attempt in ("cold", "warm"):
                page.goto(f"{base}/sweeps/{pk}/", timeout=120_000)
                page.wait_for_function(f"() => document.body.dataset.loaded === '{pk}'", timeout=120_000)
                out[f"sweep_page_to_heatmap_ms_{n}_{attempt}"] = round(page.evaluate("CH.firstDrawMs"))
                out[f"state_fetch_ms_{n}_{attempt}"] = round(page.evaluate("CH.fetchMs"))
        newest = max(sweeps.values())
        biggest = max(sweeps)
        page.goto(f"{base}/", timeout=120_000)
        page.wait_for_function(f"() => document.body.dataset.loaded === '{newest}'", timeout=120_000)
        out[f"overview_to_heatmap_ms_{biggest}"] = round(page.evaluate("CH.firstDrawMs"))
        out.update(live_figures(page, base, rate))
        if grouped:
            out.update(group_browser_figures(page, base, grouped["sweep_id"], grouped["drill"]))
        browser.close()
    return out


def feed_live_results(sent: list, names: list[str], rate: int) -> tuple[int, float]:
    """Answer every captured probe command through ingest at ``rate`` halves/s; return the count and seconds taken."""
    from django.utils import timezone

    from cluster_health import ingest
    from cluster_health.models import Node
    from devtools.sweep_driver import result_for

    tick_batch = max(1, round(rate * 0.1))  # ten batches a second, as a busy server worker takes them
    results, t_start = 0, time.perf_counter()
    while True:
        commands = take_probe_commands(sent)
        if not commands:
            return results, time.perf_counter() - t_start
        Node.objects.filter(name__in=names).update(last_heartbeat=timezone.now())
        for k in range(0, len(commands), tick_batch):
            ingest.ingest_results([result_for(c) for c in commands[k : k + tick_batch]])
            results += len(commands[k : k + tick_batch])
            ahead = t_start + results / rate - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)


def wait_for_live_cells(page, pairs: int) -> tuple[int, float]:
    """Wait up to 60 s for all ``pairs`` cells to show ok; return the cells ok and when the wait ended (ms)."""
    check = (
        "(() => { const m = CH.matrix; let ok = 0; for (const s of m.status) if (m.codes[s] === 'ok') ok++; "
        "return ok; })()"
    )
    try:
        page.wait_for_function(f"() => {check} === {pairs}", timeout=60_000)
    except Exception:  # reported below as fewer cells than pairs, never hidden
        pass
    drawn = time.time() * 1000
    return page.evaluate(check), drawn


def live_figures(page, base: str, rate: int, n: int = 64) -> dict:
    """Ingest a running sweep's results at ``rate`` halves/s while its page is open."""
    from cluster_health import sweeps
    from cluster_health.queues import dispatch
    from devtools.sweep_driver import heartbeat

    names = [f"live{i:03d}" for i in range(n)]
    for name in names:
        heartbeat(name)
    with dispatch.capture() as sent, ThreadPoolExecutor(1) as server_side:
        # Playwright's loop owns this thread; whatever broadcasts runs in another, as in the server worker.
        sweep = server_side.submit(sweeps.request_sweep, source="command", kind="connectivity", nodes=names).result()
        server_side.submit(sweeps.start_sweep, sweep.pk).result()
        page.goto(f"{base}/sweeps/{sweep.pk}/")
        page.wait_for_function(
            f"() => document.body.dataset.loaded === '{sweep.pk}' && document.body.dataset.ws === 'open'"
        )
        reads = []
        page.on("request", lambda r: reads.append(r.url) if "state.json" in r.url else None)
        results, sent_s = server_side.submit(feed_live_results, sent, names, rate).result()
    last_sent = time.time() * 1000
    pairs = n * (n - 1) // 2
    cells_ok, drawn = wait_for_live_cells(page, pairs)
    # A page that re-read state.json after the sweep ended only did so to show the findings;
    # a re-read while results flowed would mean a frame was lost.
    out = {
        "live_results": results,
        "live_rate_sent_per_s": round(results / sent_s),
        "live_rate_target_per_s": rate,
        "live_cells_ok": cells_ok,
        "live_cells_total": pairs,
        "live_state_rereads": max(0, len(reads) - 1),
        "live_last_result_to_last_cell_ms": round(drawn - last_sent),
    }
    # The live sweep is now the newest, finished, 64-node sweep: the overview at 64 nodes.
    page.goto(f"{base}/")
    page.wait_for_function(f"() => document.body.dataset.loaded === '{sweep.pk}'", timeout=60_000)
    out[f"overview_to_heatmap_ms_{n}"] = round(page.evaluate("CH.firstDrawMs"))
    out.update(result_to_cell(page, base, names))
    return out


def result_to_cell(page, base: str, names: list[str], samples: int = 20) -> dict:
    """Time from a result's arrival at ingest to its cell drawn changed in the browser, one pair at a time.

    Each sample is one pair's two halves handed to ``ingest.ingest_results`` (what the
    server worker's task runs) on a quiet page; the end is the redraw that shows it
    (``#heatmaps[data-updated-at]``, set when plotly has drawn). Includes the commit, the
    broadcast over Redis, the consumer's batching window, the WebSocket and the redraw.
    """
    from django.utils import timezone

    from cluster_health import ingest, sweeps
    from cluster_health.models import Node
    from cluster_health.queues import dispatch
    from devtools.sweep_driver import result_for

    Node.objects.filter(name__in=names).update(last_heartbeat=timezone.now())
    with dispatch.capture() as sent, ThreadPoolExecutor(1) as server_side:
        sweep = server_side.submit(sweeps.request_sweep, source="command", kind="connectivity", nodes=names).result()
        server_side.submit(sweeps.start_sweep, sweep.pk).result()
        pairs = by_probe(take_probe_commands(sent))
        page.goto(f"{base}/sweeps/{sweep.pk}/")
        page.wait_for_function(f"() => document.body.dataset.loaded === '{sweep.pk}' && CH.wsState === 'open'")
        times = []
        for commands in list(pairs.values())[:samples]:
            a, b = commands[0]["node"], commands[1]["node"]
            time.sleep(0.4)  # a quiet page: no batching window or redraw still open from the last sample
            arrived = time.time() * 1000
            server_side.submit(ingest.ingest_results, [result_for(c) for c in commands]).result()
            page.wait_for_function(
                f"() => CH.matrix.statusOf('{a}', '{b}') === 'ok' && "
                f"Number(document.getElementById('heatmaps').dataset.updatedAt || 0) >= {arrived}",
                timeout=30_000,
            )
            times.append(float(page.evaluate("document.getElementById('heatmaps').dataset.updatedAt")) - arrived)
        server_side.submit(sweeps.cancel, sweep.pk).result()
    times.sort()
    return {
        "result_to_cell_ms_p50": round(times[len(times) // 2]),
        "result_to_cell_ms_p95": round(times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]),
        "result_to_cell_ms_max": round(times[-1]),
        "result_to_cell_samples": len(times),
    }


if __name__ == "__main__":
    sys.exit(main())

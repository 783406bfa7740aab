"""Time from page load to heatmap drawn (64 and 1,024 nodes) and from a result's broadcast to its cell changing.

Runs the real ASGI server (daphne) and a private redis-server against a scratch
SQLite database, and drives Debian's headless chromium with Playwright:

    .venv/bin/python benchmarks/dashboard_load.py [--nodes 64 1024] [--updates 10]

The finished sweeps are written in bulk (523,776 pair rows for 1,024 nodes);
the live updates are channel-layer messages of the shape the control plane
sends after each commit, so the figure covers consumer batching, the WebSocket
and the redraw.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cluster_health import devstack  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--updates", type=int, default=10)
    opts = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ch-bench-"))
    redis_port, web_port = devstack.free_port(), devstack.free_port()
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    os.environ.update(DJANGO_SETTINGS_MODULE="cluster_health.settings", CLUSTER_HEALTH_VAR_DIR=str(work),
                      REDIS_URL=redis_url, DJANGO_ALLOW_ASYNC_UNSAFE="true")
    env = devstack.python_env(DJANGO_SETTINGS_MODULE="cluster_health.settings", CLUSTER_HEALTH_VAR_DIR=str(work),
                              REDIS_URL=redis_url)
    sup = devstack.Supervisor(work / "logs", env)
    try:
        proc = sup.start("redis", devstack.redis_args(redis_port, work))
        devstack.wait_for_port("127.0.0.1", redis_port, 10, proc)
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        sweeps = {n: make_sweep(n, status="finished") for n in opts.nodes}
        live = make_sweep(64, status="running")
        user_password = make_user()
        proc = sup.start("web", devstack.web_args("127.0.0.1", web_port))
        devstack.wait_for_port("127.0.0.1", web_port, 60, proc)
        base = f"http://127.0.0.1:{web_port}"
        results = measure(base, user_password, sweeps, live, opts.updates)
        print(json.dumps(results, indent=2))
    finally:
        sup.stop_all()
    return 0


def make_user() -> str:
    from django.contrib.auth.models import User

    User.objects.create_user("bench", password="bench-password-123")
    return "bench-password-123"


def make_sweep(n: int, status: str):
    from django.utils import timezone

    from cluster_health.models import Node, PairProbe, Sweep

    names = [f"bench{n}-{i}" for i in range(n)]
    now = timezone.now()
    Node.objects.bulk_create([Node(name=nm, address=f"10.{i // 250}.{i % 250}.1", last_heartbeat=now)
                              for i, nm in enumerate(names)], ignore_conflicts=True)
    ids = dict(Node.objects.filter(name__in=names).values_list("name", "id"))
    sweep = Sweep.objects.create(kind="full", nodes=names, status=status, verdict="pass" if status == "finished"
                                 else "unknown", started=now, finished=now if status == "finished" else None,
                                 total_rounds=n - 1, current_round=1)
    batch = []
    for i in range(n):
        for j in range(i + 1, n):
            if status == "finished":
                fields = {"status": "ok", "stage": "bandwidth", "busbw_gbps": 10 + (i * 7 + j) % 13,
                          "latency_us_p50": 100 + (i + j) % 50}
                if (i * 31 + j) % 997 == 0:
                    fields = {"status": "timeout", "stage": "connect", "reason": "connect_timeout",
                              "hint": f"{names[i]} cannot reach {names[j]}: firewall?"}
            else:
                fields = {"status": "pending"}
            batch.append(PairProbe(sweep=sweep, round=1, node_a_id=ids[names[i]], node_b_id=ids[names[j]], **fields))
            if len(batch) >= 20000:
                PairProbe.objects.bulk_create(batch)
                batch = []
    PairProbe.objects.bulk_create(batch)
    return sweep


def measure(base, password, sweeps, live, updates) -> dict:
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer
    from playwright.sync_api import sync_playwright

    args = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"]
    out = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=args)
        page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        page.goto(base + "/accounts/login/")
        page.fill("#id_username", "bench")
        page.fill("#id_password", password)
        page.click("button[type=submit]")
        page.wait_for_url(base + "/")
        for n, sweep in sweeps.items():
            for attempt in ("cold", "warm"):  # cold: the server builds the payload; warm: cached
                page.goto(f"{base}/sweeps/{sweep.pk}/", timeout=120_000)
                page.wait_for_function(f"document.body.dataset.loaded === '{sweep.pk}'", timeout=120_000)
                out[f"load_to_heatmap_ms_{n}_{attempt}"] = round(page.evaluate("CH.firstDrawMs"))
                out[f"state_fetch_ms_{n}_{attempt}"] = round(page.evaluate("CH.fetchMs"))
            out[f"payload_bytes_{n}"] = len(page.evaluate(f"fetch('/sweeps/{sweep.pk}/state.json').then(r => r.text())"))
        page.goto(f"{base}/sweeps/{live.pk}/")
        page.wait_for_function(f"document.body.dataset.loaded === '{live.pk}' && document.body.dataset.ws === 'open'")
        layer = get_channel_layer()
        pool = ThreadPoolExecutor(1)
        names = live.nodes
        lat = []
        for k in range(updates):
            a, b = names[0], names[k + 1]
            sent = time.time() * 1000
            # Playwright's loop owns this thread: send from another one, as ingest does from its worker.
            pool.submit(async_to_sync(layer.group_send), f"sweep.{live.pk}", {
                "type": "sweep.update", "sweep": live.pk, "status": "running", "verdict": "unknown",
                "pairs": [{"a": a, "b": b, "status": "ok", "busbw_gbps": 12.0, "latency_us": 120.0}]}).result()
            page.wait_for_function(f"CH.matrix.statusOf('{a}', '{b}') === 'ok' && Number(document.getElementById('heatmaps').dataset.updatedAt) >= {sent}")
            lat.append(float(page.evaluate("document.getElementById('heatmaps').dataset.updatedAt")) - sent)
            time.sleep(0.3)
        out["result_to_cell_ms_median"] = round(statistics.median(lat))
        out["result_to_cell_ms_max"] = round(max(lat))
        browser.close()
    return out


if __name__ == "__main__":
    sys.exit(main())

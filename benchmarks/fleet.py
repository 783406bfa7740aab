"""Fleet simulator: N agents on their real queues against the real server stack, one sweep end to end.

The server side is what a deployment runs, started with the command lines of
``devtools/devstack.py``: a private redis-server, daphne, K Celery server workers
(``-Q server``, each with its ingest consumer process) and celery beat, on the given
database. This one process plays N
agents: it takes the probe commands off the N queues ``agent.<node>`` as they are
stored by Celery's Redis transport, answers each after ``--probe-s`` seconds with a
half that holds what a real half holds (``--halves real``, the default: both halves
of one real Gloo probe run on loopback with the agent's own code before the sweep,
versions, stage times, evidence and all, with each command's probe, node and rank put
in; ``--halves synthetic``: the contract's minimal half, as figures before 2026-11-23
were taken), one ``server.result`` message per
half on its node's own ingest list ``server.ingest.<node>``, the text Celery writes for it as
the agents send it (``dispatch.task_message``, pushed in one pipeline a turn), and sends every
node's heartbeat (on the same list) every ``--heartbeat-s``. Every node is enrolled with a key of its own, and every
heartbeat and half is signed with it, as agents sign them: the server checks
each signature (and refuses unsigned messages) as it does in production. Then it requests one sweep and reads the rows it wrote.

Both ranks of a probe answer together, as a real collective ends on both ranks at once: a probe's
second command is due when its first was taken, and due answers go out by probe. Until 2026-11-28
(rows measured at or before ``f836177``) answers went out in the order the nodes' queues were read, so a
pair's two halves were up to a whole round's answers apart and often fell into two of the consumer's
batches (one claimed, then closed by the other: two writes of the row where a real fleet mostly
needs one). At 1,024 nodes the difference is within the runs' spread (the first 100 rounds: 0.52 s a
round that way, 0.50 s this way, 2.9 and 2.7 consumer batches a round; docs/BENCHMARKS.md).

A round's wall time is from the first probe of the round started by the server to
the first probe of the next (the last round: to its last probe closed); the
overhead per round is that minus the simulated probe time, so it holds dispatch,
both halves' messages, ingest and the advance. The simulator's own time (decoding
commands, sending halves) is measured beside it (``simulator_s_per_round``): on a
real fleet that work is spread over N machines.

    .venv/bin/python benchmarks/fleet.py --nodes 256 \
        --database postgres://postgres@127.0.0.1:5432/fleet --json [--workers 2] [--consumers 2] [--probe-s 0]

``--consumers N`` runs N ingest consumers: each server worker's own, and standalone ones
(``manage.py ingest_consumer``) for the rest, as an operator adds them (docs/OPERATIONS.md).

``--database`` is used as given (migrated first); without it, a scratch SQLite file. With
``--scratch`` it names a PostgreSQL server, and the run gets a database of its own there,
copied from a migrated template (``benchmarks/scratch.py``) and dropped afterwards.

Setup is timed apart from the sweep: each step (the scratch database, the server stack, the
real probe whose halves are the template, the nodes' keys, every simulated agent online) is
printed on stderr as it ends, with the load average, and the figures hold ``setup_s`` and
``setup_steps_s`` beside the sweep's own ``sweep_s`` (its row's started to finished),
``start_to_first_round_s`` (the sweep's pair rows made before the first command went out)
and ``load_average`` (at the sweep's start and end). A run stopped from outside (Ctrl-C, a
time limit's SIGTERM) mid-sweep still prints its figures so far.

What limits it on a 2-core machine (py-spy during 256-node sweeps on PostgreSQL). Agents'
halves and heartbeats no longer cost a Celery task each: each server worker's ingest consumer
takes them off queue ``server.ingest`` in batches, and its drainer applies a batch across every
shard in one transaction (one broadcast and one advance per sweep and batch). The figures went
from about 4.9 s per round (one worker, a new database connection per message) to 1.66 s
(connections kept), 0.80 s (the consumer, one transaction per shard) and 0.49 s (one
transaction per batch), those with minimal synthetic halves. A real half holds about 1.6 KB of
JSON (versions, stage times, evidence) that the consumer checks and the drainer stores.

The simulator reports the CPU seconds each part of the stack spends a round
(``cpu_s_per_round``, read from /proc before and after the sweep: this process, the processes
it started by role, and the machine's PostgreSQL). Rounds are a barrier (a round starts only
when every pair of the round before is final), so a round is a relay: the consumer publishes
N commands, the simulator answers them, and the consumer checks, writes and closes N halves
and advances; on two cores no round can take less than half the CPU seconds it costs, however
the work overlaps.

At 256 nodes (PostgreSQL, real halves, through the runner), every one of the 32,640 pairs ok in
each run: on 2026-11-24 05:13, one worker 0.134 s a round (p95 0.20), two workers 0.135 s (p95
0.21); a round cost about 0.18 CPU-seconds (the consumer 0.10 s, PostgreSQL 0.04 s, the
simulator 0.03 s). At 02:31 the same day, on a slower machine: one worker 0.22 s (p95 0.27), two
0.234 s (p95 0.29). Machines differ from session to session: the code behind the 2026-11-23 figures (0.51 s a round
there) took 0.294 s and 0.312 s on this session's machine before the changes below, and the code
after them 0.217 to 0.252 s in nine one-worker runs on it; about a fifth is what the changes bought, the rest
was the machine. What changed (py-spy, and PostgreSQL's statement log, of 256-node sweeps):

- the consumer applies a checked batch itself, under the locks of the buffer shards its halves
  belong to, where it had handed the batch to the buffer and taken it back (13% of its time:
  JSON out and back, and the buffer's scripts); the buffer is used when a drainer holds a shard;
- a batch that leaves its round open skips the advance (a transaction that read the sweep's row),
  and the round's last batch sends the next round's commands before the browsers are told;
- the consumer holds its browser updates while messages keep coming and sends one per sweep
  once none waits (at most 0.25 s later);
- a round's dispatch reads only the fields it uses (not every node's facts), and reads the
  backlog only for nodes that look silent;
- the pair table lost two indexes that others already served, and keeps 30% room in its pages
  (PostgreSQL) so that a row's sent mark and its halves are heap-only updates: 37,000 of 130,000
  updates in a 256-node sweep, where there were 5,000; PostgreSQL's CPU a round went from 0.077 s
  to 0.070 s on a fresh database and from 0.123 s to 0.082 s on one holding a sweep already; the
  database grows about 10% more for the room (174 MiB for the sweep, from 155);
- the simulator answers due commands before scanning its N queues again (it scanned all N after
  every 32 halves), and copies its template halves where it parsed them each time.

A round now costs about 0.3 CPU-seconds: the consumer 0.15 s, PostgreSQL 0.07 s, the simulator
0.05 s (on a real fleet that work is spread over N machines), Redis 0.01 s. PostgreSQL's own
timestamps give the round's relay (medians, before the browser updates were held, py-spy
attached): the dispatch to its commands sent 59 ms, then 77 ms to the first pair closed, 77 ms
to the last, and 53 ms from the last close to the next dispatch. PostgreSQL's time goes to the
updates that store halves and close pairs (about 46 ms a round of its 82 ms in that run), the
commits (8 ms) and the dispatch and sent marks (12 ms).

At 1,024 nodes with one worker (2026-11-24 05:25): the full sweep, 1,023 rounds, every one of
the 523,776 pairs ok, in 658 s (11.0 min, against the 10-minute target), 0.592 s a round (p95
0.80 s, against 0.5 s), 1,592 halves a second. A round costs about 0.80 CPU-seconds: the
consumer 0.41 s, PostgreSQL 0.21 s, the simulator 0.13 s, the worker 0.03 s (the reaper, which
also brings the open sweep's matrix snapshot forward), Redis 0.03 s; two cores cannot do it in
less than about 0.40 s, and the relay (consumer, then agents, then consumer and PostgreSQL)
keeps it from overlapping fully. Redis grew 34.6 MiB at its peak and the database 2,207 MiB
over the sweep (about 4.4 KB a pair, its raw halves included, before retention prunes them).
Two workers, stopped at 240 s: 0.575 s a round (368 rounds, p95 0.68 s): on two cores a second
worker brings its consumer's fixed costs as well as its share of the work. At 03:09 the same day,
on the slower machine of the 256-node figures above, the full sweep took 996 s (0.871 s a round,
1.24 CPU-seconds), and two workers 0.925 s a round.
On 2026-11-23, before this session's changes and on that day's slower machine, the full sweep
took 2,557 s with two workers (2.39 s a round).

This machine's PostgreSQL runs with ``autovacuum = off`` (its ``conf.d/90-ci.conf``). An
earlier 1,024-node run (two workers, stopped by hand at round 671 of 1,023 after 30 min) went
from 2.2 s a round for its first 200 rounds to 3.2-3.45 s by rounds 400-580, with 1.25
million dead row versions in the pair table (a pair row is rewritten three or four times:
running, sent, its halves, closed); a ``VACUUM`` by hand at round 588 took 7.8 s and brought
rounds back to 2.4-2.5 s. The reaper now vacuums the pair table itself once it holds
``CLUSTER_HEALTH_VACUUM_AFTER_DEAD_PAIRS`` (100,000) dead versions (cluster_health/sweeps/statistics.py):
in the full sweep above it did so about every two minutes, and rounds stayed at 2.4 s from
the first hundred to the last (about 25 rounds a minute throughout).

``--watch`` adds an operator watching while the sweep is ingested: every 5 s the running
sweep's matrix API, and the overview in headless Chromium to its heatmap drawn
(``while_ingested``). At 1,024 nodes with one worker (2026-11-24 05:10, 477 rounds in 360 s, 60
looks): the matrix API p50 98 ms, p95 179 ms (the slowest, 1.9 s, the first read, which took the
snapshot), and the overview p50 0.87 s, p95 1.07 s, against 300 ms and 2 s; rounds meanwhile
took 0.666 s. Each web process now reads over its own last read of the sweep, held in memory,
and writes the matrix text without json.dumps scanning its 6 MB; the code before that (the
stored snapshot read and decoded on every read), run the same way on the same machine minutes
later: the matrix API p50 156 ms, p95 249 ms, the overview 0.88 s and 1.03 s. At 02:47, on the
slower machine, that code gave p50 231 ms and p95 372 ms, the overview 1.25 s and 1.5 s. Before
the snapshot (cluster_health/shapes/matrices.py), every read built the matrix from all of its 523,776 rows: on
2026-11-23 the same look took 3.07 s (p50) and 4.45 s (p95) for the matrix API and 4.1 s and 6.1 s for the
overview, on that day's slower machine.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agents import contract, signing  # noqa: E402
from cluster_health import vocabulary  # noqa: E402
from devtools import devstack  # noqa: E402
from devtools.services import RedisServer, wait_until  # noqa: E402

TARGET_OVERHEAD_S = {256: 0.25, 1024: 0.5}  # control-plane overhead per round
TARGET_SWEEP_S_1024 = 600.0  # a full 1,024-node sweep with 0-s probes
HEARTBEAT_S = 5.0  # as the agents' default
POLL_S = 0.25  # how often the sweep's row is read while it runs
ANSWERED_FIELDS = ("kind", "probe_id", "sweep_id", "node", "rank")  # what an answer takes from its command
SENDS_PER_TURN = 32  # halves sent before the simulator looks at its queues again
READY_TIMEOUT_S = 120.0
WATCH_EVERY_S = 5.0  # how often --watch reads the matrix API and loads the overview
WATCH_USER = "fleet-watch"
# The half a simulated agent reports for a pair whose link is cut.
LINK_CUT = {
    "status": "failed",
    "stage": "connect",
    "reason": "connect_timeout",
    "hint": "injected: the link drops every packet",
}


class Phases:
    """Wall time of each step before the sweep (``setup``), each reported on stderr as it ends, with the load
    average: a run stopped from outside (a time limit) still shows how far it got and where the time went."""

    def __init__(self) -> None:
        self.t0 = self.last = time.monotonic()
        self.seconds: dict[str, float] = {}

    def done(self, step: str) -> None:
        now = time.monotonic()
        self.seconds[step] = round(now - self.last, 2)
        self.last = now
        load = os.getloadavg()[0]
        print(f"[fleet {now - self.t0:7.1f} s] {step}: {self.seconds[step]:.1f} s (load {load:.1f})", file=sys.stderr)


PHASES = Phases()


def node_names(n: int) -> list[str]:
    return [f"f{i:04d}" for i in range(n)]


def decode_command(raw: bytes | str) -> dict | None:
    """The probe command in a task message as Celery's Redis transport stores it, or None."""
    from cluster_health.queues import messages

    headers, kwargs = messages.read(raw)
    return kwargs["command"] if headers.get("task") == contract.TASK_PROBE else None


class LoopThread:
    """``loop()`` in a daemon thread of its own from ``start()``; ``stop()`` sets ``stopping`` and waits
    up to ``stop_timeout_s`` for the loop to end."""

    stop_timeout_s = 30.0

    def __init__(self, name: str):
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.loop, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=self.stop_timeout_s)

    def loop(self) -> None:
        raise NotImplementedError


class Fleet(LoopThread):
    """N simulated agents in one thread: commands in from their queues, halves and heartbeats out."""

    def __init__(
        self,
        redis_url: str,
        names: list[str],
        probe_s: float,
        heartbeat_s: float,
        dead: set[str],
        failing: set[frozenset],
        keys: dict[str, signing.NodeKey],
        template: list[dict] | None = None,
    ):
        import redis

        super().__init__("fleet")
        self.names, self.probe_s, self.heartbeat_s = names, probe_s, heartbeat_s
        self.dead, self.failing, self.keys = dead, failing, keys
        # Both halves of a real probe, one per rank: each answer carries what a real half carries, a
        # shallow copy with its command's fields put in (nothing writes to the nested parts).
        self.template = template or None
        self.queues = [contract.agent_queue(n) for n in names]
        self.redis = redis.Redis.from_url(redis_url)
        # Answers waiting for their time, as (when, probe, rank, seq, command). Both ranks of a probe finish
        # together, as a real collective's do: a probe's second command is due when its first was.
        self.due: list[tuple[float, int, int, int, dict]] = []
        self.seq = 0
        self.started: dict[int, list] = {}  # probe id -> [when its answers are due, its ranks not yet taken]
        self.silenced = False  # dead nodes stop once the sweep starts
        self.busy_s = 0.0  # the simulator's own work: decoding commands, sending halves and heartbeats
        self.commands = self.halves = 0

    def start(self) -> None:
        from cluster_health.ingest import consumer

        consumer.declare_queue()  # as each agent's first result declares it
        super().start()

    def loop(self) -> None:
        next_heartbeat = 0.0
        while not self.stopping.is_set():
            now = time.monotonic()
            out: list = []
            if now >= next_heartbeat:
                self.send_heartbeats(out)
                next_heartbeat = now + self.heartbeat_s
            self.send_due(out)
            self.push(out)
            wait = min(next_heartbeat, self.due[0][0] if self.due else next_heartbeat) - time.monotonic()
            if self.due and wait <= 0:
                # Answers are due: they go out before the N queues are looked at again. A round's
                # commands arrive together (one pipeline), and the next round's only after its answers.
                continue
            self.take_commands(max(0.0, min(wait, 0.2)))

    def push(self, out: list) -> None:
        """This turn's messages onto the nodes' ingest lists, as the server sends its own: the text Celery's
        ``send_task`` writes, in one pipeline (``dispatch._redis_send``; a real fleet sends from N machines)."""
        from cluster_health.queues import dispatch

        if not out:
            return
        t0 = time.perf_counter()
        dispatch._redis_send(out)
        self.busy_s += time.perf_counter() - t0

    def take_commands(self, block_s: float) -> None:
        """Every command waiting on any node's queue; blocks up to ``block_s`` for the first one."""
        raw = []
        if block_s > 0:
            got = self.redis.brpop(self.queues, timeout=block_s)
            if got is None:
                return
            raw.append(got[1])
        t0 = time.perf_counter()
        pipe = self.redis.pipeline(transaction=False)
        for queue in self.queues:
            pipe.rpop(queue, 64)
        for items in pipe.execute():
            raw.extend(items or [])
        for message in raw:
            command = decode_command(message)
            if command is None or (self.silenced and command["node"] in self.dead):
                continue
            self.commands += 1
            self.seq += 1
            probe = command["probe_id"]
            started = self.started.setdefault(probe, [time.monotonic() + self.probe_s, command.get("world_size", 2)])
            started[1] -= 1
            if started[1] <= 0:
                del self.started[probe]
            heapq.heappush(self.due, (started[0], probe, command["rank"], self.seq, command))
        self.busy_s += time.perf_counter() - t0

    def to_server(self, out: list, task: str, name: str, body: dict, expires_s: float | None = None) -> None:
        """``task`` with ``body`` as its argument ``name``, signed by its node, added to this turn's messages."""
        kwargs = {name: body, "auth": signing.sign(body, self.keys[body["node"]], name)}
        out.append((task, contract.ingest_queue(body["node"]), kwargs, expires_s))

    def send_due(self, out: list) -> None:
        from devtools.sweep_driver import result_for

        t0 = time.perf_counter()
        sent = 0
        while self.due and self.due[0][0] <= time.monotonic() and sent < SENDS_PER_TURN:
            command = heapq.heappop(self.due)[-1]
            peers = {p["name"] for p in command.get("peers", [])}
            cut = any(frozenset((command["node"], peer)) in self.failing for peer in peers)
            if self.template and not cut:
                half = {**self.template[command["rank"]], **{k: command[k] for k in ANSWERED_FIELDS}}
            else:
                half = result_for(command, **(LINK_CUT if cut else {}))
            # One server.result message per half, as agents/worker.py sends it; the simulator only
            # pipelines its pushes, work that a real fleet spreads over its machines.
            self.to_server(out, contract.TASK_RESULT, "result", half)
            sent += 1
        self.halves += sent
        if sent:
            self.busy_s += time.perf_counter() - t0

    def send_heartbeats(self, out: list) -> None:
        t0 = time.perf_counter()
        for i, name in enumerate(self.names):
            if self.silenced and name in self.dead:
                continue
            beat = {
                "v": contract.VERSION,
                "node": name,
                "address": f"10.{i // 250}.{i % 250 + 1}.1",
                "facts": {},
                "agent_version": "fleet-sim",
                "sent_at": time.time(),
                "busy": False,
            }
            self.to_server(out, contract.TASK_HEARTBEAT, "heartbeat", beat, expires_s=max(10.0, 3 * self.heartbeat_s))
        self.busy_s += time.perf_counter() - t0


class Watcher(LoopThread):
    """An operator watching the sweep while it is ingested (``--watch``): every WATCH_EVERY_S, the
    matrix API of the running sweep and the overview in headless Chromium, load to heatmap drawn.

    Its own thread; it touches no database (Playwright's sync API runs an event loop in the
    thread, where Django refuses to query): the user is made before, the sweep id is handed in.
    """

    stop_timeout_s = 180.0

    def __init__(self, base: str, password: str):
        super().__init__("watch")
        self.base, self.password = base, password
        self.sweep_id: int | None = None
        self.api_ms: list[float] = []
        self.overview_ms: list[float] = []
        self.errors: list[str] = []

    def loop(self) -> None:
        from playwright.sync_api import sync_playwright

        from devtools.browser import ARGS, CHROMIUM

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                context = browser.new_context(viewport={"width": 1400, "height": 1000})
                page = context.new_page()
                page.goto(self.base + "/accounts/login/")
                page.fill("#id_username", WATCH_USER)
                page.fill("#id_password", self.password)
                page.click("button[type=submit]")
                page.wait_for_url(self.base + "/")
                while True:  # a look as soon as there is a sweep, then every WATCH_EVERY_S
                    if self.sweep_id is not None:
                        self.look(context, page, self.sweep_id)
                    if self.stopping.wait(WATCH_EVERY_S if self.sweep_id is not None else 0.2):
                        break
            finally:
                browser.close()

    def look(self, context, page, pk: int) -> None:
        from playwright.sync_api import Error as PlaywrightError

        try:
            t0 = time.perf_counter()
            response = context.request.get(f"{self.base}/api/sweeps/{pk}/matrix", timeout=120_000)
            if not response.ok:
                raise RuntimeError(f"matrix API: HTTP {response.status}")
            self.api_ms.append((time.perf_counter() - t0) * 1000)
            page.goto(self.base + "/", timeout=120_000)
            page.wait_for_function(f"() => document.body.dataset.loaded === '{pk}'", timeout=120_000)
            self.overview_ms.append(float(page.evaluate("CH.firstDrawMs")))
        except (PlaywrightError, RuntimeError) as exc:  # a figure is missed, and the run says so
            self.errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")

    def figures(self) -> dict:
        def stats(values: list[float]) -> dict:
            if not values:
                return {"samples": 0}
            ordered = sorted(values)
            return {
                "samples": len(values),
                "p50_ms": round(statistics.median(ordered)),
                "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))]),
                "max_ms": round(ordered[-1]),
            }

        return {
            "matrix_api": stats(self.api_ms),
            "overview_to_heatmap": stats(self.overview_ms),
            "errors": self.errors[:5],
        }


class ServerStack:
    """The real server side on this machine: redis-server, daphne, K server workers, beat."""

    def __init__(
        self,
        workdir: Path,
        workers: int,
        database_url: str,
        redis_server: RedisServer,
        heartbeat_s: float = HEARTBEAT_S,
        consumers: int = 0,
    ):
        self.workdir, self.workers, self.heartbeat_s = workdir, workers, heartbeat_s
        self.extra_consumers = max(0, consumers - workers)  # standalone, beside the workers' own
        self.redis = redis_server
        self.database_url = database_url
        self.sup: devstack.Supervisor | None = None
        self.base = ""

    def start(self) -> None:
        env = devstack.python_env(
            DJANGO_SETTINGS_MODULE="cluster_health.settings",
            DATABASE_URL=self.database_url,
            REDIS_URL=self.redis.url,
            CLUSTER_HEALTH_BROKER_URL=self.redis.url,
            CLUSTER_HEALTH_VAR_DIR=str(self.workdir / "var"),
            # Four heartbeats missed make a node offline, as with the defaults (5 s, 20 s).
            CLUSTER_HEALTH_ONLINE_AFTER_S=str(max(20.0, 4 * self.heartbeat_s)),
        )
        self.sup = devstack.Supervisor(self.workdir / "logs", env)
        port = devstack.free_port()
        self.base = f"http://127.0.0.1:{port}"
        web = self.sup.start("web", devstack.web_args("127.0.0.1", port))
        for k in range(self.workers):
            self.sup.start(f"worker{k}", devstack.server_worker_args(f"server{k}@fleet"))
        for k in range(self.extra_consumers):
            self.sup.start(
                f"consumer{k}", [sys.executable, "manage.py", "ingest_consumer", "--name", f"extra{k}@fleet"]
            )
        self.sup.start("beat", devstack.beat_args(self.workdir))
        devstack.wait_for_port("127.0.0.1", port, 60, web)
        sup = self.sup  # a local, so that the lambdas below see it is set
        for k in range(self.workers):
            wait_until(
                lambda k=k: "ready" in sup.log(f"worker{k}"), READY_TIMEOUT_S, message=f"server worker {k} ready"
            )

    def stop(self) -> None:
        if self.sup is not None:
            self.sup.stop_all()


# Which part of the stack a process is, from its command line (the first match wins).
ROLES = (
    ("ingest_consumer", "consumer"),
    ("celery", "server_worker"),  # -A ... beat is told apart below
    ("daphne", "web"),
    ("redis-server", "redis"),
)


def _proc_stat(pid: str) -> tuple[int, float] | None:
    """(parent pid, CPU seconds used, user and system) of a process from /proc, or None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_by_role() -> dict[str, float]:
    """CPU seconds used so far by each part of the stack on this machine: this process (the simulator),
    the processes it started (by role) and every PostgreSQL process (the machine's server, not only
    this database's backends: the machine is otherwise idle while the benchmark runs)."""
    stats: dict[int, tuple[int, float]] = {}
    roles: dict[int, str | None] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or (stat := _proc_stat(entry.name)) is None:
            continue
        stats[int(entry.name)] = stat
        try:
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if comm == "postgres" or argv.startswith("postgres"):
            roles[int(entry.name)] = "postgres"
        elif " beat" in argv and "celery" in argv:
            roles[int(entry.name)] = "beat"
        else:
            roles[int(entry.name)] = next((role for needle, role in ROLES if needle in argv), None)

    def descends(pid: int) -> bool:
        seen = 0
        while pid > 1 and seen < 64:
            if pid == os.getpid():
                return True
            pid, seen = stats.get(pid, (0, 0.0))[0], seen + 1
        return False

    out: dict[str, float] = {}
    for pid, (_, cpu) in stats.items():
        if pid == os.getpid():
            role = "simulator"
        elif roles.get(pid) == "postgres":
            role = "postgres"
        elif descends(pid):
            role = roles.get(pid) or "other"
        else:
            continue
        out[role] = out.get(role, 0.0) + cpu
    return out


def database_bytes() -> int | None:
    from django.conf import settings
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_database_size(current_database())")
            return cursor.fetchone()[0]
    name = settings.DATABASES["default"]["NAME"]
    return sum(p.stat().st_size for p in Path(name).parent.glob(Path(name).name + "*"))


def round_overheads(sweep, probe_s: float) -> list[float]:
    """Per pair round: wall time from its first probe started to the next round's, minus the probe time."""
    from django.db.models import Max, Min

    from cluster_health.models import PairProbe

    rows = {
        r["round"]: r
        for r in PairProbe.objects.filter(sweep=sweep, started__isnull=False)
        .values("round")
        .annotate(first=Min("started"), last=Max("finished"))
    }
    out = []
    for k in sorted(rows):
        end = rows[k + 1]["first"] if k + 1 in rows else rows[k]["last"]
        if end is not None:
            out.append((end - rows[k]["first"]).total_seconds() - probe_s)
    return out


@dataclass
class SweepRun:
    """One sweep as measured: its row, its wall time, and Redis's, the database's and the simulator's baselines."""

    sweep: Any
    wall_s: float
    redis_before: int
    redis_peak: int
    db_before: int | None
    busy_before: float
    cpu_before: dict[str, float]
    cpu_after: dict[str, float]


def _run_sweep(
    broker, fleet: Fleet, names: list[str], kind: str, timeout_s: float, watcher: Watcher | None = None
) -> SweepRun:
    """Request one sweep with the fleet silenced and follow it until it closes or times out, sampling Redis's memory."""
    from cluster_health import sweeps
    from cluster_health.models import Sweep

    redis_before, db_before = broker.info("memory")["used_memory"], database_bytes()
    broker.config_resetstat()
    fleet.silenced = True
    busy_before, cpu_before = fleet.busy_s, cpu_by_role()
    t0 = time.monotonic()
    sweep = sweeps.request_sweep(source="command", kind=kind, nodes=names)
    if watcher is not None:
        watcher.sweep_id = sweep.pk
    peak = redis_before
    try:
        while True:
            sweep.refresh_from_db()
            peak = max(peak, broker.info("memory")["used_memory"])
            if sweep.status not in Sweep.OPEN_STATUSES or time.monotonic() - t0 > timeout_s:
                break
            time.sleep(POLL_S)
    except KeyboardInterrupt:  # stopped from outside (Ctrl-C, a time limit's SIGTERM): the figures so far
        print(f"[fleet] interrupted {time.monotonic() - t0:.0f} s into the sweep: figures so far", file=sys.stderr)
        sweep.refresh_from_db()
    wall_s = time.monotonic() - t0
    return SweepRun(sweep, wall_s, redis_before, peak, db_before, busy_before, cpu_before, cpu_by_role())


def _sweep_figures(
    outcome: SweepRun,
    fleet: Fleet,
    nodes: int,
    workers: int,
    kind: str,
    probe_s: float,
    timeout_s: float,
    dead: set[str],
    failing: set[frozenset],
) -> dict:
    """A closed or timed-out sweep's figures: its rows, round overheads, Redis's and the database's growth."""
    from django.utils import timezone

    from cluster_health.models import PairProbe, Sweep

    sweep, wall_s, busy_before = outcome.sweep, outcome.wall_s, outcome.busy_before
    peak, redis_before, db_before = outcome.redis_peak, outcome.redis_before, outcome.db_before
    overheads = round_overheads(sweep, probe_s)
    pairs = PairProbe.objects.filter(sweep=sweep)
    rounds = sweep.params.get("pair_rounds") or sweep.total_rounds
    db_after = database_bytes()
    figures = {
        "nodes": nodes,
        "workers": workers,
        "kind": kind,
        "probe_s": probe_s,
        "database": _vendor(),
        "status": sweep.status,
        "verdict": sweep.verdict,
        "rounds": rounds,
        "pairs": pairs.count(),
        "pairs_ok": pairs.filter(status="ok").count(),
        "sweep_s": round((sweep.finished - sweep.started).total_seconds(), 2)
        if sweep.finished and sweep.started
        else None,
        "request_to_end_s": round(wall_s, 2),
        # The sweep's start (its pair rows made, in one transaction) before the first round's commands went out.
        "start_to_first_round_s": _start_to_first_round(sweep, pairs),
        "rounds_measured": len(overheads),  # fewer than rounds when the sweep outlived --timeout
        "overhead_per_round_s": round(statistics.median(overheads), 3) if overheads else None,
        "overhead_per_round_p95_s": round(sorted(overheads)[int(0.95 * (len(overheads) - 1))], 3)
        if overheads
        else None,
        "halves_per_s": round(2 * pairs.count() / (sweep.finished - sweep.started).total_seconds())
        if sweep.finished and sweep.started
        else None,
        # Over the rounds measured: a sweep stopped at --timeout ran only those (the total understated it ten times).
        "simulator_s_per_round": round((fleet.busy_s - busy_before) / max(1, len(overheads)), 3),
        # CPU seconds a round costs each part of the stack (the sweep's whole wall time, over the rounds measured):
        # the sum against the machine's cores bounds how short a round can be here, however the work overlaps.
        "cpu_s_per_round": {
            role: round((outcome.cpu_after[role] - outcome.cpu_before.get(role, 0.0)) / max(1, len(overheads)), 3)
            for role in sorted(outcome.cpu_after)
        },
        "cores": os.cpu_count(),
        "redis_peak_mib": round((peak - redis_before) / 2**20, 1),
        "db_growth_mib": round((db_after - db_before) / 2**20, 1)
        if db_before is not None and db_after is not None
        else None,
        "target_overhead_per_round_s": TARGET_OVERHEAD_S.get(nodes),
    }
    if dead or failing:
        figures["pairs_not_ok"] = {
            f"{p.node_a.name}-{p.node_b.name}": f"{p.status}/{p.reason}"
            for p in pairs.exclude(status="ok").select_related("node_a", "node_b")[:20]
        }
    if sweep.status in Sweep.OPEN_STATUSES:
        figures["error"] = f"sweep still {sweep.status} after {wall_s:.0f} s (round {sweep.current_round})"
    figures["measured"] = timezone.now().isoformat(timespec="seconds")
    return figures


def _start_to_first_round(sweep, pairs) -> float | None:
    """Seconds from the sweep's start to its first command sent: the sweep's pair rows being made."""
    from django.db.models import Min

    first = pairs.filter(round=1).aggregate(sent=Min("sent_at"))["sent"]
    return round((first - sweep.started).total_seconds(), 2) if first and sweep.started else None


def real_template(kind: str, broker_url: str) -> list[dict]:
    """Both halves of one real Gloo pair probe on loopback (the agent's own probe code), stopping at the
    stage the sweep kind's pairs stop at: the content every simulated half then carries (versions,
    stage times, evidence, per-size results), so the server checks and stores what real halves hold."""
    from devtools.probe_commands import real_halves

    last_stage = "bandwidth" if kind in vocabulary.BANDWIDTH_SWEEP_KINDS else "collective"
    # Room for torch's import on a loaded machine (16 s at load 10 here): the template is for its
    # content, and a store or init timeout would only stop the benchmark before it starts.
    timeouts = {"store": 60.0, "init": 60.0}
    return real_halves(broker_url, f"fleettemplate{os.getpid()}", last_stage=last_stage, timeouts=timeouts)


def measure(
    nodes: int,
    workers: int,
    probe_s: float,
    kind: str,
    heartbeat_s: float,
    timeout_s: float,
    dead: set[str],
    failing: set[frozenset],
    database_url: str,
    workdir: Path,
    redis_server: RedisServer,
    halves: str = "real",
    watch: bool = False,
    consumers: int = 0,
) -> dict:
    """Start the stack, bring N simulated agents online, run one sweep, read its rows; Django is set up."""
    import secrets

    import redis

    from cluster_health.models import Node

    stack = ServerStack(workdir, workers, database_url, redis_server, heartbeat_s, consumers)
    fleet = watcher = None
    try:
        stack.start()
        PHASES.done("server stack started")
        names = node_names(nodes)
        template = real_template(kind, redis_server.url) if halves == "real" else None
        PHASES.done("a real probe's halves taken as the template")
        keys = enroll(names)
        PHASES.done(f"{nodes} nodes enrolled")
        fleet = Fleet(stack.redis.url, names, probe_s, heartbeat_s, dead, failing, keys, template)
        fleet.start()
        wait_until(
            lambda: Node.objects.filter(Node.online_q(), name__in=names).count() == nodes,
            READY_TIMEOUT_S,
            interval=0.5,
            message=f"{nodes} simulated agents online",
        )
        PHASES.done(f"{nodes} simulated agents online")
        setup_s = round(time.monotonic() - PHASES.t0, 2)
        load_before = os.getloadavg()
        if watch:
            from django.contrib.auth.models import User

            password = secrets.token_urlsafe(16)
            User.objects.filter(username=WATCH_USER).delete()
            User.objects.create_user(WATCH_USER, password=password)
            watcher = Watcher(stack.base, password)
            watcher.start()
        broker = redis.Redis.from_url(stack.redis.url)
        outcome = _run_sweep(broker, fleet, names, kind, timeout_s, watcher)
        if watcher is not None:
            watcher.stop()
        PHASES.done(f"the sweep ({outcome.sweep.status})")
        figures = _sweep_figures(outcome, fleet, nodes, workers, kind, probe_s, timeout_s, dead, failing)
        if watcher is not None:
            figures["while_ingested"] = watcher.figures()
        # Setup (scratch database, stack, template, keys, agents online) apart from the sweep's own time
        # (sweep_s: created to finished), and the machine's load around the sweep: on a shared machine the
        # wall-clock figures move with it.
        load_after = os.getloadavg()
        figures["setup_s"] = setup_s
        figures["setup_steps_s"] = dict(PHASES.seconds)
        figures["load_average"] = f"{load_before[0]:.1f} at the start, {load_after[0]:.1f} at the end"
        return {**figures, "halves_content": halves, "consumers": max(consumers, workers)}
    finally:
        try:
            if watcher is not None:
                watcher.stop()
            if fleet is not None:
                fleet.stop()
        finally:  # a second interrupt while the fleet stops must still stop the stack
            stack.stop()


def enroll(names: list[str]) -> dict[str, signing.NodeKey]:
    """A key per simulated node, enrolled as ``manage.py nodes enroll`` does; the fleet signs with them."""
    from django.utils import timezone

    from cluster_health.models import AgentKey

    keys = {name: signing.new_key(name) for name in names}
    AgentKey.objects.filter(node_name__in=names).update(revoked_at=timezone.now())
    AgentKey.objects.bulk_create([AgentKey.sealed(key) for key in keys.values()], batch_size=500)
    return keys


def _vendor() -> str:
    from django.db import connection

    return connection.vendor


def setup_django(database_url: str, workdir: Path) -> None:
    os.environ.update(
        DATABASE_URL=database_url,
        CLUSTER_HEALTH_VAR_DIR=str(workdir / "var"),
        DJANGO_SETTINGS_MODULE="cluster_health.settings",
    )
    from benchmarks import scratch

    # A new SQLite file starts as a copy of the migrated template; one that was new and had none becomes it.
    sqlite_file = Path(database_url.removeprefix("sqlite:///"))
    fresh = database_url.startswith("sqlite:///") and not sqlite_file.exists()
    copied = fresh and scratch.sqlite_from_template(sqlite_file)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    if fresh and not copied:
        scratch.keep_sqlite_template(sqlite_file)
    PHASES.done("database migrated" + (" (copied from the migrated template)" if copied else ""))


def run(
    database: str | None = None,
    nodes: int = 256,
    workers: tuple = (1, 2),
    probe_s: float = 0.0,
    timeout_s: float | None = None,
) -> dict:
    """Runner entry point: one sweep per worker count, each on its own scratch database on ``database``
    (a scratch SQLite file without it); ``timeout_s`` stops a sweep that outlives it (figures so far)."""
    import subprocess

    out: dict = {}
    for k in workers:
        argv = [
            sys.executable,
            str(Path(__file__)),
            "--nodes",
            str(nodes),
            "--workers",
            str(k),
            "--probe-s",
            str(probe_s),
            "--json",
            "--scratch",
        ]
        if timeout_s is not None:
            argv += ["--timeout", str(timeout_s)]
        if database:
            argv += ["--database", database]
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        out[f"workers_{k}"] = json.loads(lines[-1]) if lines else {"error": (proc.stderr or proc.stdout)[-1500:]}
    return out


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--database", default=None, help="database URL the server stack uses (default: scratch SQLite)")
    parser.add_argument(
        "--scratch",
        action="store_true",
        help="--database names a PostgreSQL server: use a scratch database on it, dropped after",
    )
    parser.add_argument("--workers", type=int, default=1, help="server workers (celery -Q server), 2 processes each")
    parser.add_argument(
        "--consumers",
        type=int,
        default=0,
        help="ingest consumers in all (default: one per worker); extra ones standalone",
    )
    parser.add_argument("--probe-s", type=float, default=0.0, help="simulated seconds per probe")
    parser.add_argument("--kind", default="connectivity", choices=vocabulary.SWEEP_KINDS)
    parser.add_argument("--heartbeat-s", type=float, default=HEARTBEAT_S)
    parser.add_argument("--timeout", type=float, default=1800.0, help="give up on the sweep after this many seconds")
    parser.add_argument("--dead-node", action="append", default=[], help="a node that goes silent at the sweep")
    parser.add_argument("--failing-link", action="append", default=[], help="A,B: a pair whose probes fail")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    parser.add_argument("--logs", default=None, help="copy the server processes' logs into this folder")
    parser.add_argument(
        "--halves",
        default="real",
        choices=("real", "synthetic"),
        help="real: every half carries what a real probe's half holds (one real probe on loopback first); "
        "synthetic: the minimal half of the contract (figures before 2026-11-23)",
    )
    parser.add_argument(
        "--watch",
        action="store_true",
        help="while the sweep is ingested, read its matrix API and load the overview in headless Chromium "
        f"every {WATCH_EVERY_S:.0f} s (figures under while_ingested)",
    )
    opts = parser.parse_args(argv)
    if not 2 <= opts.nodes <= contract.MAX_WORLD_SIZE:
        parser.error(f"--nodes: 2..{contract.MAX_WORLD_SIZE}")
    failing = {frozenset(link.split(",")) for link in opts.failing_link}
    # A SIGTERM (timeout, a CI runner) must stop the stack this process started, as Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)
    with tempfile.TemporaryDirectory(prefix="ch-fleet-") as tmp:
        workdir = Path(tmp)
        # The private redis-server first: Django (this process's sends included) reads its URL at setup.
        redis_server = RedisServer(workdir / "redis")
        redis_server.workdir.mkdir(parents=True)
        redis_server.start()
        PHASES.done("redis-server started")
        os.environ.update(REDIS_URL=redis_server.url, CLUSTER_HEALTH_BROKER_URL=redis_server.url)
        args = (
            opts.nodes,
            opts.workers,
            opts.probe_s,
            opts.kind,
            opts.heartbeat_s,
            opts.timeout,
            set(opts.dead_node),
            failing,
        )
        try:
            if opts.scratch and opts.database:
                from benchmarks.scratch import scratch_database

                with scratch_database(opts.database) as url:
                    PHASES.done("scratch database made and migrated")
                    figures = measure(*args, url, workdir, redis_server, opts.halves, opts.watch, opts.consumers)
            else:
                url = opts.database or f"sqlite:///{workdir}/fleet.sqlite3"
                setup_django(url, workdir)
                figures = measure(*args, url, workdir, redis_server, opts.halves, opts.watch, opts.consumers)
        finally:
            redis_server.stop()
            if opts.logs:
                shutil.copytree(workdir / "logs", opts.logs, dirs_exist_ok=True)
    print(json.dumps(figures) if opts.json else json.dumps(figures, indent=2), flush=True)
    return 0 if "error" not in figures and figures["pairs_ok"] == figures["pairs"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""The resident node agent: a Celery worker on its own queue `agent.<name>`.

It runs one probe at a time (solo pool, prefetch 1), speaks JSON only, acks
a command after its result is sent (acks_late), and sends a heartbeat with
this node's facts to the server queue on start and every few seconds. It
never imports torch: facts that need torch are gathered once in a child
process, and each probe runs in its own subprocess (agents.runner).
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from celery import Celery, signals
from kombu import Queue

import agents
from agents import broker, contract, facts, gpu_contract, liveness, netinfo, signing
from agents.freshness import Freshness
from agents.gpu_check import run_gpu_check
from agents.hangs import contract as hangs_contract
from agents.hangs.inspect import inspect_job
from agents.runner import failed_result, prewarm, remove_orphaned_dirs, run_probe, shutdown_warm_host

log = logging.getLogger("agents.worker")

# A probe can never run past MAX_DEADLINE_S (the runner kills it); the task limit sits above
# that, and the broker's visibility timeout above the task limit, so Redis never hands a
# command that is still running to a second delivery.
TASK_TIME_LIMIT_S = contract.MAX_DEADLINE_S + 60
VISIBILITY_TIMEOUT_S = TASK_TIME_LIMIT_S + 240
FACTS_REFRESH_S = 60.0
RESULT_RETRY = {"max_retries": 30, "interval_start": 0.5, "interval_step": 1.0, "interval_max": 2.0}
HEARTBEAT_RETRY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.5, "interval_max": 0.5}


def pick_address(broker_url: str) -> str:
    """The address of the interface that routes to the broker; loopback only if the broker is on loopback."""
    parts = urlsplit(broker_url)
    host = parts.hostname
    if host:
        try:
            ip = str(socket.getaddrinfo(host, parts.port or 6379, socket.AF_INET)[0][4][0])
            local = netinfo.source_address_towards(ip, parts.port or 6379)
            if not netinfo.is_loopback(local) or netinfo.is_loopback(ip):
                return local
        except OSError:
            pass
    candidates = netinfo.candidate_interfaces(include_loopback=False)
    if not candidates:
        raise RuntimeError("no non-loopback interface with an IPv4 address: pass --address")
    return candidates[0]["address"]


# How long an agent remembers a probe half it ran, to drop a copy the server sent again:
# longer than a worker outage between a round's commit and its resend is expected to last.
TAKEN_PROBES_WINDOW_S = 24 * 3600.0


class Agent:
    """One node's agent: its identity, cached facts, and the Celery app that serves its queue."""

    def __init__(
        self,
        name: str,
        address: str,
        broker_url: str,
        heartbeat_s: float = 5.0,
        key: signing.NodeKey | None = None,
        deaf_after_s: float = liveness.DEAF_AFTER_S,
    ):
        self.name = contract.check_node_name(name)
        if key is not None and key.node != self.name:
            raise signing.SignatureError(f"the key is {key.node}'s, not {self.name}'s")
        self.key = key  # None: a development agent, unsigned (the server must allow it)
        self.seen_commands = signing.NonceWindow()
        # Probe halves this agent took on: the server sends a round again when its worker died
        # around the publish (cluster_health.sweeps.outbox), and a half runs once.
        self.taken_probes = signing.NonceWindow(window_s=TAKEN_PROBES_WINDOW_S)
        self.address = address
        self.broker_url = broker_url
        self.heartbeat_s = heartbeat_s
        self.freshness = Freshness(signing.DEFAULT_WINDOW_S)  # command age, whatever the clocks say
        self.busy = False
        self.in_task = False  # a command's task is running (checks, probe, result send): the queue waits for it
        self.deaf_after_s = deaf_after_s
        self.watch: liveness.QueueWatch | None = None  # set by run(): the worker's queue, watched
        self.versions: dict[str, Any] | None = None
        self.facts: dict[str, Any] = {}
        self.facts_at = 0.0
        self.stopping = threading.Event()
        self.app = self.make_app()

    def make_app(self) -> Celery:
        # fixups=[]: with DJANGO_SETTINGS_MODULE in the environment (a demo host running the
        # server too), Celery's Django fixup would import and set up the whole Django project.
        app = Celery("cluster_health_agent", broker=self.broker_url, set_as_current=False, fixups=[])
        queue = contract.agent_queue(self.name)
        app.conf.update(
            task_serializer="json",
            result_serializer="json",
            accept_content=["json"],
            result_backend=None,
            task_ignore_result=True,
            task_acks_late=True,
            worker_prefetch_multiplier=1,
            worker_concurrency=1,
            worker_pool="solo",
            task_time_limit=TASK_TIME_LIMIT_S,
            broker_transport_options={
                "visibility_timeout": VISIBILITY_TIMEOUT_S,
                **contract.agent_transport_options(self.name),  # its broker user may write no one else's
            },
            broker_use_ssl=broker.celery_ssl(self.broker_url),
            broker_connection_retry=True,
            broker_connection_retry_on_startup=True,
            broker_connection_max_retries=None,
            task_queues=[Queue(queue, routing_key=queue)],  # type: ignore[no-untyped-call]  # kombu is untyped
            task_default_queue=queue,
            task_create_missing_queues=True,
            worker_send_task_events=False,
            task_send_sent_event=False,
            # No broadcast commands (shutdown, pool restarts, rate limits) from whoever reaches Redis.
            worker_enable_remote_control=False,
            worker_hijack_root_logger=True,
        )
        agent = self

        # shared=False: a task of this app only (a second Agent in one process would otherwise share it).
        @app.task(name=contract.TASK_PROBE, ignore_result=True, shared=False)  # type: ignore[untyped-decorator]
        def probe(command: Any = None, auth: Any = None, **unexpected: Any) -> None:
            agent.in_task = True
            try:
                agent.handle(command, auth)
            finally:
                agent.in_task = False

        # Celery registers its own tasks (celery.map, celery.chunks, celery.chord_unlock...) in every
        # app: a message naming one would run it. The agent runs probes and nothing else.
        for name in [n for n in app.tasks if n != contract.TASK_PROBE]:
            app.tasks.unregister(name)
        return app

    # -- probes -------------------------------------------------------------------
    def authentic(self, command: Any, auth: Any) -> bool:
        """Whether the server signed this command for this node, recently, and it was not seen before."""
        if self.key is None:
            return True  # a development agent: it was started with unsigned agents allowed
        try:
            envelope = signing.verify(command, auth, "command", self.key.secret_for)
        except signing.SignatureError as e:
            # Unauthenticated input gets no answer: a forged command must not fail a real probe.
            log.error("dropped a command that is not signed by the server for %s: %s", self.name, e)
            return False
        if not self.seen_commands.claim(envelope["nonce"]):
            log.error("dropped a replayed command (nonce %s)", envelope["nonce"])
            return False
        return True

    def handle(self, command: Any, auth: Any = None) -> dict[str, Any] | None:
        """Validate, run and report one command; never raises (a bad command must not stop the agent)."""
        if not self.authentic(command, auth):
            return None
        if isinstance(command, dict) and command.get("kind") == gpu_contract.KIND:
            return self.handle_gpu_check(command)
        if isinstance(command, dict) and command.get("kind") == hangs_contract.KIND:
            return self.handle_inspect(command)
        cmd = self.accepted("probe", contract.validate_command, command, self.report_refusal)
        if cmd is None:
            return None
        if not self.taken_probes.claim(f"{cmd['kind']}:{cmd['probe_id']}:{cmd['rank']}:{cmd['rendezvous']}"):
            log.warning(
                "dropped probe %s (rank %s): this agent already ran it; the server sent it again",
                cmd["probe_id"],
                cmd["rank"],
            )
            return None
        log.info(
            "probe %s (%s, rank %s of %s, %s) starting",
            cmd["probe_id"],
            cmd["kind"],
            cmd["rank"],
            cmd["world_size"],
            cmd["backend"],
        )
        return self.run_and_report(
            "probe",
            cmd,
            lambda: run_probe(cmd, self.broker_url),
            lambda e: contract.validate_result(
                failed_result(cmd, "probe_crashed", f"agent {self.name} could not start the probe: {e}", detail=str(e))
            ),
        )

    def handle_inspect(self, command: dict[str, Any]) -> dict[str, Any] | None:
        """What this node shows of a running job, read by the inspect helper (its own process), reported."""
        cmd = self.accepted("inspect", hangs_contract.validate_command, command)
        if cmd is None:
            return None
        report: dict[str, Any] = {"v": 1, "kind": hangs_contract.KIND, "probe_id": cmd["probe_id"], "node": self.name}
        try:
            report["ranks"] = inspect_job(cmd)
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            report["error"] = str(e)[:2000]
        log.info("inspect %s: %d rank(s) of the job here", cmd["probe_id"], len(report.get("ranks") or []))
        self.send_to_ingest(
            hangs_contract.TASK_INSPECTION, self.signed(report, "inspection", "inspection"), retry_policy=RESULT_RETRY
        )
        return report

    def handle_gpu_check(self, command: dict[str, Any]) -> dict[str, Any] | None:
        """The local gpu check: one per node, no peer; its result has its own contract (agents.gpu_contract)."""
        cmd = self.accepted("gpu check", gpu_contract.validate_command, command)
        if cmd is None:
            return None
        if not self.taken_probes.claim(f"gpu:{cmd['probe_id']}:{cmd.get('sweep_id')}"):
            log.warning("dropped gpu check %s: this agent already ran it; the server sent it again", cmd["probe_id"])
            return None
        return self.run_and_report(
            "gpu check",
            cmd,
            lambda: run_gpu_check(cmd, nvml_facts=(self.facts or {}).get("gpus")),
            lambda e: gpu_contract.validate_result(
                gpu_contract.failed_result(
                    cmd, "probe_crashed", f"agent {self.name} could not start the gpu check: {e}"
                )
            ),
        )

    def accepted(
        self,
        what: str,
        validate: Callable[[Any], dict[str, Any]],
        command: Any,
        refused: Callable[[Any, Exception], None] | None = None,
    ) -> dict[str, Any] | None:
        """The validated command, or None (logged, and passed to refused if invalid) when it is invalid or expired."""
        try:
            cmd = validate(command)
        except contract.ContractError as e:
            log.error("refused a %s command: %s", what, e)
            if refused is not None:
                refused(command, e)
            return None
        late = self.freshness.stale_by(cmd["expires_at"], cmd.get("lifetime_s")) if cmd["expires_at"] else 0.0
        if late > 0:
            log.warning("dropped %s %s: it expired %.0fs ago", what, cmd["probe_id"], late)
            return None
        return cmd

    def run_and_report(
        self,
        what: str,
        cmd: dict[str, Any],
        run: Callable[[], dict[str, Any]],
        unstarted: Callable[[Exception], dict[str, Any]],
    ) -> dict[str, Any]:
        """Run one accepted command with the agent marked busy, and send its result.

        A runner that raises still reports: unstarted(error) is the result then.
        """
        self.busy = True
        try:
            result = run()
        except Exception as e:  # the runner itself failed: still tell the server
            log.exception("%s %s could not run", what, cmd["probe_id"])
            result = unstarted(e)
        finally:
            self.busy = False
        log.info("%s %s: %s at %s (%s)", what, cmd["probe_id"], result["status"], result["stage"], result["reason"])
        self.send_result(result)
        return result

    def report_refusal(self, command: Any, error: Exception) -> None:
        if not isinstance(command, dict):
            return
        readable = {
            "kind": command.get("kind") if command.get("kind") in contract.PROBE_KINDS else "pair",
            "probe_id": command.get("probe_id"),
            "sweep_id": command.get("sweep_id") if isinstance(command.get("sweep_id"), int) else None,
            "node": command.get("node"),
            "rank": command.get("rank") if isinstance(command.get("rank"), int) else 0,
        }
        try:
            result = contract.validate_result(
                failed_result(
                    readable, "probe_crashed", f"agent {self.name} refused the command: {error}", detail=str(error)
                )
            )
        except contract.ContractError:
            return  # no probe id or node to report against; the log line above is all there is
        self.send_result(result)

    def signed(self, body: dict[str, Any], purpose: str, field: str) -> dict[str, Any]:
        """Task kwargs: the body under its field, and its signature (none for a development agent)."""
        kwargs = {field: body}
        if self.key is not None:
            kwargs["auth"] = signing.sign(body, self.key, purpose)
        return kwargs

    def send_to_ingest(self, task: str, kwargs: dict[str, Any], **options: Any) -> None:
        """Send a task message to this node's ingest list, which the server's consumers drain in batches.

        Appended onto the list (Celery's anonymous exchange) without declaring a queue: a node's
        broker user may only append to its own list (contract.ingest_queue), whatever the others send.
        """
        queue = contract.ingest_queue(self.name)
        self.app.send_task(task, kwargs=kwargs, queue=queue, declare=[], retry=True, **options)

    def send_result(self, result: dict[str, Any]) -> None:
        self.send_to_ingest(contract.TASK_RESULT, self.signed(result, "result", "result"), retry_policy=RESULT_RETRY)

    # -- heartbeats ---------------------------------------------------------------
    def current_facts(self) -> dict[str, Any]:
        if self.versions is None:
            self.versions = facts.torch_versions_in_subprocess()
        now = time.monotonic()
        if not self.facts or now - self.facts_at > FACTS_REFRESH_S:
            self.facts, self.facts_at = facts.collect(self.versions), now
        else:
            self.facts["system"].update(facts.memory_and_load())
        return self.facts

    def heartbeat(self) -> dict[str, Any]:
        return contract.validate_heartbeat(
            {
                "v": contract.VERSION,
                "node": self.name,
                "address": self.address,
                "facts": self.current_facts(),
                "agent_version": agents.__version__,
                "sent_at": time.time(),
                "busy": self.busy,
            }
        )

    def send_heartbeat(self) -> None:
        # A short expiry: heartbeats queued while the server was down are worthless later.
        self.send_to_ingest(
            contract.TASK_HEARTBEAT,
            self.signed(self.heartbeat(), "heartbeat", "heartbeat"),
            expires=max(10.0, 3 * self.heartbeat_s),
            retry_policy=HEARTBEAT_RETRY,
        )

    def heartbeat_loop(self) -> None:
        while not self.stopping.is_set():
            # No heartbeat from an agent whose worker stopped taking commands (agents.liveness).
            if self.watch is not None and self.watch.deaf(running=self.in_task):
                self.restart_deaf()
            try:
                self.send_heartbeat()
            except Exception as e:  # broker down: keep trying, the worker reconnects on its own
                log.warning("heartbeat not sent: %s", e)
            self.stopping.wait(self.heartbeat_s)

    def queue_watch(self) -> liveness.QueueWatch:
        """The watch on this agent's own queue, through a Redis client of its own (short timeouts)."""
        import redis

        client = broker.redis_client(self.broker_url, socket_timeout=5.0, socket_connect_timeout=5.0)
        queue = contract.agent_queue(self.name)
        # Celery's Redis transport pushes at the head (LPUSH) and pops the tail (BRPOP): index -1 waits longest.
        return liveness.QueueWatch(
            lambda: client.lindex(queue, -1), self.deaf_after_s, unreachable=(OSError, redis.RedisError)
        )

    def restart_deaf(self) -> None:
        log.error(
            "the worker has not taken a command from %s in %.0fs while idle (its broker connection was lost "
            "without it noticing): restarting this agent in place",
            contract.agent_queue(self.name),
            self.deaf_after_s,
        )
        liveness.restart_in_place(before=shutdown_warm_host)

    def run(self, loglevel: str = "INFO") -> int:
        """Serve this node's queue until stopped (SIGTERM: finish the current probe, then exit)."""

        def on_ready(**_: Any) -> None:  # heartbeats, leftovers of a killed agent, the warm probe process
            self.watch = self.queue_watch()
            threading.Thread(target=self.heartbeat_loop, name="heartbeat", daemon=True).start()
            for path in remove_orphaned_dirs():
                log.info("removed %s, left by an agent that was killed", path)
            prewarm()

        def on_shutdown(**_: Any) -> None:
            self.stopping.set()
            shutdown_warm_host()

        def on_logging(logger: logging.Logger, **_: Any) -> None:  # no broker password in the agent's log
            broker.redact_logs(logger)

        signals.after_setup_logger.connect(on_logging, weak=False)
        signals.after_setup_task_logger.connect(on_logging, weak=False)
        signals.worker_ready.connect(on_ready, weak=False)
        signals.worker_shutdown.connect(on_shutdown, weak=False)
        # The worker is built directly rather than through `celery worker`: the command line
        # machinery (click, prompt_toolkit) would cost this resident process ~10 MB. Its pool,
        # concurrency and prefetch come from the app's configuration (make_app).
        worker = self.app.Worker(
            hostname=f"agent-{self.name}@{socket.gethostname()}",
            queues=[contract.agent_queue(self.name)],
            loglevel=loglevel,
            without_gossip=True,
            without_mingle=True,
            without_heartbeat=True,
        )
        worker.start()
        return int(worker.exitcode or 0)


def run_agent(
    name: str,
    address: str | None,
    broker_url: str,
    loglevel: str = "INFO",
    key: signing.NodeKey | None = None,
    deaf_after_s: float = liveness.DEAF_AFTER_S,
) -> int:
    """Serve this node's queue; BrokerConfigError if the broker refuses the credentials or the TLS setup."""
    heartbeat_s = float(os.environ.get("CLUSTER_HEALTH_HEARTBEAT_S", "5"))
    broker.check_credentials(broker_url)
    address = address or pick_address(broker_url)
    return Agent(name, address, broker_url, heartbeat_s, key=key, deaf_after_s=deaf_after_s).run(loglevel)

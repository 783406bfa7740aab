"""One rank of one probe, run as its own process: `python -m agents.probe SPEC.json`.

Only this process imports torch. It climbs the stage ladder
resolve -> connect -> store -> init -> collective -> bandwidth, writing each
stage start to its stage log (one JSON line per event, flushed) so that the
runner can tell where it was if it has to be killed. A watchdog thread holds
each stage to its own timeout and turns an overrun into a named result; the
runner's wall-clock deadline is the backstop when even that cannot run.
The result goes to a file, never stdout, because torch writes there too.
"""

from __future__ import annotations

import faulthandler
import itertools
import json
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from agents import contract, evidence, nccl_errors, netinfo
from agents.rendezvous import PeerFailed, Rendezvous, RendezvousTimeout, from_spec

PROCESS_STARTED = time.time()
KEY = "cluster-health/"  # prefix of every key this probe puts in the store
# Rank 0 hosts the store: after its result it waits this long for the others to let go of it.
LINGER_S = 3.0
# The watchdog is a backstop: the stage's own timeouts (which know more) get this long to fire first.
WATCHDOG_GRACE_S = 0.75

# The reason an overrun gets, by the stage it happened in.
TIMEOUT_REASONS = {
    "resolve": "dns",
    "connect": "connect_timeout",
    "store": "store_timeout",
    "init": "transport",
    "collective": "collective_timeout",
    "bandwidth": "collective_timeout",
}


# Gloo and NCCL word a dead peer or a dropped link several ways, depending on which side of
# the socket noticed first (read, write, or the pair's own state machine).
TRANSPORT_WORDS = (
    "connection reset",
    "connection closed",
    "closed by peer",
    "broken pipe",
    "eof",
    "end of file",
    "read error",
    "write error",
    "socket closed",
    "connection refused",
    "no route to host",
    "network is unreachable",
    "remote process exited",
    "communicator was aborted",
)
# Gloo prefixes its errors with the source file, e.g. "[.../gloo/transport/tcp/pair.cc:537] ";
# NCCL names each operation's timeout setting ("Timeout(ms)=600000") in errors that are no timeout.
SOURCE_LOCATION = re.compile(r"\[[^\]]*\.(?:cc|cpp|h|hpp):\d+\]\s*")
TIMEOUT_SETTING = re.compile(r"timeout\(ms\)\s*=\s*\d+", re.IGNORECASE)


def classify_collective_error(text: str, stage: str = "collective") -> tuple[str, str]:
    """(status, reason) for a collective (or process group init) that raised with this message.

    Every step that runs a collective goes through here, so a peer killed in any of them
    reads the same: `transport` for a dead peer or link, the stage's timeout reason for a
    timeout, and `collective_error` for anything else (`transport` during init).
    """
    body = TIMEOUT_SETTING.sub("", SOURCE_LOCATION.sub("", text)).lower()
    if "timed out" in body or "timeout" in body:
        return "timeout", TIMEOUT_REASONS.get(stage, "collective_timeout")
    if any(w in body for w in TRANSPORT_WORDS) or stage == "init":
        return "failed", "transport"
    return "failed", "collective_error"


class StageFailure(Exception):
    """The probe stops here, with a reason code and a hint a person can act on."""

    def __init__(self, reason: str, hint: str, detail: str | None = None, status: str = "failed"):
        super().__init__(hint)
        self.reason, self.hint, self.detail, self.status = reason, hint, detail, status

    @classmethod
    def timed_out(cls, reason: str, hint: str, cause: BaseException | None = None) -> StageFailure:
        """A stage that ran out of time; the first line of cause (the error that said so) is the detail."""
        return cls(reason, hint, detail=first_line(cause) if cause is not None else None, status="timeout")


class StageLog:
    """Append-only JSON lines, flushed per event: readable after a SIGKILL."""

    def __init__(self, path: str):
        self.file = open(path, "a", buffering=1)

    def emit(self, **event: Any) -> None:
        event["t"] = time.time()
        self.file.write(json.dumps(event) + "\n")
        self.file.flush()


def first_line(exc: BaseException) -> str:
    """The line of a torch exception that says what happened (they carry C++ frames below it)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for ln in lines:
        if not ln.startswith(("Exception raised from", "frame #", "[")):
            return f"{type(exc).__name__}: {ln}"[:400]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:400]


class StagedChild:
    """What a probe rank and the gpu check share: the stage clock the watchdog reads, and a result written once.

    A subclass implements run() (the ladder), watchdog() (a daemon thread holding each stage
    to its limit) and fail() (the result for whatever ended run()); run_child() drives them.
    """

    def __init__(self, spec: dict[str, Any], log: StageLog, stage: str):
        self.spec, self.cmd, self.log = spec, spec["command"], log
        self.name = self.cmd["node"]
        self.stage = stage
        self.stage_started = time.monotonic()
        self.stage_limit: float | None = None
        self.stage_times: dict[str, float] = {}
        self.versions: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.finished = False
        self.torch: Any = None  # the torch module, imported in run() (never at module level)

    def close_stage(self) -> float:
        """Add the time spent in the current stage to stage_times; returns the monotonic now."""
        now = time.monotonic()
        self.stage_times[self.stage] = round(self.stage_times.get(self.stage, 0.0) + now - self.stage_started, 4)
        return now

    def overrun_limit(self) -> float | None:
        """The current stage's limit once the stage has run past it (and the grace), else None."""
        limit = self.stage_limit
        if limit is None or time.monotonic() - self.stage_started <= limit + WATCHDOG_GRACE_S:
            return None
        return limit

    def finish(
        self, status: str, reason: str | None = None, hint: str | None = None, detail: str | None = None
    ) -> bool:
        """Write the result once: False when it was already written (the watchdog and the main thread may race here).

        The result is on disk before either returns: the one that lost waits under the lock
        while the other writes, since it goes on to end the process (os._exit), and a process
        ended mid-write would leave no result at all.
        """
        with self.lock:
            if self.finished:
                return False
            self.finished = True
            self.stage_limit = None
            self.close_stage()
            result = {
                "status": status,
                "stage": self.stage,
                "reason": reason,
                "hint": hint,
                "detail": detail,
                **self.result_fields(status),
            }
            # Replaced in one step: the runner may read it at any time.
            tmp = self.spec["result_path"] + ".tmp"
            with open(tmp, "w") as f:
                json.dump(result, f)
            os.replace(tmp, self.spec["result_path"])
        self.log.emit(event="finished", status=status, stage=self.stage, reason=reason)
        return True

    def result_fields(self, status: str) -> dict[str, Any]:
        """What the result carries besides its status, stage, reason, hint and detail."""
        raise NotImplementedError

    def finish_crashed(self, reason: str, what: str, e: BaseException) -> None:
        """Finish with an exception no stage named: where it happened and its first line."""
        self.finish(
            "failed",
            reason,
            f"{what} on {self.name} failed in stage {self.stage}: {first_line(e)}",
            detail=first_line(e),
        )

    def run(self) -> None:
        raise NotImplementedError

    def watchdog(self) -> None:
        raise NotImplementedError

    def fail(self, e: BaseException) -> None:
        """Write the result for an exception that ended run()."""
        raise NotImplementedError

    def linger(self) -> None:
        """Wait, after the result, for whatever peers still need from this process; none by default."""


def run_child(argv: list[str] | None, make: Callable[[dict[str, Any], StageLog], StagedChild]) -> None:
    """The child's entry point: `python -m MODULE SPEC.json` runs make(spec, log) and never returns."""
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as f:
        spec = json.load(f)
    log = StageLog(spec["events_path"])
    log.emit(event="started", pid=os.getpid())
    child = make(spec, log)
    threading.Thread(target=child.watchdog, daemon=True, name="stage-watchdog").start()
    try:
        child.run()
    except BaseException as e:  # the result must say what went wrong, whatever it was
        child.fail(e)
    child.linger()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: destroying a process group whose peer is gone can block.
    os._exit(0)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q / 100.0 * len(ordered) + 0.5)) - 1))]


class Probe(StagedChild):
    """State of one rank climbing the ladder; every exit goes through finish()."""

    def __init__(self, spec: dict[str, Any], log: StageLog):
        super().__init__(spec, log, "resolve")
        self.rank = self.cmd["rank"]
        self.n = self.cmd["world_size"]
        self.t = self.cmd["timeouts"]
        self.timings: dict[str, float] = {"spawn_s": round(PROCESS_STARTED - spec["spawned_at"], 4)}
        self.extra: dict[str, Any] = {}
        # What the classification of this half rests on (agents/evidence.py; contract.validate_evidence).
        self.evidence: dict[str, Any] = {"rank": self.rank, "node": self.name}
        self.peer_ip: str | None = None
        self.peer_versions: dict[str, Any] = {}
        self.interface: str | None = None
        self.master_ip: str | None = None
        self.port: int | None = None
        self.dist: Any = None  # torch.distributed, imported with torch in run()
        self.store = None
        self.joined: list[int] = []  # ranks seen in the store: the ones rank 0 waits for before it leaves

    # -- naming, for hints ---------------------------------------------------
    def peer_name(self, rank: int) -> str:
        peers = self.cmd["peers"]
        if len(peers) == self.n:
            return str(peers[rank]["name"])
        if self.n == 2 and len(peers) == 1:
            return str(peers[0]["name"])
        return self.cmd["master_address"] if rank == 0 else f"rank {rank}"

    def others_label(self) -> str:
        """Who this rank talks to: the master for ranks 1..N-1, every other rank for rank 0."""
        if self.rank:
            return self.master_label()
        return ", ".join(f"{self.peer_name(r)} (rank {r})" for r in range(1, self.n))

    def master_label(self) -> str:
        where = (
            f"{self.master_ip or self.cmd['master_address']}:{self.port}" if self.port else self.cmd["master_address"]
        )
        return f"{self.peer_name(0)} ({where})" if self.rank else f"{self.name} ({where})"

    # -- stages ---------------------------------------------------------------
    def enter(self, stage: str, limit_s: float, step: str | None = None) -> None:
        now = self.close_stage()
        self.stage, self.stage_started, self.stage_limit = stage, now, limit_s
        self.log.emit(event="stage", stage=stage, step=step, limit_s=limit_s)

    def watchdog(self) -> None:
        # The runner kills this process at the deadline; should the runner itself be gone
        # (agent killed: this process is re-parented), the probe ends at once.
        orphan_deadline = self.spec["spawned_at"] + self.cmd["deadline_s"] + 5.0
        parent, runner = os.getppid(), self.spec.get("runner_pid")
        while True:
            time.sleep(0.05)
            if time.time() > orphan_deadline or os.getppid() != parent or (runner and not pid_alive(runner)):
                os._exit(4)  # nobody is left to read a result
            limit = self.overrun_limit()
            if limit is None:
                continue
            failure = StageFailure(
                TIMEOUT_REASONS[self.stage],
                self.timeout_hint(self.stage, limit)
                + nccl_errors.multi_group_hang_note(self.cmd["backend"], self.cmd["multi_group"], self.stage),
                detail=f"stage {self.stage} did not finish within its {limit:.1f}s timeout",
                status="timeout",
            )
            self.evidence["stack"] = "stderr_tail"  # the faulthandler dump below, in the result's stderr tail
            if self.finish_failure(failure):
                faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
                sys.stderr.flush()
                os._exit(3)
            return

    def timeout_hint(self, stage: str, limit: float) -> str:
        peer = self.others_label()
        by_stage = {
            "resolve": f"{self.name} could not resolve {self.cmd['master_address']} within {limit:.1f}s: "
            "check DNS or /etc/hosts",
            "connect": f"{self.name} could not reach {peer} within {limit:.1f}s: a firewall may be dropping TCP; "
            "open the store port and Gloo's ephemeral range",
            "store": f"{self.name} waited {limit:.1f}s for {peer} in the store: the peer never arrived or cannot "
            "reach the store",
            "init": f"{self.name} formed the store with {peer} but the {self.cmd['backend']} process group did not "
            f"connect within {limit:.1f}s on interface {self.interface or 'default'}: a firewall may block "
            "Gloo/NCCL's ephemeral ports, or a peer advertises an address others cannot reach (set "
            "GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME to the interface that routes between the hosts)",
        }
        # collective and bandwidth: a peer that stopped mid-collective
        return by_stage.get(
            stage,
            f"{self.name}: an all_reduce with {peer} did not complete within {limit:.1f}s: a peer stopped "
            "responding mid-collective (process stopped or dead, or the link dropped)",
        )

    def result_fields(self, status: str) -> dict[str, Any]:
        self.timings["total_s"] = round(time.time() - PROCESS_STARTED, 4)
        if status not in contract.HARMLESS_STATUSES:
            # Where the bytes stopped: sockets to the peer with unacknowledged data, retransmitting.
            self.evidence["sockets"] = evidence.peer_sockets(self.peer_ip)
        self.evidence["stage_times"] = dict(self.stage_times)
        return {
            "interface": self.interface,
            "versions": self.versions,
            "peer_versions": self.peer_versions,
            "stage_times": self.stage_times,
            "timings": self.timings,
            "extra": self.extra,
            "evidence": self.evidence,
            **getattr(self, "measured", {}),
        }

    def linger(self) -> None:
        """Keep the store up until every rank is done with it; a rank that leaves says so first."""
        if self.store is None:
            return
        try:
            if self.rank:
                self.store.set(f"{KEY}done/{self.rank}", "1")
            else:
                others = [f"{KEY}done/{r}" for r in self.joined if r != 0]
                if others:
                    self.store.wait(others, timedelta(seconds=LINGER_S))
        except Exception:  # a rank that never says goodbye must not keep this one
            pass

    def finish_failure(self, f: StageFailure) -> bool:
        return self.finish(f.status, f.reason, f.hint, f.detail)

    def fail(self, e: BaseException) -> None:
        if isinstance(e, StageFailure):
            self.finish_failure(e)
            return
        if named := self.nccl_failure(e):  # e.g. torch.cuda.set_device on an unusable GPU
            self.finish_failure(named)
        import traceback

        traceback.print_exc()
        if self.stage in ("collective", "bandwidth"):
            self.finish_failure(self.collective_failure(e))
        else:
            self.finish_crashed("probe_crashed", "the probe", e)

    # -- ladder ---------------------------------------------------------------
    def run(self) -> None:
        self.apply_env()
        # torch takes about a second to import: it loads in the background while this rank
        # resolves names, waits for the rendezvous and tests TCP, which need only sockets.
        self.importer = threading.Thread(target=self.import_torch, name="import-torch", daemon=True)
        self.importer.start()
        self.stage_started = time.monotonic()
        rdv_started = time.monotonic()
        store = self.store = self.rendezvous()
        peers = self.exchange(store)
        # The rendezvous's own cost: time spent waiting for the torch import is import_wait_s.
        self.timings["rendezvous_s"] = round(time.monotonic() - rdv_started - self.timings.get("import_wait_s", 0.0), 4)
        self.compare_versions(peers)
        if self.cmd["kind"] == "discover":
            return self.discover(store, peers)
        init_started = time.monotonic()
        self.init_group(store, peers)
        self.timings["init_s"] = round(time.monotonic() - init_started, 4)
        started = time.monotonic()
        self.collective()
        if self.cmd["last_stage"] == "bandwidth":
            self.bandwidth()
        self.timings["collectives_s"] = round(time.monotonic() - started, 4)
        self.finish("ok")

    def import_torch(self) -> None:
        began = time.monotonic()
        try:
            import warnings

            warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
            import torch
            import torch.distributed as dist

            self.torch, self.dist = torch, dist
            self.versions = self.local_versions()
            self.log.emit(event="imported")
        except BaseException as e:  # re-raised in the main thread by need_torch()
            self.import_error = e
        self.timings["import_s"] = round(time.monotonic() - began, 4)

    def need_torch(self) -> None:
        """Wait for the background import; the wait does not count against the current stage."""
        limit, self.stage_limit = self.stage_limit, None
        waited = time.monotonic()
        self.importer.join()
        waited = time.monotonic() - waited
        self.stage_started += waited
        self.timings["import_wait_s"] = round(self.timings.get("import_wait_s", 0.0) + waited, 4)
        self.stage_limit = limit
        if getattr(self, "import_error", None) is not None:
            raise self.import_error

    def apply_env(self) -> None:
        # The command's launch variables win; otherwise pair/group/discover pin the routed
        # interface later, and preflight leaves the job's own defaults alone.
        os.environ.update(self.cmd["env"])

    def local_versions(self) -> dict[str, Any]:
        torch = self.torch
        nccl = None
        try:
            if torch.cuda.is_available():
                v = torch.cuda.nccl.version()
                nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception:
            nccl = None
        return {
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "nccl": nccl,
            "python": ".".join(map(str, sys.version_info[:3])),
        }

    def resolve(self, host: str) -> str:
        box: dict[str, Any] = {}

        def lookup() -> None:
            try:
                box["ip"] = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
            except OSError as e:
                box["error"] = e

        worker = threading.Thread(target=lookup, daemon=True)
        worker.start()
        worker.join(self.t["resolve"])
        if "ip" in box:
            return str(box["ip"])
        if "error" in box:
            raise StageFailure(
                "dns",
                f"{self.name} could not resolve {host!r}: {box['error']}; check the name, "
                "DNS and /etc/hosts on this host",
                detail=str(box["error"]),
            )
        raise StageFailure("dns", self.timeout_hint("resolve", self.t["resolve"]), status="timeout")

    def pick_interface(self, local_ip: str | None, toward: str | None) -> None:
        found = netinfo.interfaces()
        try:
            if local_ip and local_ip not in ("0.0.0.0", "::"):
                self.interface = netinfo.interface_of(local_ip, found)
            if self.interface is None and toward:
                self.interface, _ = netinfo.route_to(toward, found)
        except OSError:
            self.interface = None
        mtu = next((i.get("mtu") for i in found if i["name"] == self.interface), None)
        self.evidence.update(interface=self.interface, mtu=mtu, peer_address=self.peer_ip)
        kind = self.cmd["kind"]
        for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            if var in self.cmd["env"]:
                continue
            if kind != "preflight" and self.interface:
                os.environ[var] = self.interface
            elif kind == "preflight":
                os.environ.pop(var, None)
        if kind == "preflight":
            self.interface = os.environ.get("GLOO_SOCKET_IFNAME") or None
            self.extra["gloo_default"] = gloo_default_address()

    def rendezvous(self) -> Any:
        """The TCPStore every rank shares: rank 0 hosts it and publishes its port, the others look it up and join."""
        rdv = from_spec(
            self.spec["rendezvous"], announce=lambda a, p: self.log.emit(event="listening", address=a, port=p)
        )
        self.enter("resolve", self.t["resolve"])
        if self.rank == 0:
            return self.host_store(rdv)
        return self.join_store(rdv)

    def host_store(self, rdv: Rendezvous) -> Any:
        """Rank 0's side: bind the store on the probe address (port 0 picks one) and publish where it listens."""
        cmd, t = self.cmd, self.t
        bind_ip = self.resolve(cmd["bind_address"])
        self.master_ip = bind_ip
        peer_addr = cmd["peers"][-1]["address"] if cmd["peers"] else None
        self.peer_ip = peer_ip_of(peer_addr) if self.n == 2 else None
        self.pick_interface(bind_ip, peer_addr)
        local = {a for i in netinfo.interfaces() for a in i["addresses"]}
        if bind_ip not in local | {"0.0.0.0"}:
            raise StageFailure(
                "interface_missing",
                f"{self.name}'s probe address {cmd['bind_address']} ({bind_ip}) "
                f"is not an address of this host (it has {', '.join(sorted(local))}): start the "
                "agent with --address set to one of them",
            )
        if not self.importer.is_alive():
            self.need_torch()  # imported already (a warm probe): nothing to tell the peers
        else:
            rdv.publish_importing()  # the peers wait for the port without counting the import
            self.need_torch()
        self.enter("connect", t["connect"], step="bind")
        want = cmd["master_port"] or 0
        try:
            store = self.dist.TCPStore(
                bind_ip, want, self.n, True, timeout=timedelta(seconds=t["store"]), wait_for_workers=False
            )
        except Exception as e:
            failure = self.bind_failure(e, bind_ip, want)
            rdv.publish_failure(failure.reason, failure.hint)
            raise failure from None
        self.port = store.port
        self.extra["store_port"] = self.port
        # Rank 0 hosts the store: the others must be able to connect in.
        self.evidence["store"] = {"role": "listen", "address": f"{bind_ip}:{self.port}"}
        rdv.publish(bind_ip, self.port)
        self.enter("store", t["store"], step="peers")
        return store

    def join_store(self, rdv: Rendezvous) -> Any:
        """Rank 1..N-1's side: read the master's published port, check it answers over TCP, then join its store."""
        cmd, t = self.cmd, self.t
        self.master_ip = self.resolve(cmd["master_address"])
        self.peer_ip = self.master_ip
        self.pick_interface(None, self.master_ip)
        self.enter("store", t["store"], step="rendezvous")
        try:
            self.port = rdv.lookup(t["store"])
        except RendezvousTimeout as e:
            why = (
                "the master started its probe but did not open its store (stuck importing torch, or it "
                "failed before binding: see its own result)"
                if e.master_started
                else "the master never started its probe (offline agent, busy queue, or it failed before binding)"
            )
            raise StageFailure(
                "store_timeout",
                f"{self.name} waited {t['store']:.1f}s for {self.peer_name(0)} to publish its store port: {why}",
                detail=str(e),
                status="timeout",
            ) from None
        except PeerFailed as e:
            raise StageFailure(e.reason, f"master {self.peer_name(0)} failed: {e.hint}") from None
        self.enter("connect", t["connect"])
        self.evidence["store"] = {"role": "connect", "address": f"{self.master_ip}:{self.port}", "connected": False}
        self.tcp_connect(self.master_ip, self.port, rdv.port_known_in_advance)
        self.evidence["store"]["connected"] = True
        self.need_torch()
        self.enter("store", t["store"], step="join")
        try:
            return self.dist.TCPStore(self.master_ip, self.port, self.n, False, timeout=timedelta(seconds=t["store"]))
        except Exception as e:
            raise StageFailure.timed_out(
                "store_timeout",
                f"{self.name} reached {self.master_label()} but could not join its store within {t['store']:.1f}s",
                e,
            ) from None

    def bind_failure(self, e: Exception, ip: str, port: int) -> StageFailure:
        text = str(e)
        if "EADDRINUSE" in text or "already in use" in text.lower():
            holder = netinfo.port_holder(port)
            who = f"held by {holder}" if holder else "held by another process"
            return StageFailure(
                "port_in_use",
                f"port {port} on {self.name} ({ip}) is already in use, {who}: "
                "pick another MASTER_PORT or stop the process holding it",
                detail=first_line(e),
            )
        return StageFailure(
            "port_in_use" if port else "probe_crashed",
            f"{self.name} could not open its store on {ip}:{port}: {first_line(e)}",
            detail=first_line(e),
        )

    def tcp_connect(self, ip: str, port: int, retry_refused: bool) -> None:
        limit = self.t["connect"]
        end = time.monotonic() + limit
        where = f"{self.peer_name(0)} at {ip}:{port}"
        while True:
            left = end - time.monotonic()
            try:
                with socket.create_connection((ip, port), timeout=max(0.05, left)):
                    return
            except ConnectionRefusedError:
                if retry_refused and time.monotonic() + 0.1 < end:
                    time.sleep(0.1)
                    continue
                raise StageFailure(
                    "refused",
                    f"{self.name} got 'connection refused' from {where}: nothing listens "
                    "on that port (the master's store is not up, or a firewall rejects it)",
                ) from None
            except TimeoutError:
                raise StageFailure.timed_out(
                    "connect_timeout",
                    f"{self.name} could not reach {where} within {limit:.1f}s: a "
                    "firewall may be dropping TCP; open the store port and Gloo's ephemeral range",
                ) from None
            except OSError as e:
                raise StageFailure(
                    "unreachable",
                    f"{self.name} has no route to {where} ({e.strerror or e}): check the address and routing",
                    detail=str(e),
                ) from None

    def exchange(self, store: Any) -> dict[int, dict[str, Any]]:
        """Every rank posts its versions and anything that will stop its init; returns all of them."""
        mine = {
            "node": self.name,
            "versions": self.versions,
            "init_problem": self.init_problem(),
            "candidates": netinfo.candidate_interfaces(True) if self.cmd["kind"] == "discover" else [],
        }
        store.set(f"{KEY}info/{self.rank}", json.dumps(mine))
        keys = [f"{KEY}info/{r}" for r in range(self.n)]
        try:
            store.wait(
                keys, timedelta(seconds=max(0.1, (self.stage_limit or 0.0) - (time.monotonic() - self.stage_started)))
            )
        except Exception as e:
            missing = [r for r in range(self.n) if not store.check([keys[r]])]
            self.joined = [r for r in range(self.n) if r not in missing]
            names = ", ".join(f"{self.peer_name(r)} (rank {r})" for r in missing)
            if "store" in self.evidence:
                self.evidence["store"]["connected"] = False
            raise StageFailure.timed_out(
                "store_timeout",
                f"{self.name} waited {self.t['store']:.1f}s in the store on {self.master_label()} for {names}: never arrived",
                e,
            ) from None
        self.joined = list(range(self.n))
        if "store" in self.evidence:
            self.evidence["store"]["connected"] = True  # every rank reached the store
        return {r: json.loads(store.get(k)) for r, k in enumerate(keys)}

    def init_problem(self) -> dict[str, Any] | None:
        for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            value = os.environ.get(var)
            if value and (var.startswith("GLOO") or self.cmd["backend"] == "nccl"):
                problem = netinfo.ifname_setting_problem(var, value)
                if problem:
                    return {"reason": "interface_missing", "text": problem}
        if self.cmd["backend"] == "nccl" and not self.torch.cuda.is_available():
            built = f"torch {self.torch.__version__}, CUDA {self.torch.version.cuda or 'not built in'}"
            return {"reason": "backend_unavailable", "text": f"NCCL needs a CUDA GPU and none is usable ({built})"}
        return None

    def compare_versions(self, peers: dict[int, dict[str, Any]]) -> None:
        for r, info in sorted(peers.items()):
            if r == self.rank:
                continue
            theirs = info["versions"]
            if any(theirs.get(k) != self.versions.get(k) for k in ("torch", "cuda", "nccl")):
                self.peer_versions = dict(theirs, node=info["node"], rank=r)
                self.extra["version_mismatch"] = True
                return
        if self.n == 2:
            self.peer_versions = dict(peers[1 - self.rank]["versions"], node=peers[1 - self.rank]["node"])

    def version_text(self) -> str:
        pv = self.peer_versions
        return (
            f"{self.name} has torch {self.versions['torch']} / CUDA {self.versions['cuda']} / NCCL {self.versions['nccl']}, "
            f"{pv.get('node')} has torch {pv.get('torch')} / CUDA {pv.get('cuda')} / NCCL {pv.get('nccl')}"
        )

    def init_group(self, store: Any, peers: dict[int, dict[str, Any]]) -> None:
        t, dist, torch = self.t, self.dist, self.torch
        self.enter("init", t["init"])
        problems = [(r, p["node"], p["init_problem"]) for r, p in sorted(peers.items()) if p["init_problem"]]
        if problems:
            r, node, problem = next((x for x in problems if x[0] == self.rank), problems[0])
            prefix = "" if r == self.rank else f"rank {r} ({node}) cannot start: "
            raise StageFailure(problem["reason"], prefix + problem["text"])
        pg_timeout = timedelta(seconds=max(t["init"], t["collective"], t["bandwidth"]))
        kwargs = {}
        if self.cmd["backend"] == "nccl":
            self.device = torch.device("cuda", self.rank % torch.cuda.device_count())
            torch.cuda.set_device(self.device)
            kwargs["device_id"] = self.device
        else:
            self.device = torch.device("cpu")
        # Gloo and NCCL listen on an ephemeral port on every rank and connect to each other.
        self.evidence["transport"] = {"role": "listen_and_connect", "connected": False}
        try:
            dist.init_process_group(
                self.cmd["backend"],
                store=dist.PrefixStore(KEY + "pg", store),
                rank=self.rank,
                world_size=self.n,
                timeout=pg_timeout,
                **kwargs,
            )
            self.groups = [None]
            if self.cmd["multi_group"]:
                self.groups.append(dist.new_group(list(range(self.n)), timeout=pg_timeout))
            self.evidence["transport"]["connected"] = True
        except Exception as e:
            line = first_line(e)
            if named := self.nccl_failure(e):
                raise named from None
            if self.extra.get("version_mismatch"):
                raise StageFailure(
                    "version_mismatch",
                    f"process group init failed and versions differ: {self.version_text()}",
                    detail=line,
                ) from None
            status, reason = classify_collective_error(str(e), "init")
            timed_out = status == "timeout"
            hint = (
                self.timeout_hint("init", t["init"])
                if timed_out
                else (
                    f"{self.name} could not form the {self.cmd['backend']} group with {self.master_label()} "
                    f"on interface {self.interface or 'default'}: {line}"
                )
            )
            if self.cmd["kind"] == "preflight" and self.extra["gloo_default"].get("loopback"):
                hint += f"; {self.extra['gloo_default']['note']}"
            raise StageFailure(reason, hint, detail=line, status=status) from None

    def run_collective(self, tensor: Any, group: Any = None, op: Any = None) -> None:
        """One all_reduce (SUM unless op is given); a failure becomes the StageFailure it means."""
        try:
            if op is None:
                self.dist.all_reduce(tensor, group=group)
            else:
                self.dist.all_reduce(tensor, op=op, group=group)
            if tensor.is_cuda:
                self.torch.cuda.synchronize()
        except Exception as e:
            raise self.collective_failure(e) from None

    def collective_failure(self, e: BaseException) -> StageFailure:
        """The one classification of a failed collective: NCCL's own names first, then classify_collective_error."""
        if named := self.nccl_failure(e):
            return named
        line = first_line(e)
        status, reason = classify_collective_error(str(e), self.stage)
        if status == "timeout":
            hint = self.timeout_hint(self.stage, self.stage_limit or self.t.get(self.stage, 0.0))
        elif reason == "transport":
            hint = (
                f"{self.name} lost the connection to {self.others_label()} mid-collective: the peer process "
                "died or the link dropped"
            )
        else:
            hint = f"all_reduce on {self.name} with {self.others_label()} failed: {line[:300]}"
        return StageFailure(reason, hint, detail=line, status=status)

    def nccl_failure(self, e: BaseException) -> StageFailure | None:
        """An NCCL/CUDA error named by agents.nccl_errors; None on the Gloo path or when it names nothing."""
        named = self.cmd["backend"] == "nccl" and nccl_errors.classify(
            str(e), node=self.name, peer=self.others_label(), versions=self.versions, peer_versions=self.peer_versions
        )
        return StageFailure(named.reason, named.hint, detail=first_line(e), status=named.status) if named else None

    def check(self, tensor: Any, what: str) -> None:
        expected = self.n * (self.n + 1) / 2
        if not bool((tensor == expected).all()):
            got = tensor.flatten()[0].item()
            raise StageFailure(
                "data_mismatch",
                f"{what} returned wrong data on {self.name}: expected {expected} in every "
                f"element, got {got} (first element): suspect memory, driver or NIC corruption",
            )

    def collective(self) -> None:
        torch = self.torch
        cmd = self.cmd
        self.enter("collective", self.t["collective"])
        tensor = torch.zeros(1, dtype=torch.float32, device=self.device)
        samples = []
        for i in range(cmd["warmup"] + cmd["latency_iterations"]):
            for group in self.groups:
                tensor.fill_(self.rank + 1)
                began = time.perf_counter()
                self.run_collective(tensor, group)
                took = time.perf_counter() - began
                self.check(tensor, "the small all_reduce" + (" on the second group" if group is not None else ""))
                if group is None and i >= cmd["warmup"]:
                    samples.append(took * 1e6)
        self.measured: dict[str, Any] = {
            "latency_us_p50": round(percentile(samples, 50), 2),
            "latency_us_p99": round(percentile(samples, 99), 2),
        }
        self.evidence["largest_ok_bytes"] = tensor.numel() * tensor.element_size()

    def agree(self, go: bool) -> bool:
        """Every rank must take the same decision, or one waits forever in a collective the others skipped."""
        flag = self.torch.tensor([1.0 if go else 0.0], device=self.device)
        self.run_collective(flag, op=self.dist.ReduceOp.MIN)
        return bool(flag.item() > 0.5)

    def bandwidth(self) -> None:
        torch, cmd = self.torch, self.cmd
        budget = self.t["bandwidth"]
        self.enter("bandwidth", budget + self.t["collective"])
        began = time.monotonic()
        factor = contract.busbw_factor(self.n)
        rows, skipped = [], []
        last = None  # (bytes, seconds per iteration)
        for size in cmd["sizes"]:
            if last is not None:
                estimate = last[1] * size / last[0] * (cmd["warmup"] + cmd["iterations"] + 1)
                go = time.monotonic() - began + estimate <= budget
                if not self.agree(go):
                    skipped = [s for s in cmd["sizes"] if s >= size]
                    break
            numel = max(1, size // 4)
            self.evidence["size_in_flight"] = numel * 4  # a stall here names the size that never completed
            buf = torch.empty(numel, dtype=torch.float32, device=self.device)
            buf.fill_(self.rank + 1)
            self.run_collective(buf)
            self.check(buf, f"all_reduce of {size} bytes")
            buf.zero_()  # zeros stay zeros however often they are summed
            for _ in range(cmd["warmup"]):
                self.run_collective(buf)
            t0 = time.perf_counter()
            for _ in range(cmd["iterations"]):
                self.run_collective(buf)
            per_iter = (time.perf_counter() - t0) / cmd["iterations"]
            nbytes = numel * 4
            algbw = nbytes / per_iter / 1e9
            rows.append(
                {
                    "bytes": nbytes,
                    "time_us": round(per_iter * 1e6, 3),
                    "algbw_gbps": round(algbw, 6),
                    "busbw_gbps": round(algbw * factor, 6),
                    "ok": True,
                }
            )
            last = (nbytes, per_iter)
            self.evidence["largest_ok_bytes"] = max(nbytes, self.evidence.get("largest_ok_bytes") or 0)
            self.evidence.pop("size_in_flight", None)
            self.log.emit(event="size", bytes=nbytes, time_us=rows[-1]["time_us"])
        self.measured["sizes"] = rows
        self.measured["algbw_gbps"] = rows[-1]["algbw_gbps"]
        self.measured["busbw_gbps"] = rows[-1]["busbw_gbps"]
        self.extra["sizes_run"] = [r["bytes"] for r in rows]
        self.extra["sizes_skipped"] = skipped
        self.extra["bandwidth_budget_s"] = budget

    # -- interface discovery ------------------------------------------------------
    def discover(self, store: Any, peers: dict[int, dict[str, Any]]) -> None:
        if self.n != 2:
            raise StageFailure("probe_crashed", "interface discovery runs between two hosts (world_size 2)")
        loop = netinfo.is_loopback(self.master_ip or "")
        lists = [[c for c in peers[r]["candidates"] if c["loopback"] == loop] for r in (0, 1)]
        combos = list(itertools.product(*lists))[: contract.MAX_DISCOVER_COMBINATIONS]
        attempt = min(contract.DISCOVER_ATTEMPT_S, self.t["init"])
        self.enter("init", contract.discover_budget_s(self.t["init"], len(combos)), step="discover")
        rows = [self.try_interfaces(store, peers, i, pair, attempt) for i, pair in enumerate(combos)]
        self.extra["interfaces"] = rows
        good = [r for r in rows if r["ok"]]
        if not rows:
            raise StageFailure(
                "interface_missing",
                f"no candidate interfaces to try between {peers[0]['node']} and "
                f"{peers[1]['node']} (up, with an IPv4 address)",
            )
        if not good:
            tried = "; ".join(f"{r['rank0_interface']}-{r['rank1_interface']}: {r['error']}" for r in rows)
            raise StageFailure(
                "transport", f"no interface combination connects {peers[0]['node']} and {peers[1]['node']} ({tried})"
            )
        self.enter("collective", self.t["collective"])
        self.finish("ok", hint=interface_hint(rows))

    def try_interfaces(
        self, store: Any, peers: dict[int, dict[str, Any]], i: int, pair: tuple[Any, ...], attempt: float
    ) -> dict[str, Any]:
        """One interface combination: a Gloo group over it and a checked all_reduce, then lockstep with the peer."""
        from torch._C._distributed_c10d import ProcessGroupGloo

        torch, dist = self.torch, self.dist
        mine = pair[self.rank]
        row = {
            "rank0_node": peers[0]["node"],
            "rank0_interface": pair[0]["name"],
            "rank0_address": pair[0]["address"],
            "rank1_node": peers[1]["node"],
            "rank1_interface": pair[1]["name"],
            "rank1_address": pair[1]["address"],
        }
        began = time.monotonic()

        def try_combination() -> None:
            try:
                opts = ProcessGroupGloo._Options()  # type: ignore[attr-defined]  # torch's private Gloo options
                opts._devices = [ProcessGroupGloo.create_device(interface=mine["name"])]
                opts._timeout = timedelta(seconds=attempt)
                pg = ProcessGroupGloo(dist.PrefixStore(f"{KEY}discover/{i}", store), self.rank, 2, opts)
                tensor = torch.full((1,), float(self.rank + 1))
                pg.allreduce([tensor]).wait()  # type: ignore[attr-defined]  # bound in C++, untyped
                row["ok"] = bool(tensor.item() == 3.0)
                row["error"] = None if row["ok"] else "wrong sum"
            except Exception as e:
                row["ok"], row["error"] = False, first_line(e)
                row["reason"] = classify_collective_error(str(e), "init")[1]

        # Gloo's own timeout does not bound every wait (a connect on a dead network can
        # outlast it), so each attempt runs in a thread that is given up on, not joined.
        worker = threading.Thread(target=try_combination, daemon=True, name=f"discover-{i}")
        worker.start()
        worker.join(attempt + 1.0)
        if "ok" not in row:
            row["ok"], row["error"] = False, f"no connection within {attempt + 1.0:.0f}s"
            row["reason"] = "transport"
        row["ms"] = round((time.monotonic() - began) * 1000, 1)
        # Lockstep: neither side starts the next combination before both have left this one.
        store.set(f"{KEY}discover/{i}/done/{self.rank}", "1")
        try:
            store.wait(
                [f"{KEY}discover/{i}/done/{1 - self.rank}"],
                timedelta(seconds=attempt + contract.DISCOVER_LOCKSTEP_S + 1.0),
            )
        except Exception as e:
            raise StageFailure.timed_out(
                "transport",
                f"{peers[1 - self.rank]['node']} stopped answering during interface "
                f"discovery (combination {row['rank0_interface']}-{row['rank1_interface']})",
                e,
            ) from None
        return dict(row)


def interface_hint(rows: list[dict[str, Any]]) -> str:
    """Which interface combinations work and fail, and the GLOO/NCCL_SOCKET_IFNAME each side should set."""
    good = [r for r in rows if r["ok"]]
    # One name on both sides first: that is a single setting in a job's launch script.
    best = next((r for r in good if r["rank0_interface"] == r["rank1_interface"]), good[0])

    def combo(r: dict[str, Any]) -> str:
        return f"{r['rank0_node']}:{r['rank0_interface']} <-> {r['rank1_node']}:{r['rank1_interface']}"

    failing = [r for r in rows if not r["ok"]]
    working = ", ".join(combo(r) for r in good) + (
        f"; failing: {', '.join(combo(r) for r in failing)}" if failing else ""
    )
    return (
        f"working: {working}; set GLOO_SOCKET_IFNAME={best['rank0_interface']} "
        f"NCCL_SOCKET_IFNAME={best['rank0_interface']} on {best['rank0_node']} and "
        f"GLOO_SOCKET_IFNAME={best['rank1_interface']} NCCL_SOCKET_IFNAME={best['rank1_interface']} "
        f"on {best['rank1_node']}"
    )


def peer_ip_of(address: str | None) -> str | None:
    """The peer's IPv4 address for reading socket tables; None if it does not resolve at once."""
    if not address:
        return None
    try:
        return str(socket.getaddrinfo(address, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0])
    except OSError:
        return None


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (ours or not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def gloo_default_address() -> dict[str, Any]:
    """What Gloo binds without GLOO_SOCKET_IFNAME: the address the hostname resolves to."""
    host = socket.gethostname()
    try:
        addrs = sorted({str(a[4][0]) for a in socket.getaddrinfo(host, None, socket.AF_INET)})
    except OSError:
        addrs = []
    loop = bool(addrs) and all(netinfo.is_loopback(a) for a in addrs)
    out = {"hostname": host, "resolves_to": addrs, "loopback": loop}
    if loop:
        out["note"] = (
            f"hostname {host} resolves to {', '.join(addrs)}: without GLOO_SOCKET_IFNAME Gloo binds loopback "
            "and other hosts cannot connect"
        )
    return out


def main(argv: list[str] | None = None) -> None:
    run_child(argv, Probe)

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
import socket
import sys
import threading
import time
from datetime import timedelta

from agents import contract, netinfo
from agents.rendezvous import PeerFailed, RendezvousTimeout, from_spec

PROCESS_STARTED = time.time()
KEY = "cluster-health/"  # prefix of every key this probe puts in the store
MAX_DISCOVER_COMBINATIONS = 9
DISCOVER_ATTEMPT_S = 3.0
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


class StageFailure(Exception):
    """The probe stops here, with a reason code and a hint a person can act on."""

    def __init__(self, reason: str, hint: str, detail: str | None = None, status: str = "failed"):
        super().__init__(hint)
        self.reason, self.hint, self.detail, self.status = reason, hint, detail, status


class StageLog:
    """Append-only JSON lines, flushed per event: readable after a SIGKILL."""

    def __init__(self, path: str):
        self.file = open(path, "a", buffering=1)

    def emit(self, **event) -> None:
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


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q / 100.0 * len(ordered) + 0.5)) - 1))]


class Probe:
    """State of one rank climbing the ladder; every exit goes through finish()."""

    def __init__(self, spec: dict, log: StageLog):
        self.spec = spec
        self.cmd = spec["command"]
        self.log = log
        self.rank = self.cmd["rank"]
        self.n = self.cmd["world_size"]
        self.name = self.cmd["node"]
        self.t = self.cmd["timeouts"]
        self.stage = "resolve"
        self.stage_started = time.monotonic()
        self.stage_limit: float | None = None
        self.stage_times: dict[str, float] = {}
        self.timings: dict[str, float] = {"spawn_s": round(PROCESS_STARTED - spec["spawned_at"], 4)}
        self.extra: dict = {}
        self.versions: dict = {}
        self.peer_versions: dict = {}
        self.interface: str | None = None
        self.master_ip: str | None = None
        self.port: int | None = None
        self.lock = threading.Lock()
        self.finished = False
        self.result_path = spec["result_path"]
        self.torch = self.dist = None
        self.store = None
        self.joined: list[int] = []  # ranks seen in the store: the ones rank 0 waits for before it leaves

    # -- naming, for hints ---------------------------------------------------
    def peer_name(self, rank: int) -> str:
        peers = self.cmd["peers"]
        if len(peers) == self.n:
            return peers[rank]["name"]
        if self.n == 2 and len(peers) == 1:
            return peers[0]["name"]
        return self.cmd["master_address"] if rank == 0 else f"rank {rank}"

    def others_label(self) -> str:
        """Who this rank talks to: the master for ranks 1..N-1, every other rank for rank 0."""
        if self.rank:
            return self.master_label()
        return ", ".join(f"{self.peer_name(r)} (rank {r})" for r in range(1, self.n))

    def master_label(self) -> str:
        where = f"{self.master_ip or self.cmd['master_address']}:{self.port}" if self.port else self.cmd["master_address"]
        return f"{self.peer_name(0)} ({where})" if self.rank else f"{self.name} ({where})"

    # -- stages ---------------------------------------------------------------
    def enter(self, stage: str, limit_s: float, step: str | None = None) -> None:
        now = time.monotonic()
        self.stage_times[self.stage] = round(self.stage_times.get(self.stage, 0.0) + now - self.stage_started, 4)
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
            limit = self.stage_limit
            if limit is None or time.monotonic() - self.stage_started <= limit + WATCHDOG_GRACE_S:
                continue
            failure = StageFailure(
                TIMEOUT_REASONS[self.stage], self.timeout_hint(self.stage, limit),
                detail=f"stage {self.stage} did not finish within its {limit:.1f}s timeout", status="timeout",
            )
            if self.finish_failure(failure):
                faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
                sys.stderr.flush()
                os._exit(3)
            return

    def timeout_hint(self, stage: str, limit: float) -> str:
        peer = self.others_label()
        if stage == "resolve":
            return f"{self.name} could not resolve {self.cmd['master_address']} within {limit:.1f}s: check DNS or /etc/hosts"
        if stage == "connect":
            return (f"{self.name} could not reach {peer} within {limit:.1f}s: a firewall may be dropping TCP; "
                    "open the store port and Gloo's ephemeral range")
        if stage == "store":
            return f"{self.name} waited {limit:.1f}s for {peer} in the store: the peer never arrived or cannot reach the store"
        if stage == "init":
            return (f"{self.name} formed the store with {peer} but the {self.cmd['backend']} process group did not connect "
                    f"within {limit:.1f}s on interface {self.interface or 'default'}: a firewall may block Gloo/NCCL's "
                    "ephemeral ports, or a peer advertises an address others cannot reach (set GLOO_SOCKET_IFNAME / "
                    "NCCL_SOCKET_IFNAME to the interface that routes between the hosts)")
        return (f"{self.name}: an all_reduce with {peer} did not complete within {limit:.1f}s: a peer stopped "
                "responding mid-collective (process stopped or dead, or the link dropped)")

    def finish(self, status: str, reason: str | None = None, hint: str | None = None, detail: str | None = None) -> bool:
        """Write the result once; the watchdog and the main thread may race here."""
        with self.lock:
            if self.finished:
                return False
            self.finished = True
            self.stage_limit = None
        now = time.monotonic()
        self.stage_times[self.stage] = round(self.stage_times.get(self.stage, 0.0) + now - self.stage_started, 4)
        self.timings["total_s"] = round(time.time() - PROCESS_STARTED, 4)
        result = {
            "status": status, "stage": self.stage, "reason": reason, "hint": hint, "detail": detail,
            "interface": self.interface, "versions": self.versions, "peer_versions": self.peer_versions,
            "stage_times": self.stage_times, "timings": self.timings, "extra": self.extra,
        }
        result.update(getattr(self, "measured", {}))
        tmp = self.result_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f)
        os.replace(tmp, self.result_path)
        self.log.emit(event="finished", status=status, stage=self.stage, reason=reason)
        return True

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
        self.timings["rendezvous_s"] = round(
            time.monotonic() - rdv_started - self.timings.get("import_wait_s", 0.0), 4)
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

    def local_versions(self) -> dict:
        torch = self.torch
        nccl = None
        try:
            if torch.cuda.is_available():
                v = torch.cuda.nccl.version()
                nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception:
            nccl = None
        return {
            "torch": torch.__version__, "cuda": torch.version.cuda, "nccl": nccl,
            "python": ".".join(map(str, sys.version_info[:3])),
        }

    def resolve(self, host: str) -> str:
        box: dict = {}

        def lookup():
            try:
                box["ip"] = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
            except OSError as e:
                box["error"] = e

        worker = threading.Thread(target=lookup, daemon=True)
        worker.start()
        worker.join(self.t["resolve"])
        if "ip" in box:
            return box["ip"]
        if "error" in box:
            raise StageFailure("dns", f"{self.name} could not resolve {host!r}: {box['error']}; check the name, "
                               "DNS and /etc/hosts on this host", detail=str(box["error"]))
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

    def rendezvous(self):
        cmd, t = self.cmd, self.t
        rdv = from_spec(self.spec["rendezvous"], announce=lambda a, p: self.log.emit(event="listening", address=a, port=p))
        self.enter("resolve", t["resolve"])
        if self.rank == 0:
            bind_ip = self.resolve(cmd["bind_address"])
            self.master_ip = bind_ip
            peer_addr = cmd["peers"][-1]["address"] if cmd["peers"] else None
            self.pick_interface(bind_ip, peer_addr)
            local = {a for i in netinfo.interfaces() for a in i["addresses"]}
            if bind_ip not in local | {"0.0.0.0"}:
                raise StageFailure("interface_missing", f"{self.name}'s probe address {cmd['bind_address']} ({bind_ip}) "
                                   f"is not an address of this host (it has {', '.join(sorted(local))}): start the "
                                   "agent with --address set to one of them")
            self.need_torch()
            self.enter("connect", t["connect"], step="bind")
            want = cmd["master_port"] or 0
            try:
                store = self.dist.TCPStore(bind_ip, want, self.n, True, timeout=timedelta(seconds=t["store"]),
                                      wait_for_workers=False)
            except Exception as e:
                failure = self.bind_failure(e, bind_ip, want)
                rdv.publish_failure(failure.reason, failure.hint)
                raise failure
            self.port = store.port
            self.extra["store_port"] = self.port
            rdv.publish(bind_ip, self.port)
            self.enter("store", t["store"], step="peers")
            return store
        self.master_ip = self.resolve(cmd["master_address"])
        self.pick_interface(None, self.master_ip)
        self.enter("store", t["store"], step="rendezvous")
        try:
            self.port = rdv.lookup(t["store"])
        except RendezvousTimeout as e:
            raise StageFailure(
                "store_timeout",
                f"{self.name} waited {t['store']:.1f}s for {self.peer_name(0)} to publish its store port: "
                "the master never started its probe (offline agent, busy queue, or it failed before binding)",
                detail=str(e), status="timeout")
        except PeerFailed as e:
            raise StageFailure(e.reason, f"master {self.peer_name(0)} failed: {e.hint}")
        self.enter("connect", t["connect"])
        self.tcp_connect(self.master_ip, self.port, rdv.port_known_in_advance)
        self.need_torch()
        self.enter("store", t["store"], step="join")
        try:
            return self.dist.TCPStore(self.master_ip, self.port, self.n, False, timeout=timedelta(seconds=t["store"]))
        except Exception as e:
            raise StageFailure("store_timeout", f"{self.name} reached {self.master_label()} but could not join its "
                               f"store within {t['store']:.1f}s", detail=first_line(e), status="timeout")

    def bind_failure(self, e: Exception, ip: str, port: int) -> StageFailure:
        text = str(e)
        if "EADDRINUSE" in text or "already in use" in text.lower():
            holder = netinfo.port_holder(port)
            who = f"held by {holder}" if holder else "held by another process"
            return StageFailure("port_in_use", f"port {port} on {self.name} ({ip}) is already in use, {who}: "
                                "pick another MASTER_PORT or stop the process holding it", detail=first_line(e))
        return StageFailure("port_in_use" if port else "probe_crashed",
                            f"{self.name} could not open its store on {ip}:{port}: {first_line(e)}", detail=first_line(e))

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
                raise StageFailure("refused", f"{self.name} got 'connection refused' from {where}: nothing listens "
                                   "on that port (the master's store is not up, or a firewall rejects it)")
            except (socket.timeout, TimeoutError):
                raise StageFailure("connect_timeout", f"{self.name} could not reach {where} within {limit:.1f}s: a "
                                   "firewall may be dropping TCP; open the store port and Gloo's ephemeral range",
                                   status="timeout")
            except OSError as e:
                raise StageFailure("unreachable", f"{self.name} has no route to {where} "
                                   f"({e.strerror or e}): check the address and routing", detail=str(e))

    def exchange(self, store) -> dict[int, dict]:
        """Every rank posts its versions and anything that will stop its init; returns all of them."""
        mine = {"node": self.name, "versions": self.versions, "init_problem": self.init_problem(),
                "candidates": netinfo.candidate_interfaces(True) if self.cmd["kind"] == "discover" else []}
        store.set(f"{KEY}info/{self.rank}", json.dumps(mine))
        keys = [f"{KEY}info/{r}" for r in range(self.n)]
        try:
            store.wait(keys, timedelta(seconds=max(0.1, self.stage_limit - (time.monotonic() - self.stage_started))))
        except Exception as e:
            missing = [r for r in range(self.n) if not store.check([keys[r]])]
            self.joined = [r for r in range(self.n) if r not in missing]
            names = ", ".join(f"{self.peer_name(r)} (rank {r})" for r in missing)
            raise StageFailure("store_timeout", f"{self.name} waited {self.t['store']:.1f}s in the store on "
                               f"{self.master_label()} for {names}: never arrived", detail=first_line(e), status="timeout")
        self.joined = list(range(self.n))
        return {r: json.loads(store.get(k)) for r, k in enumerate(keys)}

    def init_problem(self) -> dict | None:
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

    def compare_versions(self, peers: dict[int, dict]) -> None:
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
        return (f"{self.name} has torch {self.versions['torch']} / CUDA {self.versions['cuda']} / NCCL {self.versions['nccl']}, "
                f"{pv.get('node')} has torch {pv.get('torch')} / CUDA {pv.get('cuda')} / NCCL {pv.get('nccl')}")

    def init_group(self, store, peers: dict[int, dict]) -> None:
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
        try:
            dist.init_process_group(self.cmd["backend"], store=dist.PrefixStore(KEY + "pg", store), rank=self.rank,
                                    world_size=self.n, timeout=pg_timeout, **kwargs)
            self.groups = [None]
            if self.cmd["multi_group"]:
                self.groups.append(dist.new_group(list(range(self.n)), timeout=pg_timeout))
        except Exception as e:
            line = first_line(e)
            if self.extra.get("version_mismatch"):
                raise StageFailure("version_mismatch", f"process group init failed and versions differ: {self.version_text()}",
                                   detail=line)
            timed_out = "timeout" in line.lower() or "timed out" in line.lower()
            hint = self.timeout_hint("init", t["init"]) if timed_out else (
                f"{self.name} could not form the {self.cmd['backend']} group with {self.master_label()} "
                f"on interface {self.interface or 'default'}: {line}")
            if self.cmd["kind"] == "preflight" and self.extra["gloo_default"].get("loopback"):
                hint += f"; {self.extra['gloo_default']['note']}"
            raise StageFailure("transport", hint, detail=line, status="timeout" if timed_out else "failed")

    def run_collective(self, tensor, group=None) -> None:
        try:
            self.dist.all_reduce(tensor, group=group)
            if tensor.is_cuda:
                self.torch.cuda.synchronize()
        except Exception as e:
            line = first_line(e)
            low = line.lower()
            if "timed out" in low or "timeout" in low:
                raise StageFailure("collective_timeout", self.timeout_hint(self.stage, self.stage_limit),
                                   detail=line, status="timeout")
            # Gloo's TCP transport words a dead peer several ways, depending on which side of
            # the socket noticed first (read, write, or the pair's own state machine).
            peer_gone = any(w in low for w in (
                "connection reset", "connection closed", "closed by peer", "broken pipe", "eof",
                "read error", "write error", "socket closed", "transport/tcp", "connection refused",
                "no route to host"))
            if peer_gone:
                raise StageFailure("transport", f"{self.name} lost the connection to {self.others_label()} "
                                   "mid-collective: the peer process died or the link dropped", detail=line)
            raise StageFailure("collective_error", f"all_reduce on {self.name} with {self.others_label()} failed: "
                               f"{line[:300]}", detail=line)

    def check(self, tensor, what: str) -> None:
        expected = self.n * (self.n + 1) / 2
        if not bool((tensor == expected).all()):
            got = tensor.flatten()[0].item()
            raise StageFailure("data_mismatch", f"{what} returned wrong data on {self.name}: expected {expected} in every "
                               f"element, got {got} (first element): suspect memory, driver or NIC corruption")

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
        self.measured = {"latency_us_p50": round(percentile(samples, 50), 2),
                         "latency_us_p99": round(percentile(samples, 99), 2)}

    def agree(self, go: bool) -> bool:
        """Every rank must take the same decision, or one waits forever in a collective the others skipped."""
        flag = self.torch.tensor([1.0 if go else 0.0], device=self.device)
        self.dist.all_reduce(flag, op=self.dist.ReduceOp.MIN)
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
            rows.append({"bytes": nbytes, "time_us": round(per_iter * 1e6, 3), "algbw_gbps": round(algbw, 6),
                         "busbw_gbps": round(algbw * factor, 6), "ok": True})
            last = (nbytes, per_iter)
            self.log.emit(event="size", bytes=nbytes, time_us=rows[-1]["time_us"])
        self.measured["sizes"] = rows
        self.measured["algbw_gbps"] = rows[-1]["algbw_gbps"]
        self.measured["busbw_gbps"] = rows[-1]["busbw_gbps"]
        self.extra["sizes_run"] = [r["bytes"] for r in rows]
        self.extra["sizes_skipped"] = skipped
        self.extra["bandwidth_budget_s"] = budget

    # -- interface discovery ------------------------------------------------------
    def discover(self, store, peers: dict[int, dict]) -> None:
        if self.n != 2:
            raise StageFailure("probe_crashed", "interface discovery runs between two hosts (world_size 2)")
        from torch._C._distributed_c10d import ProcessGroupGloo

        torch, dist = self.torch, self.dist
        loop = netinfo.is_loopback(self.master_ip)
        lists = [[c for c in peers[r]["candidates"] if c["loopback"] == loop] for r in (0, 1)]
        combos = list(itertools.product(*lists))[:MAX_DISCOVER_COMBINATIONS]
        attempt = min(DISCOVER_ATTEMPT_S, self.t["init"])
        self.enter("init", discover_budget_s(self.t["init"], len(combos)), step="discover")
        rows = []
        for i, pair in enumerate(combos):
            mine = pair[self.rank]
            row = {"rank0_node": peers[0]["node"], "rank0_interface": pair[0]["name"], "rank0_address": pair[0]["address"],
                   "rank1_node": peers[1]["node"], "rank1_interface": pair[1]["name"], "rank1_address": pair[1]["address"]}
            began = time.monotonic()

            def try_combination(i=i, mine=mine, row=row):
                try:
                    opts = ProcessGroupGloo._Options()
                    opts._devices = [ProcessGroupGloo.create_device(interface=mine["name"])]
                    opts._timeout = timedelta(seconds=attempt)
                    pg = ProcessGroupGloo(dist.PrefixStore(f"{KEY}discover/{i}", store), self.rank, 2, opts)
                    tensor = torch.full((1,), float(self.rank + 1))
                    pg.allreduce([tensor]).wait()
                    row["ok"] = bool(tensor.item() == 3.0)
                    row["error"] = None if row["ok"] else "wrong sum"
                except Exception as e:
                    row["ok"], row["error"] = False, first_line(e)

            # Gloo's own timeout does not bound every wait (a connect on a dead network can
            # outlast it), so each attempt runs in a thread that is given up on, not joined.
            worker = threading.Thread(target=try_combination, daemon=True, name=f"discover-{i}")
            worker.start()
            worker.join(attempt + 1.0)
            if "ok" not in row:
                row["ok"], row["error"] = False, f"no connection within {attempt + 1.0:.0f}s"
            row["ms"] = round((time.monotonic() - began) * 1000, 1)
            rows.append(dict(row))
            # Lockstep: neither side starts the next combination before both have left this one.
            store.set(f"{KEY}discover/{i}/done/{self.rank}", "1")
            try:
                store.wait([f"{KEY}discover/{i}/done/{1 - self.rank}"], timedelta(seconds=attempt + 4.0))
            except Exception as e:
                raise StageFailure("transport", f"{peers[1 - self.rank]['node']} stopped answering during interface "
                                   f"discovery (combination {row['rank0_interface']}-{row['rank1_interface']})",
                                   detail=first_line(e), status="timeout") from None
        self.extra["interfaces"] = rows
        good = [r for r in rows if r["ok"]]
        if not rows:
            raise StageFailure("interface_missing", f"no candidate interfaces to try between {peers[0]['node']} and "
                               f"{peers[1]['node']} (up, with an IPv4 address)")
        if not good:
            tried = "; ".join(f"{r['rank0_interface']}-{r['rank1_interface']}: {r['error']}" for r in rows)
            raise StageFailure("transport", f"no interface combination connects {peers[0]['node']} and {peers[1]['node']} "
                               f"({tried})")
        self.enter("collective", self.t["collective"])
        # One name on both sides first: that is a single setting in a job's launch script.
        best = next((r for r in good if r["rank0_interface"] == r["rank1_interface"]), good[0])

        def combo(r):
            return f"{r['rank0_node']}:{r['rank0_interface']} <-> {r['rank1_node']}:{r['rank1_interface']}"

        failing = [r for r in rows if not r["ok"]]
        working = ", ".join(combo(r) for r in good) + (
            f"; failing: {', '.join(combo(r) for r in failing)}" if failing else "")
        self.finish("ok", hint=(
            f"working: {working}; set GLOO_SOCKET_IFNAME={best['rank0_interface']} "
            f"NCCL_SOCKET_IFNAME={best['rank0_interface']} on {best['rank0_node']} and "
            f"GLOO_SOCKET_IFNAME={best['rank1_interface']} NCCL_SOCKET_IFNAME={best['rank1_interface']} "
            f"on {best['rank1_node']}"))


def discover_budget_s(init_timeout_s: float, combinations: int = MAX_DISCOVER_COMBINATIONS) -> float:
    """Time the discover step may take: each combination's Gloo attempt, plus the lockstep wait after it."""
    return combinations * (min(DISCOVER_ATTEMPT_S, init_timeout_s) + 3.0) + 2.0


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (ours or not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def gloo_default_address() -> dict:
    """What Gloo binds without GLOO_SOCKET_IFNAME: the address the hostname resolves to."""
    host = socket.gethostname()
    try:
        addrs = sorted({a[4][0] for a in socket.getaddrinfo(host, None, socket.AF_INET)})
    except OSError:
        addrs = []
    loop = bool(addrs) and all(netinfo.is_loopback(a) for a in addrs)
    out = {"hostname": host, "resolves_to": addrs, "loopback": loop}
    if loop:
        out["note"] = (f"hostname {host} resolves to {', '.join(addrs)}: without GLOO_SOCKET_IFNAME Gloo binds loopback "
                       "and other hosts cannot connect")
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as f:
        spec = json.load(f)
    log = StageLog(spec["events_path"])
    log.emit(event="started", pid=os.getpid())
    probe = Probe(spec, log)
    threading.Thread(target=probe.watchdog, daemon=True, name="stage-watchdog").start()
    try:
        probe.run()
    except StageFailure as f:
        probe.finish_failure(f)
    except BaseException as e:  # the result must say what went wrong, whatever it was
        reason = "collective_error" if probe.stage in ("collective", "bandwidth") else "probe_crashed"
        import traceback

        traceback.print_exc()
        probe.finish("failed", reason, f"the probe on {probe.name} failed in stage {probe.stage}: {first_line(e)}",
                     detail=first_line(e))
    probe.linger()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: destroying a process group whose peer is gone can block.
    os._exit(0)


if __name__ == "__main__":
    main()

"""Run one probe half in a fresh process and hold it to its wall-clock deadline.

`run_probe(command, broker_url)` is what the agent's Celery task, the pair CLI
and the tests call. The probe process is forked from the agent's warm probe
process when one is ready (agents/warmhost.py: torch already imported, CUDA
never touched), or else started cold as `python -m agents.probe` (exec, never
a fork of a process that imported torch or CUDA). Either way it runs in its
own session, so that on expiry the whole process group is stopped: evidence
first (its stage log, a py-spy dump where py-spy is installed), then SIGTERM,
then SIGKILL.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agents import child_env, contract, evidence, run_tool
from agents.probe import TIMEOUT_REASONS, pid_alive
from agents.warmhost import DEFAULT_IDLE_S, WarmHost, WarmHostError

log = logging.getLogger(__name__)

TERM_GRACE_S = 1.0
PY_SPY_TIMEOUT_S = 5.0
STACK_LIMIT = 8000

# C++ frames, tracebacks, and torch's own warning lines ("[W1121 ...]", "[rank0]:[W1121 ...]").
_NOISE = re.compile(
    r"^(frame #|Exception raised from|File \"|Traceback|\^|~|warnings\.warn|cpu = _conversion"
    r"|(\[rank\d+\]:)?\[[WI]\d{4} )"
)
_TELLING = re.compile(r"(Error|Exception|error:|timed out|Timeout|refused|reset by peer|closed|EADDRINUSE)", re.I)

# What an overrun most likely means, by the stage the stage log shows.
STAGE_HINTS = {
    "resolve": "name resolution hung: check DNS and /etc/hosts",
    "connect": "TCP to the master never completed: a firewall may be dropping the store port",
    "store": "the peer never arrived in the store",
    "init": "the process group never connected: check GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME and the firewall",
    "collective": "a collective never completed: a peer stopped responding (process stopped or dead, or the link dropped)",
    "bandwidth": "a collective never completed: a peer stopped responding (process stopped or dead, or the link dropped)",
}


def explanatory_line(stderr: str) -> str | None:
    """The one line of a noisy torch stderr that says what went wrong (the last telling line)."""
    for raw in reversed(stderr.splitlines()):
        line = raw.strip()
        if line and not _NOISE.match(line) and _TELLING.search(line):
            return line[:400]
    return None


def rendezvous_spec(command: dict[str, Any], broker_url: str | None, port: int | None) -> dict[str, Any]:
    if port is not None:
        return {"kind": "manual", "port": port}
    if broker_url:
        return {
            "kind": "redis",
            "url": broker_url,
            "id": command["rendezvous"],
            "master": contract.master_node(command),  # the node whose broker user may write the key
            "ttl_s": command["deadline_s"] + 60,
            "key": command.get("rendezvous_key"),
        }
    return {"kind": "manual", "port": None}


def _read_events(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return [], offset
    end = data.rfind(b"\n") + 1
    events: list[dict[str, Any]] = []
    for line in data[:end].splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events, offset + end


def _py_spy_dump(pid: int) -> str | None:
    try:
        out = run_tool("py-spy", ["dump", "--pid", str(pid)], PY_SPY_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"py-spy dump failed: {e}"
    return (out.stdout + out.stderr)[-STACK_LIMIT:] if out is not None else None


class _ColdProbe:
    """A probe started as `python -m agents.probe`: a child of this process."""

    def __init__(self, proc: subprocess.Popen[bytes]):
        self.proc, self.pid = proc, proc.pid

    def done(self) -> bool:
        return self.proc.poll() is not None

    def wait(self, timeout: float) -> bool:
        try:
            self.proc.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode


class _WarmProbe:
    """A probe forked by the warm host: the host reaps it and reports its exit code."""

    def __init__(self, host: WarmHost, pid: int):
        self.host, self.pid = host, pid
        self.returncode: int | None = None

    def done(self) -> bool:
        if self.returncode is None:
            self.returncode = self.host.exit_code(self.pid)
        if self.returncode is not None:
            return True
        # A host that died leaves its children to init, which reaps them: gone means done.
        return not self.host.alive() and not pid_alive(self.pid)

    def wait(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while not self.done():
            left = end - time.monotonic()
            if left <= 0:
                return False
            if self.host.alive():
                self.host.wait(self.pid, left)  # returns at the exit report, the host's death or the timeout
            else:
                time.sleep(min(0.05, left))  # orphaned: init reaps it; nothing to be woken by
        self.host.forget(self.pid)
        return True


_Probe = _ColdProbe | _WarmProbe


def _stop_group(probe: _Probe) -> None:
    for sig, wait in ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, 5.0)):
        _signal_group(probe.pid, sig)
        if probe.wait(wait):
            break
    # The leader may be gone while children linger in the group.
    _signal_group(probe.pid, signal.SIGKILL)


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the whole group is gone already
        os.killpg(pid, sig)


# -- the warm probe process ---------------------------------------------------------------

_warm_lock = threading.Lock()
_warm: WarmHost | None = None
_warm_starting = False
_warm_generation = 0  # bumped by shutdown: a start still under way then closes what it started
_warm_failed_at = float("-inf")
WARM_RETRY_S = 60.0


def warm_enabled() -> bool:
    return os.environ.get("CLUSTER_HEALTH_WARM_PROBES", "1").strip().lower() not in ("0", "false", "no", "off")


def _start_warm_host(generation: int) -> None:
    global _warm, _warm_starting, _warm_failed_at
    idle_s = float(os.environ.get("CLUSTER_HEALTH_WARM_IDLE_S", DEFAULT_IDLE_S))
    host = WarmHost(env=child_env(PYTHONUNBUFFERED="1"), idle_s=idle_s)
    try:
        host.start()
    except (OSError, WarmHostError) as e:
        log.warning("warm probe process unavailable, probes start cold: %s", e)
        with _warm_lock:
            if generation == _warm_generation:
                _warm_starting, _warm_failed_at = False, time.monotonic()
        return
    with _warm_lock:
        current = generation == _warm_generation
        if current:
            _warm, _warm_starting = host, False
    if not current:
        host.close()


def prewarm() -> None:
    """Start the warm probe process in the background, unless it runs, is starting or is turned off.

    Never waits for it: a probe that finds no warm host ready starts cold instead.
    """
    global _warm_starting
    if not warm_enabled():
        return
    with _warm_lock:
        if (_warm is not None and _warm.alive()) or _warm_starting or time.monotonic() - _warm_failed_at < WARM_RETRY_S:
            return
        _warm_starting = True
        generation = _warm_generation
    threading.Thread(target=_start_warm_host, args=(generation,), name="warmhost-start", daemon=True).start()


def warm_host() -> WarmHost | None:
    """The running warm host, or None (and one is started for the next probe)."""
    if not warm_enabled():
        return None
    with _warm_lock:
        host = _warm if _warm is not None and _warm.alive() else None
    if host is None:
        prewarm()
    return host


def shutdown_warm_host() -> None:
    global _warm, _warm_starting, _warm_generation
    with _warm_lock:
        host, _warm, _warm_starting = _warm, None, False
        _warm_generation += 1
    if host is not None:
        host.close()


# -- leftovers of an agent that was killed ------------------------------------------------

TMP_PREFIX = "cluster-health-probe-"


def remove_orphaned_dirs(base: str | None = None) -> list[str]:
    """Remove probe working directories whose agent process is gone (killed before it could clean up)."""
    base = base or tempfile.gettempdir()
    removed: list[str] = []
    try:
        names = os.listdir(base)
    except OSError:
        return removed
    for name in names:
        m = re.fullmatch(re.escape(TMP_PREFIX) + r"(\d+)-.+", name)
        if not m or int(m.group(1)) == os.getpid() or pid_alive(int(m.group(1))):
            continue
        path = os.path.join(base, name)
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _exit_text(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name} (exit code {returncode})"
        except ValueError:
            pass
    return f"exited with code {returncode}"


def base_result(command: dict[str, Any]) -> dict[str, Any]:
    return {
        "v": contract.VERSION,
        "kind": command.get("kind", "pair"),
        "probe_id": command.get("probe_id"),
        "sweep_id": command.get("sweep_id"),
        "node": command.get("node"),
        "rank": command.get("rank", 0),
    }


def failed_result(
    command: dict[str, Any], reason: str, hint: str, detail: str | None = None, stage: str = "resolve"
) -> dict[str, Any]:
    """A result for a command that never reached a probe (refused, expired, crashed runner)."""
    return {
        **base_result(command),
        "status": "failed",
        "stage": stage,
        "reason": reason,
        "hint": hint,
        "detail": detail,
        "finished_at": time.time(),
    }


@contextmanager
def child_dir() -> Iterator[tuple[Path, Path, Path, Path]]:
    """A scratch directory for one child process: the directory, then its stage log, result and output paths."""
    with tempfile.TemporaryDirectory(prefix=f"{TMP_PREFIX}{os.getpid()}-") as tmp:
        tmpdir = Path(tmp)
        yield tmpdir, tmpdir / "stages.jsonl", tmpdir / "result.json", tmpdir / "output.log"


def child_output(result_path: Path, output_path: Path) -> tuple[str, dict[str, Any] | None]:
    """What a finished child left in its directory: its output text and its result (None if it wrote none)."""
    output = output_path.read_text(errors="replace") if output_path.exists() else ""
    return output, json.loads(result_path.read_text()) if result_path.exists() else None


def run_probe(
    command: dict[str, Any],
    broker_url: str | None = None,
    *,
    port: int | None = None,
    on_event: Callable[[dict[str, Any]], object] | None = None,
    python: str | None = None,
) -> dict[str, Any]:
    """Run one half of a probe and return its result (contract.validate_result shape).

    command is validated first (ContractError if it is not a valid command).
    broker_url: Redis URL for the rendezvous; port: the master's store port given
    by hand instead (the pair CLI). on_event(event) sees each stage-log event as
    it is written (the pair CLI prints ADDR:PORT from the "listening" event).
    Never blocks longer than the command's deadline_s plus the kill grace.
    """
    cmd = contract.validate_command(command)
    started = time.monotonic()
    with child_dir() as (tmpdir, events_path, result_path, output_path):
        spec = {
            "command": cmd,
            "rendezvous": rendezvous_spec(cmd, broker_url, port),
            "events_path": str(events_path),
            "result_path": str(result_path),
            "spawned_at": time.time(),
            "runner_pid": os.getpid(),
        }
        (tmpdir / "spec.json").write_text(json.dumps(spec))
        # The namespace's TCP counters around the probe: its retransmissions and resets (and any other traffic's).
        counters_before = evidence.tcp_counters()
        probe = _start(tmpdir, output_path, python)
        deadline = started + cmd["deadline_s"]
        offset, events, stack = 0, [], None
        killed = False
        try:
            while True:
                new, offset = _read_events(events_path, offset)
                events += new
                if on_event:
                    for event in new:
                        on_event(event)
                if probe.done():
                    break
                if time.monotonic() >= deadline:
                    killed = True
                    stack = _py_spy_dump(probe.pid)
                    break
                time.sleep(0.02)
        finally:
            _stop_group(probe)
        tcp = evidence.tcp_delta(counters_before, evidence.tcp_counters())
        new, offset = _read_events(events_path, offset)
        events += new
        output, probe_result = child_output(result_path, output_path)
    return _finish(
        cmd,
        probe_result,
        events,
        output,
        killed,
        stack,
        probe.returncode,
        time.monotonic() - started,
        tcp=tcp,
        cold=isinstance(probe, _ColdProbe),
    )


def _start(tmpdir: Path, output_path: Path, python: str | None) -> _Probe:
    """Fork the probe from the warm host when one is ready, else start it cold (`python -m agents.probe`)."""
    host = None if python else warm_host()
    if host is not None:
        try:
            return _WarmProbe(host, host.spawn(str(tmpdir / "spec.json"), str(output_path), str(tmpdir)))
        except WarmHostError as e:
            log.warning("warm probe process failed, starting this probe cold: %s", e)
    return start_cold("agents.probe", tmpdir, output_path, python)


def start_cold(module: str, tmpdir: Path, output_path: Path, python: str | None) -> _ColdProbe:
    """Start `python -m <module> <tmpdir>/spec.json` in a session of its own, its output going to output_path."""
    with open(output_path, "wb") as out:
        proc = subprocess.Popen(
            [python or sys.executable, "-m", module, str(tmpdir / "spec.json")],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=tmpdir,
            env=child_env(PYTHONUNBUFFERED="1"),
        )
    return _ColdProbe(proc)


def _finish(
    cmd: dict[str, Any],
    probe_result: dict[str, Any] | None,
    events: list[dict[str, Any]],
    output: str,
    killed: bool,
    stack: str | None,
    returncode: int | None,
    elapsed: float,
    tcp: dict[str, Any] | None = None,
    cold: bool = False,
) -> dict[str, Any]:
    """The half's result: the probe's own, or one saying how the child ended without it; evidence added, validated.

    ``cold``: the probe imported torch itself (no warm host was ready, as right after the agent
    started, while the warm host imports it too): its load says so, since its figures are not
    what the node does warm.
    """
    stages = [e for e in events if e.get("event") == "stage"]
    stage = stages[-1]["stage"] if stages else "resolve"
    line = explanatory_line(output)
    result = base_result(cmd)
    if probe_result is not None:
        result.update(probe_result)
    else:
        result.update(_no_result_failure(cmd, events, stages, stage, line, killed, returncode))
    if result.get("detail") is None and result["status"] != "ok":
        result["detail"] = line
    result["extra"], result["evidence"] = _half_evidence(cmd, result, events, output, line, killed, stack, tcp)
    if cold and isinstance(result["evidence"].get("load"), dict):
        result["evidence"]["load"]["cold"] = True
    return closed_result(
        result,
        output,
        elapsed,
        contract.validate_result,
        lambda e: failed_result(
            cmd, "probe_crashed", f"the probe wrote an invalid result: {e}", detail=str(e), stage=stage
        ),
    )


def _no_result_failure(
    cmd: dict[str, Any],
    events: list[dict[str, Any]],
    stages: list[dict[str, Any]],
    stage: str,
    line: str | None,
    killed: bool,
    returncode: int | None,
) -> dict[str, Any]:
    """Status, stage, reason, hint and detail of a probe that wrote no result: stopped at its deadline, or crashed."""
    if killed:
        entered = stages[-1]["t"] - events[0]["t"] if stages and events else 0.0
        return dict(
            status="timeout",
            stage=stage,
            reason=TIMEOUT_REASONS[stage],
            hint=(
                f"the probe on {cmd['node']} was stopped at its {cmd['deadline_s']:.1f}s deadline in stage {stage} "
                f"(entered {entered:.1f}s after start): {STAGE_HINTS[stage]}"
            ),
            detail=line or f"no output explains it; stage log: {[s['stage'] for s in stages]}",
        )
    return dict(
        status="failed",
        stage=stage,
        reason="probe_crashed",
        hint=f"the probe process on {cmd['node']} {_exit_text(returncode)} in stage {stage} without a result",
        detail=line,
    )


def _half_evidence(
    cmd: dict[str, Any],
    result: dict[str, Any],
    events: list[dict[str, Any]],
    output: str,
    line: str | None,
    killed: bool,
    stack: str | None,
    tcp: dict[str, Any] | None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The result's extra (stack, stderr line, stage log) and evidence (TCP counters, where the stack is)."""
    extra = dict(result.get("extra") or {})
    if stack:
        extra["stack"] = stack
    if line and result["status"] != "ok":
        extra["stderr_line"] = line
    extra["stage_log"] = [[e["stage"], round(e["t"] - events[0]["t"], 3)] for e in events if e.get("event") == "stage"][
        -20:
    ]
    proof = dict(result.get("evidence") or {"rank": cmd["rank"], "node": cmd["node"]})
    if tcp is not None:
        proof["tcp"] = tcp
    if stack:
        proof["stack"] = "extra.stack"  # py-spy's dump at the deadline
    elif killed and output:
        proof.setdefault("stack", "stderr_tail")
    return extra, proof


def closed_result(
    result: dict[str, Any],
    output: str,
    elapsed: float,
    validate: Callable[[dict[str, Any]], dict[str, Any]],
    invalid: Callable[[contract.ContractError], dict[str, Any]],
) -> dict[str, Any]:
    """Stamp a child's result with its output tail, duration and end, and validate it (else ``invalid(error)``)."""
    # The tail is for explaining failures; a passing probe's torch chatter is not worth storing.
    result["stderr_tail"] = output[-contract.MAX_STDERR_TAIL :] if output and result["status"] != "ok" else None
    result["duration_s"] = round(elapsed, 3)
    result["finished_at"] = time.time()
    try:
        return validate(result)
    except contract.ContractError as e:
        return validate(invalid(e))

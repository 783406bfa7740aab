"""A warm probe process: torch imported once, each probe a fresh fork of it.

A cold probe pays about a second (more on a busy node) to start Python and
import torch, once per probe and so once per round of a sweep. The warm host
pays it once: `python -m agents.warmhost` imports torch and the probe module,
never touches CUDA (a process that has initialised CUDA cannot fork usable
children), and then forks one child per probe on request. Each child is a
probe process like a cold one: its own session (so the runner stops it as a
process group at its deadline), its output in the probe's own log file, its
own CUDA/NCCL initialisation, and nothing shared with the next probe.

The protocol is JSON lines. The runner writes {"spec": PATH, "output": PATH,
"cwd": DIR} to the host's stdin; the host answers {"pid": PID}
(or {"error": TEXT}) and later {"exit": PID, "code": CODE} when that child is
reaped. The host first writes {"ready": PID}. It exits when its stdin closes
(the agent is gone) or after idle_s seconds with no request and no child, so
that an idle node holds no torch in memory between sweeps.

`WarmHost` is the runner's side of it.
"""

from __future__ import annotations

import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Any

DEFAULT_IDLE_S = 900.0
START_TIMEOUT_S = 60.0
REPLY_TIMEOUT_S = 10.0


# -- the host process -----------------------------------------------------------------


def _emit(obj: dict[str, Any]) -> None:
    os.write(1, (json.dumps(obj) + "\n").encode())


def _child(request: dict[str, Any]) -> None:
    """In the forked child: become a probe process and never return."""
    code = 70
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        for fd in map(int, os.listdir("/proc/self/fd")):  # the host's pipes are not the probe's business
            if fd > 2:
                try:
                    os.close(fd)
                except OSError:
                    pass
        # As in a fresh interpreter: SIGPIPE stays ignored (a dead peer is an EPIPE, not a kill).
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        out = os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.chdir(request["cwd"])
        from agents.probe import main, state

        # The module was imported by the host long ago; this process starts now.
        state.PROCESS_STARTED = time.time()
        main([request["spec"]])  # ends with os._exit
        code = 0
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def serve(idle_s: float = DEFAULT_IDLE_S) -> int:
    import warnings

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    import torch
    import torch.distributed  # noqa: F401

    from agents import probe  # noqa: F401  (and with it rendezvous, netinfo, contract)

    try:
        import redis  # noqa: F401  (the rendezvous client, imported by the probe on first use)
    except ImportError:
        pass

    # Nothing above may initialise CUDA: the children do that themselves, after the fork.
    # A child's exit wakes the loop at once (SIGCHLD through the wakeup pipe), so the runner
    # learns of it without polling; the timeout only paces the idle check.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    _emit({"ready": os.getpid()})
    children: set[int] = set()
    buffer = b""
    last_request = time.monotonic()
    while True:
        readable, _, _ = select.select([0, wake_r], [], [], 1.0)
        if wake_r in readable:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
        if 0 in readable:
            data = os.read(0, 65536)
            if not data:
                break  # the agent is gone
            buffer += data
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                try:
                    request = json.loads(line)
                    pid = os.fork()
                except Exception as e:  # a bad line or a failed fork: say so, keep serving
                    _emit({"error": f"{type(e).__name__}: {e}"})
                    continue
                if pid == 0:
                    _child(request)
                children.add(pid)
                last_request = time.monotonic()
                _emit({"pid": pid})
        if _reap_into(children):
            last_request = time.monotonic()
        if not children and time.monotonic() - last_request > idle_s:
            break
    return 0


def _reap_into(children: set[int]) -> bool:
    """Reap the children that exited, report each, drop them from children; True if any was."""
    reaped = False
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return True
        if pid == 0:
            break
        children.discard(pid)
        reaped = True
        _emit({"exit": pid, "code": os.waitstatus_to_exitcode(status)})
    return reaped


# -- the runner's side ------------------------------------------------------------------


class WarmHostError(RuntimeError):
    pass


class WarmHost:
    """One warm host process, started by and belonging to the calling process (the agent).

    It stays in the caller's process group, so whatever stops the agent as a group
    stops it too; if the agent dies anyway, the host sees its stdin close and exits.
    """

    def __init__(self, env: dict[str, str] | None = None, idle_s: float = DEFAULT_IDLE_S):
        self.env = env
        self.idle_s = idle_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self.exits: dict[int, int] = {}
        self.changed = threading.Condition()
        self.lock = threading.Lock()

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        # Its stderr is the agent's: an import that fails says why in the agent's log.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agents.warmhost", "--idle-s", str(self.idle_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=self.env,
        )
        threading.Thread(target=self._read, args=(self.proc,), name="warmhost-reader", daemon=True).start()
        try:
            first = self.replies.get(timeout=timeout)
        except queue.Empty:
            self.close()
            raise WarmHostError(f"the warm probe process did not start within {timeout:.0f}s") from None
        if "ready" not in first:
            self.close()
            raise WarmHostError(f"the warm probe process did not start: {first}")

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None  # started with stdout=PIPE
        for line in proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "exit" in msg:
                with self.changed:
                    self.exits[msg["exit"]] = msg["code"]
                    self.changed.notify_all()
            else:
                self.replies.put(msg)
        self.replies.put({"error": "the warm probe process exited"})
        with self.changed:
            self.changed.notify_all()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def spawn(self, spec: str, output: str, cwd: str) -> int:
        """Fork a probe process from the host; its pid (also its process group)."""
        with self.lock:
            proc = self.proc  # close() may clear self.proc meanwhile: a closed pipe is a ValueError below
            if proc is None or proc.poll() is not None:
                raise WarmHostError("the warm probe process is not running")
            assert proc.stdin is not None  # started with stdin=PIPE
            request = {"spec": spec, "output": output, "cwd": cwd}
            try:
                proc.stdin.write((json.dumps(request) + "\n").encode())
                proc.stdin.flush()
                reply = self.replies.get(timeout=REPLY_TIMEOUT_S)
            except (OSError, ValueError, queue.Empty) as e:
                raise WarmHostError(f"the warm probe process did not answer: {e or 'no reply'}") from None
        if "pid" not in reply:
            raise WarmHostError(reply.get("error", f"unexpected reply {reply}"))
        pid: int = reply["pid"]
        return pid

    def exit_code(self, pid: int) -> int | None:
        with self.changed:
            return self.exits.get(pid)

    def wait(self, pid: int, timeout: float) -> int | None:
        """The probe's exit code once the host has reaped it; None if not within timeout or the host died."""
        end = time.monotonic() + timeout
        with self.changed:
            while pid not in self.exits:
                left = end - time.monotonic()
                if left <= 0 or not self.alive():
                    return self.exits.get(pid)
                self.changed.wait(min(left, 0.2))
            return self.exits[pid]

    def forget(self, pid: int) -> None:
        with self.changed:
            self.exits.pop(pid, None)

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5.0)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m agents.warmhost", description="warm probe process (internal)")
    parser.add_argument("--idle-s", type=float, default=DEFAULT_IDLE_S)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C on the agent: the agent decides, then closes stdin
    return serve(args.idle_s)


if __name__ == "__main__":
    sys.exit(main())

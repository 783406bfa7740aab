"""An idle agent's resident memory and CPU, and those of its warm probe process, beside a bare Python.

    .venv/bin/python benchmarks/agent_idle.py [--seconds 60]

A private redis-server and one agent (`python -m agents run`, default
settings: heartbeats every 5 s, facts refreshed on their own schedule). After
it is online and its warm probe process is up and has run one probe (so the
figure is that of an agent between sweeps, not of one that never worked),
nothing is sent for `seconds`: the CPU time its process used in that window
(utime + stime from /proc, children excluded) over the wall time is its idle
CPU; VmRSS at the end is its resident memory. The warm probe process is
measured the same way, separately: it is a child of the agent that holds torch
and exits after CLUSTER_HEALTH_WARM_IDLE_S (900 s by default) without probes.
Reference in the same run: `python -c "import time; time.sleep(...)"`, the
floor any Python process pays.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bed import main_for  # noqa: E402
from devtools.services import RedisServer, agent_args, resident_kib, spawn, stop_process  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def warm_host_of(agent: int, timeout: float) -> int:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for pid in children(agent):
            try:
                if b"agents.warmhost" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return pid
            except OSError:
                continue
        time.sleep(0.2)
    raise RuntimeError("the agent's warm probe process did not appear")


def one_probe(broker_url: str, node: str, key=None) -> dict:
    """One pair probe: rank 0 through the agent's queue, rank 1 run here; the agent's half is real work."""
    import secrets

    from celery import Celery

    from agents import contract
    from agents.runner import run_probe
    from devtools.probe_commands import loopback_pair

    rdv = "idle" + secrets.token_hex(6)
    collective = {"last_stage": "collective", "sizes": [1024], "deadline_s": 60.0}
    app = Celery("bench", broker=broker_url, set_as_current=False, fixups=[])
    app.conf.update(task_serializer="json", accept_content=["json"])
    from agents import signing

    command = loopback_pair(0, rdv, (node, "bench"), **collective)
    app.send_task(
        contract.TASK_PROBE,
        kwargs={"command": command, "auth": signing.sign(command, key, "command")},
        queue=contract.agent_queue(node),
    )
    app.close()
    return run_probe(loopback_pair(1, rdv, (node, "bench"), **collective), broker_url)


def window(pids: dict[str, int], seconds: float) -> dict:
    before = {k: cpu_s(p) for k, p in pids.items()}
    began = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - began
    return {
        k: {"cpu_pct": round(100 * (cpu_s(p) - before[k]) / wall, 3), "rss_mib": round(resident_kib(p) / 1024, 1)}
        for k, p in pids.items()
    }


def run(seconds: float = 60.0) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as tmp:
        redis = RedisServer(Path(tmp))
        redis.start()
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        from agents import signing

        key = signing.new_key("idle1")  # the agent runs signed, as deployed
        signing.write_key_file(Path(tmp) / "idle1.key", key)
        agent = spawn(
            agent_args("idle1", "127.0.0.1", redis.url, Path(tmp) / "idle1.key"), Path(tmp) / "agent.log", env=env
        )
        sleeper = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds + 120})"])
        try:
            host = warm_host_of(agent.pid, 120)
            mine = one_probe(redis.url, "idle1", key)
            if mine["status"] != "ok":
                raise RuntimeError(f"the probe with the agent failed: {mine['hint']}")
            log = Path(tmp) / "agent.log"
            end = time.monotonic() + 120
            while "probe 1:" not in log.read_text(errors="replace"):
                if time.monotonic() > end:
                    raise RuntimeError("the agent never finished its probe: " + log.read_text()[-2000:])
                time.sleep(0.2)
            time.sleep(5)  # let the probe's aftermath (result sent, child reaped) settle
            figures = window({"agent": agent.pid, "warm": host, "python": sleeper.pid}, seconds)
        finally:
            sleeper.kill()
            sleeper.wait()
            stop_process(agent)
            redis.stop()
    return {
        "seconds": seconds,
        "agent_rss_mib": figures["agent"]["rss_mib"],
        "agent_cpu_pct": figures["agent"]["cpu_pct"],
        "warm_rss_mib": figures["warm"]["rss_mib"],
        "warm_cpu_pct": figures["warm"]["cpu_pct"],
        "python_rss_mib": figures["python"]["rss_mib"],
        "python_cpu_pct": figures["python"]["cpu_pct"],
    }


if __name__ == "__main__":
    sys.exit(main_for(run, __doc__, {"--seconds": {"type": float, "default": 60.0}}))

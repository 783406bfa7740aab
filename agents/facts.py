"""What this node is: versions, GPUs, interfaces, hostname resolution, launch variables, load.

The resident agent never imports torch: torch_versions() runs in a child
process (`python -m agents.facts --torch`), once at start, and the agent
caches it. Readers take their sources as parameters (environ, /proc root, a
command runner) so tests can feed recorded data.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from agents import child_env, gpu, netinfo

ENV_NAMES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "GLOO_SOCKET_IFNAME",
    "CUDA_VISIBLE_DEVICES",
)
ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_")


def torch_versions() -> dict[str, Any]:
    """torch, CUDA, NCCL and cuDNN versions as this Python sees them (imports torch)."""
    import warnings

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    try:
        import torch
    except ImportError as e:
        return {"torch": None, "error": str(e)}
    out: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": None,
        "cuda_available": torch.cuda.is_available(),
        "gpu_count": 0,
    }
    try:
        if torch.distributed.is_nccl_available():
            v = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]  # unannotated in torch
            out["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:  # a CPU build has no NCCL to ask
        pass
    if out["cuda_available"]:
        out["gpu_count"] = torch.cuda.device_count()
    return out


def torch_versions_in_subprocess(python: str | None = None, timeout: float = 120.0) -> dict[str, Any]:
    try:
        out = subprocess.run(
            [python or sys.executable, "-m", "agents.facts", "--torch"],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=child_env(),
        )
        versions: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
        return versions
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired) as e:
        return {"torch": None, "error": f"could not run the torch version check: {e}"}


def hostname_facts() -> dict[str, Any]:
    """The hostname and what it resolves to; a loopback answer makes Gloo's default bind loopback."""
    host = socket.gethostname()
    try:
        addrs = sorted({str(a[4][0]) for a in socket.getaddrinfo(host, None)})
    except OSError as e:
        return {"hostname": host, "fqdn": socket.getfqdn(), "resolves_to": [], "error": str(e), "loopback": False}
    loopback = bool(addrs) and all(netinfo.is_loopback(a) for a in addrs)
    out: dict[str, Any] = {"hostname": host, "fqdn": socket.getfqdn(), "resolves_to": addrs, "loopback": loopback}
    if loopback:
        out["warning"] = (
            f"{host} resolves only to loopback ({', '.join(addrs)}): without GLOO_SOCKET_IFNAME, "
            "Gloo binds loopback and peers on other hosts cannot connect"
        )
    return out


def launch_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    return {k: v for k, v in sorted(environ.items()) if k in ENV_NAMES or k.startswith(ENV_PREFIXES)}


def memory_and_load(proc_root: str = "/proc") -> dict[str, Any]:
    out: dict[str, Any] = {"cpus": os.cpu_count()}
    try:
        with open(os.path.join(proc_root, "meminfo")) as f:
            info = {line.split(":")[0]: int(line.split()[1]) for line in f if len(line.split()) >= 2}
        out["mem_total_mib"] = info.get("MemTotal", 0) // 1024
        out["mem_available_mib"] = info.get("MemAvailable", 0) // 1024
    except (OSError, ValueError):
        pass
    try:
        out["load"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    return out


def collect(versions: dict[str, Any] | None = None, nvml: Any = None) -> dict[str, Any]:
    """All facts; versions is the cached torch_versions() (gathered in a subprocess when None).

    nvml: an NVML module for the GPU facts (pynvml when None, where installed).
    """
    versions = dict(versions if versions is not None else torch_versions_in_subprocess())
    gpus = gpu.collect(nvml)
    versions.update(python=platform.python_version(), driver=gpus["driver"], cuda_driver=gpus["cuda_driver"])
    return {
        "versions": versions,
        "gpus": gpus,
        "interfaces": netinfo.interfaces(),
        "host": hostname_facts(),
        "env": launch_env(),
        "system": dict(memory_and_load(), kernel=platform.release(), machine=platform.machine()),
    }


if __name__ == "__main__":
    if sys.argv[1:] == ["--torch"]:
        print(json.dumps(torch_versions()))
    else:
        print(json.dumps(collect(), indent=2))

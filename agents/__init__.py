"""The cluster-health node agent: probes torch.distributed connectivity between nodes.

Importing this package pulls in neither Django nor torch; torch is imported
only inside probe subprocesses (agents.probe).
"""

import os
import shutil
import subprocess
from collections.abc import Callable

__version__ = "0.1.0"
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child_env(**overrides: str) -> dict[str, str]:
    """The environment for a child interpreter that runs ``python -m agents.*``: this package importable first."""
    env = dict(os.environ, **overrides)
    env["PYTHONPATH"] = PACKAGE_ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    return env


def run_tool(
    name: str, args: list[str], timeout: float, run: Callable[..., "subprocess.CompletedProcess[str]"] = subprocess.run
) -> "subprocess.CompletedProcess[str] | None":
    """Run an optional command-line tool (ip, py-spy) with its output captured as text; None when it is not installed.

    OSError and subprocess.TimeoutExpired are left to the caller, which knows what a failure means there.
    """
    exe = shutil.which(name)
    return run([exe, *args], capture_output=True, text=True, timeout=timeout) if exe else None

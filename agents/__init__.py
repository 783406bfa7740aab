"""The cluster-health node agent: probes torch.distributed connectivity between nodes.

Importing this package pulls in neither Django nor torch; torch is imported
only inside probe subprocesses (agents.probe).
"""

import os

__version__ = "0.1.0"
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child_env(**overrides: str) -> dict[str, str]:
    """The environment for a child interpreter that runs ``python -m agents.*``: this package importable first."""
    env = dict(os.environ, **overrides)
    env["PYTHONPATH"] = PACKAGE_ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    return env

"""The cluster-health node agent: probes torch.distributed connectivity between nodes.

Importing this package pulls in neither Django nor torch; torch is imported
only inside probe subprocesses (agents.probe).
"""

__version__ = "0.1.0"

"""Sweeps set up through the sweep driver, shared by the ingest and reaper tests."""

from devtools.sweep_driver import heartbeat


def connectivity_sweep(driver, nodes=("n0", "n1", "n2", "n3")):
    """Heartbeats from ``nodes``, then a connectivity sweep of them: the sweep and its first round's commands."""
    for n in nodes:
        heartbeat(n)
    sweep = driver.sweep(kind="connectivity")
    return sweep, sorted(driver.take(), key=lambda c: (c["probe_id"], c["rank"]))

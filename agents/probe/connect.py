"""The connect stage: rank 0 binds its store's port, the others reach it over plain TCP first.

A plain TCP connect before joining the store tells a refused port, a dropped SYN and
a missing route apart, which the store's own join cannot.
"""

from __future__ import annotations

import socket
import time

from agents import netinfo
from agents.probe.errors import StageFailure, first_line
from agents.probe.state import ProbeState


def bind_failure(p: ProbeState, e: Exception, ip: str, port: int) -> StageFailure:
    text = str(e)
    if "EADDRINUSE" in text or "already in use" in text.lower():
        holder = netinfo.port_holder(port)
        who = f"held by {holder}" if holder else "held by another process"
        return StageFailure(
            "port_in_use",
            f"port {port} on {p.name} ({ip}) is already in use, {who}: "
            "pick another MASTER_PORT or stop the process holding it",
            detail=first_line(e),
        )
    return StageFailure(
        "port_in_use" if port else "probe_crashed",
        f"{p.name} could not open its store on {ip}:{port}: {first_line(e)}",
        detail=first_line(e),
    )


def tcp_connect(p: ProbeState, ip: str, port: int, retry_refused: bool) -> None:
    limit = p.t["connect"]
    end = time.monotonic() + limit
    where = f"{p.peer_name(0)} at {ip}:{port}"
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
                f"{p.name} got 'connection refused' from {where}: nothing listens "
                "on that port (the master's store is not up, or a firewall rejects it)",
            ) from None
        except TimeoutError:
            raise StageFailure.timed_out(
                "connect_timeout",
                f"{p.name} could not reach {where} within {limit:.1f}s: a "
                "firewall may be dropping TCP; open the store port and Gloo's ephemeral range",
            ) from None
        except OSError as e:
            raise StageFailure(
                "unreachable",
                f"{p.name} has no route to {where} ({e.strerror or e}): check the address and routing",
                detail=str(e),
            ) from None

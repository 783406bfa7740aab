"""The store stage: the TCPStore every rank shares, and what the ranks post in it before init.

Rank 0 resolves its probe address, binds the store (port 0 picks one) and publishes
where it listens through the rendezvous; ranks 1..N-1 resolve the master, read its
port, reach it over TCP (the connect stage) and join. Then every rank posts its
versions and anything that will stop its init, and rank 0 keeps the store up after
its result until the others have let go of it.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

from agents import netinfo
from agents.probe.connect import bind_failure, tcp_connect
from agents.probe.errors import StageFailure
from agents.probe.init import init_problem
from agents.probe.resolve import peer_ip_of, pick_interface, resolve
from agents.probe.state import KEY, ProbeState
from agents.probe.torch_import import need_torch
from agents.rendezvous import PeerFailed, Rendezvous, RendezvousTimeout, from_spec

# Rank 0 hosts the store: after its result it waits this long for the others to let go of it.
LINGER_S = 3.0


def rendezvous(p: ProbeState) -> Any:
    """The TCPStore every rank shares: rank 0 hosts it and publishes its port, the others look it up and join."""
    rdv = from_spec(p.spec["rendezvous"], announce=lambda a, port: p.log.emit(event="listening", address=a, port=port))
    p.enter("resolve", p.t["resolve"])
    if p.rank == 0:
        return host_store(p, rdv)
    return join_store(p, rdv)


def host_store(p: ProbeState, rdv: Rendezvous) -> Any:
    """Rank 0's side: bind the store on the probe address (port 0 picks one) and publish where it listens."""
    cmd, t = p.cmd, p.t
    bind_ip = resolve(p, cmd["bind_address"])
    p.master_ip = bind_ip
    peer_addr = cmd["peers"][-1]["address"] if cmd["peers"] else None
    p.peer_ip = peer_ip_of(peer_addr) if p.n == 2 else None
    pick_interface(p, bind_ip, peer_addr)
    local = {a for i in netinfo.interfaces() for a in i["addresses"]}
    if bind_ip not in local | {"0.0.0.0"}:
        raise StageFailure(
            "interface_missing",
            f"{p.name}'s probe address {cmd['bind_address']} ({bind_ip}) "
            f"is not an address of this host (it has {', '.join(sorted(local))}): start the "
            "agent with --address set to one of them",
        )
    if not p.importer.is_alive():
        need_torch(p)  # imported already (a warm probe): nothing to tell the peers
    else:
        rdv.publish_importing()  # the peers wait for the port without counting the import
        need_torch(p)
    p.enter("connect", t["connect"], step="bind")
    want = cmd["master_port"] or 0
    try:
        store = p.dist.TCPStore(bind_ip, want, p.n, True, timeout=timedelta(seconds=t["store"]), wait_for_workers=False)
    except Exception as e:
        failure = bind_failure(p, e, bind_ip, want)
        rdv.publish_failure(failure.reason, failure.hint)
        raise failure from None
    p.port = store.port
    p.extra["store_port"] = p.port
    # Rank 0 hosts the store: the others must be able to connect in.
    p.evidence["store"] = {"role": "listen", "address": f"{bind_ip}:{p.port}"}
    rdv.publish(bind_ip, p.port)
    p.enter("store", t["store"], step="peers")
    return store


def join_store(p: ProbeState, rdv: Rendezvous) -> Any:
    """Rank 1..N-1's side: read the master's published port, check it answers over TCP, then join its store."""
    cmd, t = p.cmd, p.t
    p.master_ip = resolve(p, cmd["master_address"])
    p.peer_ip = p.master_ip
    pick_interface(p, None, p.master_ip)
    p.enter("store", t["store"], step="rendezvous")
    try:
        p.port = rdv.lookup(t["store"])
    except RendezvousTimeout as e:
        why = (
            "the master started its probe but did not open its store (stuck importing torch, or it "
            "failed before binding: see its own result)"
            if e.master_started
            else "the master never started its probe (offline agent, busy queue, or it failed before binding)"
        )
        raise StageFailure(
            "store_timeout",
            f"{p.name} waited {t['store']:.1f}s for {p.peer_name(0)} to publish its store port: {why}",
            detail=str(e),
            status="timeout",
        ) from None
    except PeerFailed as e:
        raise StageFailure(e.reason, f"master {p.peer_name(0)} failed: {e.hint}") from None
    p.enter("connect", t["connect"])
    p.evidence["store"] = {"role": "connect", "address": f"{p.master_ip}:{p.port}", "connected": False}
    tcp_connect(p, p.master_ip, p.port, rdv.port_known_in_advance)
    p.evidence["store"]["connected"] = True
    need_torch(p)
    p.enter("store", t["store"], step="join")
    try:
        return p.dist.TCPStore(p.master_ip, p.port, p.n, False, timeout=timedelta(seconds=t["store"]))
    except Exception as e:
        raise StageFailure.timed_out(
            "store_timeout",
            f"{p.name} reached {p.master_label()} but could not join its store within {t['store']:.1f}s",
            e,
        ) from None


def exchange(p: ProbeState, store: Any) -> dict[int, dict[str, Any]]:
    """Every rank posts its versions and anything that will stop its init; returns all of them."""
    mine = {
        "node": p.name,
        "versions": p.versions,
        "init_problem": init_problem(p),
        "candidates": netinfo.candidate_interfaces(True) if p.cmd["kind"] == "discover" else [],
    }
    store.set(f"{KEY}info/{p.rank}", json.dumps(mine))
    keys = [f"{KEY}info/{r}" for r in range(p.n)]
    try:
        store.wait(keys, timedelta(seconds=max(0.1, (p.stage_limit or 0.0) - (time.monotonic() - p.stage_started))))
    except Exception as e:
        missing = [r for r in range(p.n) if not store.check([keys[r]])]
        p.joined = [r for r in range(p.n) if r not in missing]
        names = ", ".join(f"{p.peer_name(r)} (rank {r})" for r in missing)
        if "store" in p.evidence:
            p.evidence["store"]["connected"] = False
        raise StageFailure.timed_out(
            "store_timeout",
            f"{p.name} waited {p.t['store']:.1f}s in the store on {p.master_label()} for {names}: never arrived",
            e,
        ) from None
    p.joined = list(range(p.n))
    if "store" in p.evidence:
        p.evidence["store"]["connected"] = True  # every rank reached the store
    return {r: json.loads(store.get(k)) for r, k in enumerate(keys)}


def linger(p: ProbeState) -> None:
    """Keep the store up until every rank is done with it; a rank that leaves says so first."""
    if p.store is None:
        return
    try:
        if p.rank:
            p.store.set(f"{KEY}done/{p.rank}", "1")
        else:
            others = [f"{KEY}done/{r}" for r in p.joined if r != 0]
            if others:
                p.store.wait(others, timedelta(seconds=LINGER_S))
    except Exception:  # a rank that never says goodbye must not keep this one
        pass

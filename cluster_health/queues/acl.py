"""The Redis ACL rule of one node's broker user: that node's queue and the write side of the
ingest queue, and nothing else of anyone's.

``manage.py enroll NAME --broker URL`` writes it beside the node's key; docs/SECURITY.md
shows it for a node called NAME. The keys are the ones the agent's Celery worker uses
(contract.agent_queue, contract.agent_unacked_keys) and kombu's routing tables for its
queue and the ingest queue; the probe rendezvous keys are shared by every node (a probe's
two ranks meet there), and their values are signed per probe.
"""

from __future__ import annotations

from agents import contract

# What a Celery worker on its own queue needs, without the commands Redis calls dangerous.
AGENT_COMMANDS = (
    "-@all +@connection +@read +@write +@keyspace +@list +@hash +@set +@sortedset +@string "
    "+@transaction +@scripting -@dangerous"
)


def user_name(node: str) -> str:
    return f"agent-{contract.check_node_name(node)}"


def agent_rule(node: str, password: str) -> str:
    """The ACL line (aclfile syntax, without the leading ``user``) for ``node``'s broker user."""
    queue = contract.agent_queue(node)
    ingest = contract.INGEST_QUEUE
    own = [queue, *contract.agent_unacked_keys(node).values()]
    routing = [f"_kombu.binding.{q}" for q in (queue, ingest)] + [
        f"_kombu.binding_permanent.{q}" for q in (queue, ingest)
    ]
    keys = " ".join([*(f"~{k}" for k in own + routing), f"%W~{ingest}", f"~{contract.RENDEZVOUS_KEY_PREFIX}*"])
    return f"{user_name(node)} on >{password} resetchannels {keys} {AGENT_COMMANDS}"

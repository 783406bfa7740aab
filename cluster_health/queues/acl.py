"""The Redis ACL rule of one node's broker user: that node's queue, the append side of its own ingest
list and its own probes' rendezvous, and nothing else of anyone's.

``manage.py enroll NAME --broker URL`` writes it beside the node's key; docs/SECURITY.md
shows it for a node called NAME. The keys are the ones the agent's Celery worker uses
(contract.agent_queue, contract.agent_unacked_keys) and kombu's routing table for its own
queue. The commands are the ones that worker, its sends and the rendezvous run, each named:
no category grant, so no key listing (SCAN, KEYS), pub/sub or administration.

Two selectors add what the node may do outside its own keys: append to its own ingest list
``server.ingest.NAME`` (contract.ingest_queue; LPUSH, RPUSH: never read, trim or delete it, and
nothing at all on another node's list or the fleet's old ``server.ingest``, so that what one node
sends can delay no other node's), and read any probe's rendezvous
(a rank reads its rank 0's). It writes only the rendezvous keys under its own name
(contract.rendezvous_key), so no node can answer for another node's rank 0.
"""

from __future__ import annotations

from agents import contract

# What the agent runs, by who runs it. Nothing else: tests/agents/test_broker_acl.py runs every
# other command Redis knows as this user and sees it refused.
AGENT_COMMANDS = (
    # redis-py's handshake and health check (its CLIENT SETINFO, refused, is skipped)
    "auth",
    "hello",
    "ping",
    "select",
    # kombu's Redis transport on the node's own queue: take (BRPOP, RPOP), put back (LPUSH, RPUSH), size
    # (LLEN, EXISTS), the unacked hash, its index and mutex, the queue's binding (SADD, SREM, SMEMBERS)
    "brpop",
    "rpop",
    "lpush",
    "rpush",
    "llen",
    "exists",
    "del",
    "hset",
    "hget",
    "hdel",
    "zadd",
    "zrem",
    "zrange",
    "sadd",
    "srem",
    "smembers",
    "set",
    "get",
    "multi",
    "exec",
    "discard",
    "watch",
    "unwatch",
    # kombu's unacked mutex is redis-py's Lock, released by a script (EVALSHA, loaded once); a script's
    # commands are checked against this same rule, so it reaches nothing the user could not
    "evalsha",
    "script|load",
    # the agent's watch on its own queue (agents.liveness)
    "lindex",
)
# The node's ingest list: appended to, never read, trimmed or deleted (the server drains and caps it).
INGEST_COMMANDS = ("lpush", "rpush")
# Any probe's rendezvous: read (rank 1 and up read rank 0's).
RENDEZVOUS_READ_COMMANDS = ("get",)


def user_name(node: str) -> str:
    return f"agent-{contract.check_node_name(node)}"


def _allow(commands: tuple[str, ...]) -> str:
    return " ".join(f"+{c}" for c in commands)


def agent_rule(node: str, password: str) -> str:
    """The ACL line (aclfile syntax, without the leading ``user``) for ``node``'s broker user."""
    queue = contract.agent_queue(node)
    own = [queue, *contract.agent_unacked_keys(node).values(), f"_kombu.binding.{queue}"]
    own.append(f"_kombu.binding_permanent.{queue}")
    own.append(contract.rendezvous_key(node, "*"))
    keys = " ".join(f"~{k}" for k in own)
    ingest = f"(%W~{contract.ingest_queue(node)} -@all {_allow(INGEST_COMMANDS)})"
    rendezvous = f"(%R~{contract.RENDEZVOUS_KEY_PREFIX}* -@all {_allow(RENDEZVOUS_READ_COMMANDS)})"
    return f"{user_name(node)} on >{password} resetchannels {keys} -@all {_allow(AGENT_COMMANDS)} {ingest} {rendezvous}"

"""One node's broker user, against a real Redis holding exactly the rule ``manage.py enroll --broker`` writes:
only the commands of the agent's contract, nothing it could wipe or re-route on the ingest path, a rendezvous
only its own probes' rank 0 writes, and a user that revoking removes at once."""

from __future__ import annotations

import secrets

import pytest
import redis

from agents import contract, runner
from agents.rendezvous import RedisRendezvous, from_spec
from cluster_health.queues import acl
from devtools.services import RedisServer
from tests.support.agent_fixtures import acl_broker

PASSWORD = "acl-Node-pw-3e9a"
# What Redis lets every connection run, whatever its ACL: end or reset its own connection.
EVERY_USERS = {"quit", "reset"}
SERVER_PASSWORD = "acl-Server-pw-77c1"
pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def acl_redis(tmp_path):
    """The server's user (everything) and two nodes' users, sec0 and sec1, as enroll writes them."""
    rules = (acl.agent_rule("sec0", PASSWORD), acl.agent_rule("sec1", PASSWORD))
    with acl_broker(tmp_path / "acl", SERVER_PASSWORD, *rules) as server:
        yield server


def as_user(server: RedisServer, user: str, password: str = PASSWORD) -> redis.Redis:
    return redis.Redis.from_url(server.url_for(user, password), socket_timeout=5, socket_connect_timeout=5)


def every_command(admin: redis.Redis) -> dict[str, tuple[int, set[str]]]:
    """Every command and subcommand the server knows, as ``name`` or ``container|sub``: (arity, ACL categories)."""
    found: dict[str, tuple[int, set[str]]] = {}
    for name, info in admin.command().items():
        subcommands = info.get("subcommands") or []
        for sub in subcommands:  # raw: [name, arity, flags, first, last, step, categories, ...]
            found[sub[0].decode().lower()] = (int(sub[1]), {c.decode().lstrip("@") for c in sub[6]})
        if not subcommands:
            found[name.lower()] = (int(info["arity"]), {c.lstrip("@") for c in info["acl_categories"]})
    return found


def argv_on_own_key(name: str, arity: int, key: str) -> list[str]:
    """The command with as many arguments as its arity asks, each the node's own key (past the ACL, nothing else matters)."""
    words = name.split("|")
    wanted = arity if arity > 0 else max(-arity, len(words) + 1)
    return [*words, *[key] * (wanted - len(words))]


def test_the_agent_user_may_run_the_commands_of_its_contract_and_no_other(acl_redis):
    """Every command Redis knows, as node sec0's user on its own queue: allowed exactly when listed in
    acl.AGENT_COMMANDS (ACL DRYRUN, for all of them), and one command of every other class run for real is refused."""
    admin = as_user(acl_redis, "server", SERVER_PASSWORD)
    commands = every_command(admin)
    allowed = set(acl.AGENT_COMMANDS)
    assert allowed <= commands.keys(), allowed - commands.keys()
    own = contract.agent_queue("sec0")
    wrongly = []
    for name, (arity, _categories) in sorted(commands.items()):
        argv = argv_on_own_key(name, arity, own)
        try:
            answer = admin.execute_command("ACL", "DRYRUN", acl.user_name("sec0"), *argv)
        except redis.ResponseError as exc:
            answer = str(exc)
        ran = answer in (b"OK", "OK")
        if ran != (name in allowed | EVERY_USERS):
            wrongly.append((name, answer))
    assert not wrongly, wrongly
    assert all(name not in allowed for name in ("scan", "keys", "flushall", "config|get", "eval", "subscribe"))

    node = as_user(acl_redis, "agent-sec0")
    tried = set()
    for category in sorted(c.decode() for c in admin.execute_command("ACL", "CAT")):
        refused = sorted(n for n, (_, cats) in commands.items() if category in cats and n not in allowed)
        # Not the ones that would end the connection or the test's server, were they wrongly allowed.
        runnable = [n for n in refused if n not in ("shutdown", "quit", "reset", "debug|segfault", "monitor")]
        if not runnable:
            continue
        name = runnable[0]
        tried.add(category)
        with pytest.raises(redis.exceptions.NoPermissionError):
            node.execute_command(*argv_on_own_key(name, commands[name][0], own))
    assert {"keyspace", "dangerous", "scripting", "pubsub", "admin"} <= tried
    node.close()
    admin.close()


def test_no_node_can_wipe_or_reroute_the_ingest_queue(acl_redis):
    """A node only appends to its own ingest list: it cannot read, trim or delete it, touch another node's
    list or the fleet's old shared one, or the old list's kombu binding."""
    node = as_user(acl_redis, "agent-sec0")
    admin = as_user(acl_redis, "server", SERVER_PASSWORD)
    ingest, binding = contract.ingest_queue("sec0"), f"_kombu.binding.{contract.INGEST_QUEUE}"
    other, shared = contract.ingest_queue("sec1"), contract.INGEST_QUEUE
    admin.sadd(binding, f"{shared}\x06\x16\x06\x16{shared}")
    admin.lpush(other, b"sec1's half")
    assert node.lpush(ingest, b"half") == 1 and node.rpush(ingest, b"heartbeat") == 2
    attempts = [
        lambda: node.lpush(other, b"planted"),
        lambda: node.rpush(other, b"planted"),
        lambda: node.delete(other),
        lambda: node.lpush(shared, b"planted"),
        lambda: node.lrange(shared, 0, -1),
        lambda: node.delete(ingest),
        lambda: node.unlink(ingest),
        lambda: node.ltrim(ingest, 0, 0),
        lambda: node.lset(ingest, 0, b"forged"),
        lambda: node.lrem(ingest, 0, b"half"),
        lambda: node.linsert(ingest, "BEFORE", b"half", b"planted"),
        lambda: node.expire(ingest, 1),
        lambda: node.rpoplpush(ingest, contract.agent_queue("sec0")),
        lambda: node.lrange(ingest, 0, -1),
        lambda: node.delete(binding),
        lambda: node.sadd(binding, f"{shared}\x06\x16\x06\x16agent.sec0"),
        lambda: node.srem(binding, f"{shared}\x06\x16\x06\x16{shared}"),
        lambda: node.smembers(binding),
    ]
    for attempt in attempts:
        with pytest.raises(redis.exceptions.NoPermissionError):
            attempt()
    assert admin.lrange(ingest, 0, -1) == [b"half", b"heartbeat"]
    assert admin.lrange(other, 0, -1) == [b"sec1's half"] and not admin.exists(shared)
    assert admin.smembers(binding) == {f"{shared}\x06\x16\x06\x16{shared}".encode()}
    node.close()
    admin.close()


def probe_commands(master: str, peer: str) -> tuple[dict, dict]:
    """Rank 0's and rank 1's commands of one pair probe, as the server builds them (peers in rank order)."""
    rdv, key = secrets.token_hex(16), secrets.token_hex(16)
    members = [(master, "127.0.0.1"), (peer, "127.0.0.1")]
    commands = []
    for rank, (name, _address) in enumerate(members):
        commands.append(
            contract.validate_command(
                {
                    "v": contract.VERSION,
                    "kind": "pair",
                    "probe_id": 7,
                    "node": name,
                    "rank": rank,
                    "world_size": 2,
                    "rendezvous": rdv,
                    "rendezvous_key": key,
                    "bind_address": "127.0.0.1",
                    "master_address": "127.0.0.1",
                    "peers": [{"name": n, "address": a} for n, a in members if n != name],
                }
            )
        )
    return commands[0], commands[1]


def test_only_rank_0s_node_can_write_its_probes_rendezvous(acl_redis):
    """Rank 1 reads the port rank 0 published; it, or any other node, cannot write over it."""
    master_cmd, peer_cmd = probe_commands("sec0", "sec1")
    master_url, peer_url = acl_redis.url_for("agent-sec0", PASSWORD), acl_redis.url_for("agent-sec1", PASSWORD)
    master = from_spec(runner.rendezvous_spec(master_cmd, master_url, None))
    peer = from_spec(runner.rendezvous_spec(peer_cmd, peer_url, None))
    assert isinstance(master, RedisRendezvous) and isinstance(peer, RedisRendezvous)
    assert master.key == peer.key and master.key.startswith(f"{contract.RENDEZVOUS_KEY_PREFIX}sec0:")
    master.publish("127.0.0.1", 29501)
    assert peer.lookup(timeout=5) == 29501
    with pytest.raises(redis.exceptions.NoPermissionError):
        peer.publish_failure("port_in_use", "planted by another node")
    intruder = as_user(acl_redis, "agent-sec1")
    for attempt in (
        lambda: intruder.set(master.key, b"{}"),
        lambda: intruder.delete(master.key),
        lambda: intruder.expire(master.key, 1),
        lambda: intruder.set(contract.RENDEZVOUS_KEY_PREFIX + master_cmd["rendezvous"], b"{}"),  # the old, shared name
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            attempt()
    assert peer.lookup(timeout=5) == 29501
    intruder.close()


@pytest.mark.django_db
def test_revoking_a_node_removes_its_broker_user_and_ends_its_connections(tmp_path, acl_redis, settings):
    """``enroll --revoke``: the node's Redis user is gone at once, and a connection it had open is closed."""
    from django.core.management import call_command

    call_command("enroll", "sec0", "--out", str(tmp_path / "keys"))
    settings.REDIS_URL = acl_redis.url_for("server", SERVER_PASSWORD)
    connected = as_user(acl_redis, "agent-sec0")
    assert connected.ping()
    connected.lpush(contract.agent_queue("sec0"), b"{}")
    call_command("enroll", "sec0", "--revoke")
    admin = as_user(acl_redis, "server", SERVER_PASSWORD)
    assert admin.acl_getuser(acl.user_name("sec0")) is None
    assert admin.acl_getuser(acl.user_name("sec1")) is not None  # only the revoked node's
    with pytest.raises((redis.ConnectionError, redis.AuthenticationError)):
        connected.lpush(contract.ingest_queue("sec0"), b"after the revoke")
    with pytest.raises((redis.AuthenticationError, redis.ResponseError)):
        as_user(acl_redis, "agent-sec0").ping()
    assert not admin.llen(contract.ingest_queue("sec0"))
    admin.close()

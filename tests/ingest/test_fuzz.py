"""Whatever arrives from an agent is applied, or rejected and recorded: never an exception, never a stuck sweep.

Property-based (hypothesis) over the contract's validators and the ingest path the
server worker runs: random JSON, huge strings and lists, deep nesting, NUL
characters, NaN and infinity, wrong types, in every field of real messages and
in the signature envelope. Example counts are bounded so the whole module runs
in seconds.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agents import contract, signing
from cluster_health import ingest, tasks
from cluster_health.ingest.buffer import BUFFERED
from cluster_health.ingest.outcomes import APPLIED, DUPLICATE, FINAL, LATE, REJECTED
from cluster_health.models import AgentKey, Node, PairProbe, RejectedMessage
from devtools.sweep_driver import result_for
from tests.support.agent_fixtures import command


def bounded(examples: int) -> settings:
    """A fixed number of examples, no deadline (a loaded CI machine), nothing saved between runs."""
    return settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))


FAST, SLOW = bounded(100), bounded(60)
# Tests that apply messages: the test database, and an in-memory channel layer for the broadcasts.
INGESTING = pytest.mark.usefixtures("db", "memory_channel_layer")


def nested(depth: int, leaf=0):
    value = leaf
    for i in range(depth):
        value = {"x": value} if i % 2 else [value]
    return value


# Values no generator stumbles on by chance: huge, deep, NUL-laden, not finite. Drawn by name, so
# hypothesis never has to repr a value nested deeper than the recursion limit.
EXTREMES = {
    "2 MB string": "x" * 2_000_000,
    "5000 NUL": "\x00" * 5000,
    "NUL inside": "a\x00b",
    "600 long strings": ["y" * 5000] * 600,
    "3000 keys": {f"k{i}": i for i in range(3000)},
    "depth 30": nested(30),
    "depth 400": nested(400),
    "depth 2500": nested(2500),  # deeper than json.loads accepts: only a bug in this process could build it
    "NaN": float("nan"),
    "inf": float("inf"),
    "-inf": -float("inf"),
    "2**200": 2**200,
    "-2**70": -(2**70),
    "1e308": 1e308,
    "True": True,
    "empty": "",
    # No UTF-8 for these: PostgreSQL's text and jsonb refuse them, and a driver cannot even send them.
    "lone surrogate": "peer said \udcfe\udcff",
    "surrogate key": {"\ud800": "x", "ok": "\udfff"},
    "surrogate pair": "\ud83d\ude00",
}
extremes = st.sampled_from(sorted(EXTREMES)).map(EXTREMES.__getitem__)

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(alphabet=st.characters(codec="utf-8") | st.just("\x00") | st.characters(categories=["Cs"]), max_size=40)
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=12), children, max_size=6),
    max_leaves=25,
)
anything = json_values | extremes


def mutations(base: dict, extra_fields: tuple[str, ...] = ()):
    """``base`` with some fields replaced by, or added as, anything; or a field removed."""
    fields = st.sampled_from(sorted(base) + list(extra_fields)) | st.text(max_size=12)
    changes = st.lists(st.tuples(fields, anything | st.just(KeyError)), min_size=1, max_size=4)

    def apply(pairs):
        out = dict(base)
        for field, value in pairs:
            if value is KeyError:
                out.pop(field, None)
            else:
                out[field] = value
        return out

    return changes.map(apply)


def is_plain_json(value) -> bool:
    """JSON any database takes: no NaN or infinity, no NUL, no lone surrogate (UTF-8 has none)."""
    try:
        text = json.dumps(value, allow_nan=False)
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError):  # UnicodeEncodeError is a ValueError
        return False
    return "\\u0000" not in text


# -- the contract's validators: return plain JSON or raise ContractError ---------------------------

HEARTBEAT = {"v": 1, "node": "fz0", "address": "10.0.0.1", "facts": {"kernel": "6.1"}, "agent_version": "t"}
RESULT = {"v": 1, "kind": "pair", "probe_id": 3, "sweep_id": 1, "node": "fz0", "rank": 0, "status": "ok"}
RESULT.update(stage="bandwidth", sizes=[{"bytes": 1024, "time_us": 9.5, "algbw_gbps": 1.0, "busbw_gbps": 1.0}])
# Each validator with a message it accepts, which the fuzz mutates field by field.
VALIDATORS = {
    "facts": (contract.validate_facts, {"kernel": "6.1", "env": {"NCCL_DEBUG": "INFO"}, "gpus": [{"name": "H100"}]}),
    "env": (contract.validate_env, {"NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5_0:1"}),
    "evidence": (contract.validate_evidence, {"stack": "stderr_tail", "sockets": [{"state": "syn_sent"}]}),
    "heartbeat": (contract.validate_heartbeat, HEARTBEAT),
    "result": (contract.validate_result, RESULT),
    "command": (contract.validate_command, {**command(0), "lifetime_s": 10.0, "rendezvous_key": "0" * 32}),
}


@pytest.mark.parametrize("name", sorted(VALIDATORS))
def test_a_validator_returns_plain_json_or_says_why_not(name):
    validate, valid = VALIDATORS[name]
    assert is_plain_json(validate(valid))

    @FAST
    @given(anything | mutations(valid))
    def check(value):
        try:
            out = validate(value)
        except contract.ContractError as exc:
            assert len(str(exc)) < 20_000  # an error names the field; it does not echo a huge value
        else:
            assert is_plain_json(out), out

    check()


@FAST
@given(mutations(HEARTBEAT, ("busy", "sent_at")) | mutations({"kernel": "6.1", "env": {"NCCL_DEBUG": "INFO"}}))
def test_a_mutated_heartbeat_or_facts_object_validates_or_is_refused(message):
    for validate in (contract.validate_heartbeat, contract.validate_facts):
        try:
            out = validate(message)
        except contract.ContractError:
            continue
        assert is_plain_json(out)
        facts = out.get("facts", out)
        assert len(json.dumps(facts)) <= contract.MAX_FACTS_BYTES


@FAST
@given(
    st.dictionaries(
        st.text(max_size=70) | st.sampled_from(["NCCL_DEBUG", "NCCL_IB_HCA", "NCCL_NET_PLUGIN"]), anything, max_size=5
    )
)
def test_launch_variables_are_allow_listed_transport_knobs_without_paths(env):
    try:
        out = contract.validate_env(env)
    except contract.ContractError:
        return
    for name, value in out.items():
        assert contract.env_name_allowed(name) and isinstance(value, str)
        assert "/" not in value and "\x00" not in value and len(value) <= contract.MAX_ENV_VALUE


SIGNER = signing.new_key("fz0")
ENVELOPE_FIELDS = ["node", "kid", "nonce", "sig", "purpose", "ts", "v", "extra"]
# NaN and infinity are valid JSON to Python's decoder, so Celery delivers them: drawn often.
envelope_changes = st.none() | st.tuples(
    st.sampled_from(ENVELOPE_FIELDS), st.sampled_from([float("nan"), float("inf")]) | anything
)


def envelope(body, key: signing.NodeKey, purpose: str, change) -> object:
    """A good signature for ``body`` (if it can be signed as ``key``'s node), with one field replaced by ``change``."""
    if not isinstance(body, dict) or body.get("node") != key.node:
        return change[1] if change else None
    try:
        auth = signing.sign(body, key, purpose)
    except (TypeError, ValueError, RecursionError):  # NaN or an odd type: no agent could sign it either
        return change[1] if change else None
    return {**auth, change[0]: change[1]} if change else auth


@FAST
@given(mutations(HEARTBEAT) | anything, envelope_changes)
@example(HEARTBEAT, ("extra", float("nan")))  # once raised ValueError out of the check
def test_the_signature_check_accepts_only_an_untouched_signed_message_and_says_why_otherwise(body, change):
    auth = envelope(body, SIGNER, "heartbeat", change)
    try:
        signing.verify(body, auth, "heartbeat", SIGNER.secret_for)
    except signing.SignatureError as exc:
        assert len(str(exc)) < 1000
    else:  # the envelope is the one signed for this body (a field set to the value it had changes nothing)
        assert isinstance(auth, dict) and body["node"] == SIGNER.node
        assert change is None or (
            change[0] in auth and change[1] == signing.sign(body, SIGNER, "heartbeat").get(change[0])
        )


# -- ingest: applied, or rejected and recorded ---------------------------------------------------


def rejected_count() -> int:
    return RejectedMessage.objects.count()


@INGESTING
def test_a_heartbeat_of_any_shape_is_applied_or_rejected_and_recorded():
    @SLOW
    @given(mutations(HEARTBEAT, ("busy", "sent_at")) | anything)
    def check(payload):
        before = rejected_count()
        outcome = ingest.record_heartbeat(payload)
        assert outcome in (APPLIED, REJECTED)
        assert rejected_count() == before + (outcome == REJECTED)
        if outcome == APPLIED:
            assert is_plain_json(Node.objects.get(name=payload["node"]).facts)

    check()


@INGESTING
def test_a_signed_heartbeat_task_applies_or_rejects_whatever_the_body_and_envelope():
    key = signing.new_key("fz0")
    AgentKey.sealed(key).save()

    @SLOW
    @given(mutations(HEARTBEAT, ("busy", "sent_at")) | anything, envelope_changes)
    def check(body, change):
        auth = envelope(body, key, "heartbeat", change)
        before = rejected_count()
        outcome = tasks.heartbeat(body, auth)
        assert outcome in (APPLIED, REJECTED, DUPLICATE)
        assert rejected_count() == before + (outcome == REJECTED)

    check()


@INGESTING
def test_halves_of_any_shape_are_applied_or_rejected_and_the_sweep_still_finishes(driver, open_pair):
    sweep, a, b = open_pair
    good = {0: result_for(a), 1: result_for(b)}
    extra = ("evidence", "versions", "stage_times", "timings", "extra", "stderr_tail", "sizes", "hint")

    @SLOW
    @given(st.lists(mutations(good[0], extra) | mutations(good[1], extra) | anything, min_size=1, max_size=4))
    def check(halves):
        before = rejected_count()
        outcomes = driver.run(ingest.ingest_results, halves)
        assert len(outcomes) == len(halves)
        assert set(outcomes) <= {APPLIED, FINAL, DUPLICATE, LATE, REJECTED}, outcomes
        assert rejected_count() == before + outcomes.count(REJECTED)

    check()
    # Whatever was applied, the sweep is not stuck: good halves or the reaper close it.
    driver.ingest(good[0]), driver.ingest(good[1])
    driver.reap(timezone.now() + timedelta(hours=2))
    sweep.refresh_from_db()
    assert sweep.status == "finished" and PairProbe.objects.get(sweep=sweep).status not in ("pending", "running")


@INGESTING
def test_one_poisoned_half_in_a_batch_rejects_only_itself(driver, open_pair):
    sweep, a, b = open_pair

    @bounded(15)
    @given(scalars | extremes | st.lists(json_values, max_size=3) | mutations(result_for(a), ("evidence", "extra")))
    def check(poison):
        outcomes = driver.run(ingest.ingest_results, [poison])
        assert outcomes[0] in (REJECTED, APPLIED, DUPLICATE, LATE, FINAL)

    check()
    probe = PairProbe.objects.get(sweep=sweep)
    if probe.half_a is None:  # no mutation happened to be a valid half: the real ones close the pair
        assert driver.run(ingest.ingest_results, ["poison", result_for(a), result_for(b)])[0] == REJECTED
        assert PairProbe.objects.get(sweep=sweep).status == "ok"


@INGESTING
def test_a_result_task_buffers_or_rejects_and_records_whatever_the_body_and_envelope(driver, open_pair, settings):
    sweep, a, b = open_pair
    key = signing.new_key("n0")
    AgentKey.sealed(key).save()

    @bounded(25)
    @given(mutations(result_for(a), ("evidence",)) | anything, envelope_changes, st.booleans())
    def check(body, change, unsigned_allowed):
        settings.ALLOW_UNSIGNED_AGENTS = unsigned_allowed  # development mode skips the signature, not the contract
        before = rejected_count()
        outcome = driver.run(tasks.result, body, envelope(body, key, "result", change))
        assert outcome in (REJECTED, BUFFERED), outcome
        assert rejected_count() >= before + (outcome == REJECTED)

    check()
    sweep.refresh_from_db()
    assert sweep.status in ("running", "finished")


@pytest.mark.django_db
@pytest.mark.usefixtures("memory_channel_layer")
@pytest.mark.parametrize("unsigned_allowed", [False, True])
def test_every_extreme_value_sent_to_an_agent_task_is_rejected_and_recorded(driver, settings, unsigned_allowed):
    settings.ALLOW_UNSIGNED_AGENTS = unsigned_allowed
    for name, value in EXTREMES.items():
        for task in (tasks.result, tasks.heartbeat):
            before = rejected_count()
            # Development mode buffers an unsigned half; the task's own drainer rejects it.
            assert driver.run(task, value, None) in (REJECTED, BUFFERED), name
            assert rejected_count() == before + 1, name
            assert driver.run(task, {**HEARTBEAT, "node": value}, value) == REJECTED, name

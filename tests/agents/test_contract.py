"""The message contract refuses malformed and oversized commands with an error that names the field."""

import pytest

from agents import contract
from agents.runner import run_probe
from tests.support.agent_fixtures import command


def refused(cmd) -> str:
    with pytest.raises(contract.ContractError) as info:
        contract.validate_command(cmd)
    return str(info.value)


def test_it_accepts_a_pair_command_and_fills_defaults():
    cmd = contract.validate_command(
        {k: v for k, v in command(1).items() if k not in ("sizes", "timeouts", "deadline_s")}
    )
    assert cmd["sizes"] == list(contract.DEFAULT_SIZES)
    assert cmd["timeouts"] == contract.DEFAULT_TIMEOUTS
    assert cmd["deadline_s"] == contract.default_deadline(contract.DEFAULT_TIMEOUTS)


@pytest.mark.parametrize(
    "change, field",
    [
        ({"v": 2}, "command.v"),
        ({"kind": "mesh"}, "kind"),
        ({"probe_id": "seven"}, "probe_id"),
        ({"rendezvous": "a b"}, "rendezvous"),
        ({"node": "../etc"}, "node"),
        ({"rank": 2}, "rank"),
        ({"backend": "mpi"}, "backend"),
        ({"master_address": "host name"}, "master_address"),
        ({"master_port": 70000}, "master_port"),
        ({"sizes": []}, "sizes"),
        ({"sizes": [1024, "4K"]}, "sizes"),
        ({"iterations": 0}, "iterations"),
        ({"timeouts": {"store": -1}}, "store"),
        ({"timeouts": {"handshake": 1}}, "timeouts.handshake"),
        ({"env": {"LD_PRELOAD": "/tmp/x.so"}}, "env.LD_PRELOAD"),
    ],
)
def test_it_refuses_a_malformed_command_naming_the_field(change, field):
    assert field in refused({**command(1), **change})


@pytest.mark.parametrize(
    "change, words",
    [
        ({"sizes": [contract.MAX_MESSAGE_BYTES * 2]}, "256 MiB"),
        ({"sizes": [1024 * (k + 1) for k in range(contract.MAX_SIZES + 1)]}, "at most"),
        ({"iterations": contract.MAX_ITERATIONS + 1}, "outside the allowed range"),
        ({"deadline_s": contract.MAX_DEADLINE_S * 10}, "deadline_s"),
        ({"timeouts": {"bandwidth": contract.MAX_BANDWIDTH_BUDGET_S + 1}}, "bandwidth"),
        ({"world_size": contract.MAX_WORLD_SIZE + 1}, "world_size"),
    ],
)
def test_it_refuses_an_oversized_command(change, words):
    assert words in refused({**command(1), **change})


def test_it_refuses_a_command_that_is_not_an_object():
    assert "expected a JSON object" in refused(["pair"])


def test_the_runner_refuses_before_starting_a_process():
    with pytest.raises(contract.ContractError, match="sizes"):
        run_probe({**command(1), "sizes": [10**12]})


def test_a_failed_result_needs_a_reason():
    with pytest.raises(contract.ContractError, match="reason"):
        contract.validate_result({"v": 1, "probe_id": 1, "node": "n0", "rank": 0, "status": "failed", "stage": "init"})


def test_free_form_values_are_refused_with_their_path_and_subclasses_are_taken_as_their_base_type():
    import enum
    from collections import OrderedDict, defaultdict

    class Level(enum.IntEnum):
        HIGH = 3

    deep = {"a": [1, {"b": float("nan")}]}
    with pytest.raises(contract.ContractError, match=r"^extra\.a\[1\]\.b: .* is not finite"):
        contract.bounded_json(deep, "extra", contract.DETAIL_BOUNDS)
    with pytest.raises(contract.ContractError, match=r"^facts\.x\[0\]: set is not a JSON value"):
        contract.bounded_json({"x": [set()]}, "facts")
    with pytest.raises(contract.ContractError, match=r"^facts\.k: a string of"):
        contract.bounded_json({"k": "x" * (contract.FACTS_BOUNDS.string + 1)}, "facts")
    value = defaultdict(list, {"level": Level.HIGH, "o": OrderedDict(n="a\x00b")})
    out = contract.bounded_json(value, "facts")
    assert out == {"level": 3, "o": {"n": "ab"}}
    assert type(out) is dict and type(out["level"]) is int and type(out["o"]) is dict

"""`python -m agents pair` and `python -m agents facts`: the by-hand tools, with nothing else running."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from agents import contract
from devtools.devstack import run_to_end
from devtools.services import ROOT, python_env, stop_process


def agents_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "agents", *args]


def json_after_first_brace(text: str) -> dict:
    return json.loads(text[text.index("{") :])


@pytest.mark.timeout(60)
def test_pair_by_hand_prints_the_address_then_both_results(tmp_path):
    rank0 = subprocess.Popen(
        agents_cli("pair", "--rank", "0", "--bind", "127.0.0.1", "--sizes", "1K,4K,16K", "--wait", "30"),
        cwd=ROOT,
        env=python_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        address = rank0.stdout.readline().strip()
        host, _, port = address.rpartition(":")
        assert host == "127.0.0.1" and port.isdigit()
        rank1 = run_to_end(agents_cli("pair", "--rank", "1", "--connect", address, "--sizes", "1K,4K,16K"), timeout=40)
        out0, _ = rank0.communicate(timeout=20)
    finally:
        stop_process(rank0)
    assert rank1.returncode == 0, rank1.stderr[-2000:]
    assert rank0.returncode == 0
    for result in (json_after_first_brace(out0), json_after_first_brace(rank1.stdout)):
        assert result["status"] == "ok"
        assert [s["bytes"] for s in result["sizes"]] == [1024, 4096, 16384]


@pytest.mark.timeout(30)
def test_pair_by_hand_exits_non_zero_when_nobody_listens(tmp_path):
    # A port bound and never listening: a connection to it is refused, and no other process can take it meanwhile.
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        nobody = f"127.0.0.1:{holder.getsockname()[1]}"
        rank1 = run_to_end(agents_cli("pair", "--rank", "1", "--connect", nobody, "--timeout", "connect=1"), timeout=25)
    result = json.loads(rank1.stdout)
    assert rank1.returncode == 2, rank1.stderr[-2000:]
    assert (result["stage"], result["reason"]) == ("connect", "refused"), (result, rank1.stderr[-2000:])
    # It gave up when its 1 s connect timeout ran out (retrying the refusals until then), not at a default's.
    assert 0.9 <= result["stage_times"]["connect"] < contract.DEFAULT_TIMEOUTS["connect"], result["stage_times"]


@pytest.mark.timeout(60)
def test_facts_reports_versions_interfaces_hostname_and_launch_variables():
    launch = python_env(MASTER_PORT="29500", NCCL_DEBUG="INFO", TORCH_NCCL_BLOCKING_WAIT="1", UNRELATED="x")
    out = run_to_end(agents_cli("facts"), env=launch, timeout=50)
    assert out.returncode == 0, out.stderr
    facts = json.loads(out.stdout)
    assert facts["versions"]["torch"] and facts["versions"]["python"]
    lo = next(i for i in facts["interfaces"] if i["name"] == "lo")
    assert lo["loopback"] and "127.0.0.1" in lo["addresses"] and lo["mtu"] > 0
    assert facts["host"]["hostname"] and isinstance(facts["host"]["loopback"], bool)
    assert facts["env"] == {"MASTER_PORT": "29500", "NCCL_DEBUG": "INFO", "TORCH_NCCL_BLOCKING_WAIT": "1"}
    assert facts["system"]["mem_available_mib"] > 0 and len(facts["system"]["load"]) == 3

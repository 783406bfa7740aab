"""Every failed collective is named by one classifier: dead peer -> transport, timeout -> timeout, else an error."""

import pytest

from agents.probe import classify_collective_error

# Recorded from torch 2.13 (CPU build) Gloo: a two-rank all_reduce loop whose peer was
# SIGKILLed, exited mid-loop, or SIGSTOPped past the group's 3s timeout.
GLOO_PEER_KILLED = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:9107: "
    "Connection reset by peer. This is typically caused by a remote worker hanging or bugs in the application. "
    "Check the logs of the remote worker before reporting an error. GLHF! \U0001f3d6\ufe0f"
)
GLOO_PEER_EXITED = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
    "[127.0.0.1]:31633. This is typically caused by a remote worker crashing. Check the logs of the remote worker "
    "before reporting an error. GLHF! \U0001f3d6\ufe0f"
)
GLOO_PEER_STOPPED = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
    "Timed out waiting 3000ms for recv operation to complete"
)
# Worded by the same Gloo and NCCL sources on other paths (a write to a dead peer, a pair
# closed after another op timed out, NCCL's watchdog and its async error handling).
GLOO_WRITE_TO_DEAD_PEER = (
    "[../third_party/gloo/gloo/transport/tcp/pair.cc:589] Write error [10.0.0.2]:43122: Broken pipe"
)
GLOO_PAIR_CLOSED_BY_TIMEOUT = (
    "[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Application timeout caused pair closure"
)
NCCL_WATCHDOG = (
    "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, "
    "NumelIn=1, NumelOut=1, Timeout(ms)=30000) ran for 30012 milliseconds before timing out."
)
NCCL_REMOTE_EXITED = (
    "NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, "
    "NCCL version 2.21.5; WorkNCCL(SeqNum=3, OpType=ALLREDUCE, Timeout(ms)=30000)"
)
# A Gloo error about the data itself (ranks disagreeing on the buffer size), raised from a
# file under gloo/transport/: the path must not make it a transport failure.
GLOO_SIZE_MISMATCH = "[../third_party/gloo/gloo/transport/tcp/pair.cc:446] op.preamble.length <= op.nbytes. 16 vs 4"


@pytest.mark.parametrize("text", [GLOO_PEER_KILLED, GLOO_PEER_EXITED, GLOO_WRITE_TO_DEAD_PEER, NCCL_REMOTE_EXITED])
@pytest.mark.parametrize("stage", ["collective", "bandwidth"])
def test_it_names_a_dead_peer_transport(text, stage):
    assert classify_collective_error(text, stage) == ("failed", "transport")


@pytest.mark.parametrize("text", [GLOO_PEER_STOPPED, GLOO_PAIR_CLOSED_BY_TIMEOUT, NCCL_WATCHDOG])
@pytest.mark.parametrize("stage", ["collective", "bandwidth"])
def test_it_names_a_silent_peer_a_collective_timeout(text, stage):
    assert classify_collective_error(text, stage) == ("timeout", "collective_timeout")


def test_it_keeps_an_error_about_the_data_a_collective_error():
    assert classify_collective_error(GLOO_SIZE_MISMATCH, "bandwidth") == ("failed", "collective_error")


def test_during_init_a_timeout_and_any_other_error_are_transport():
    assert classify_collective_error(GLOO_PEER_STOPPED, "init") == ("timeout", "transport")
    assert classify_collective_error(GLOO_SIZE_MISMATCH, "init") == ("failed", "transport")

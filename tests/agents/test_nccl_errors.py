"""NCCL and CUDA failures named from their text: recorded error messages in, reason and hint out."""

import pytest

from agents import contract, nccl_errors
from agents.probe import StageFailure
from tests.support.agent_fixtures import probe_in

# What torch 2.x raises, as recorded on GPU nodes (C++ frame lines trimmed).
DUPLICATE_GPU = (
    "NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, invalid usage (run with "
    "NCCL_DEBUG=WARN for details), NCCL version 2.21.5\nncclInvalidUsage: This usually reflects invalid usage of "
    "NCCL library.\nLast error:\nDuplicate GPU detected : rank 1 and rank 0 both on CUDA device 18000"
)
VERSION_MISMATCH = (
    "NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, invalid usage, NCCL version 2.21.5\n"
    "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\nLast error:\n"
    "Mismatched NCCL version detected : rank 0 version 22105 rank 1 version 21903"
)
INVALID_USAGE_ONLY = (
    "NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, invalid usage (run "
    "with NCCL_DEBUG=WARN for details), NCCL version 2.21.5"
)
NO_NCCL = "Distributed package doesn't have NCCL built in"
NO_GPUS = "ProcessGroupNCCL is only supported with GPUs, no GPUs found!"
OLD_DRIVER = (
    "CUDA error: CUDA driver version is insufficient for CUDA runtime version\nCUDA kernel errors might be "
    "asynchronously reported at some other API call"
)
NO_DEVICE = "CUDA error: no CUDA-capable device is detected"
BUSY = "CUDA error: CUDA-capable device(s) is/are busy or unavailable"
ECC = "CUDA error: uncorrectable ECC error encountered"
REMOTE = (
    "NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL "
    "version 2.21.5\nncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
    "prematurely."
)
UNHANDLED_CUDA = "NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error, NCCL version 2.21.5"
GLOO_RESET = "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:4123"


def assert_named(text, reason, says):
    named = nccl_errors.classify(text, node="gpu-3", peer="gpu-4 (rank 1)")
    assert named.reason == reason and named.reason in contract.REASONS
    assert says in named.hint
    assert named.status == "failed"


@pytest.mark.parametrize(
    "text, reason, says",
    [
        (DUPLICATE_GPU, "duplicate_gpu", "rank 1 and rank 0 both on CUDA device 18000"),
        (VERSION_MISMATCH, "version_mismatch", "rank 0 has 22105, rank 1 has 21903"),
        (ECC, "gpu_error", "uncorrectable ECC error"),
        (REMOTE, "transport", "remote process exited"),
        (INVALID_USAGE_ONLY, "collective_error", "NCCL_DEBUG=WARN"),
    ],
)
def test_it_names_recorded_nccl_and_cuda_errors(text, reason, says):
    assert_named(text, reason, says)


@pytest.mark.parametrize(
    "text, says",
    [
        (NO_NCCL, "no NCCL or no CUDA"),
        (NO_GPUS, "no NCCL or no CUDA"),
        (OLD_DRIVER, "driver is older than the CUDA version"),
        (NO_DEVICE, "CUDA_VISIBLE_DEVICES"),
        (BUSY, "exclusive-process"),
        (UNHANDLED_CUDA, "Xid"),
    ],
)
def test_it_names_a_backend_it_cannot_use_and_why(text, says):
    assert_named(text, "backend_unavailable", says)


def test_two_ranks_on_one_gpu_say_what_to_do():
    hint = nccl_errors.classify(DUPLICATE_GPU, node="gpu-3").hint
    assert hint.startswith("two ranks on gpu-3 use the same GPU") and "torch.cuda.set_device(local_rank)" in hint


def test_bare_invalid_usage_with_different_versions_is_a_version_mismatch():
    named = nccl_errors.classify(
        INVALID_USAGE_ONLY, peer="n1", versions={"nccl": "2.21.5"}, peer_versions={"nccl": "2.19.3"}
    )
    assert named.reason == "version_mismatch"
    assert "this rank has NCCL 2.21.5, n1 has NCCL 2.19.3" in named.hint


def test_texts_that_are_not_nccl_failures_are_left_to_the_caller():
    assert nccl_errors.classify(GLOO_RESET) is None
    assert nccl_errors.classify("") is None
    assert nccl_errors.nccl_version_in(DUPLICATE_GPU) == "2.21.5"


def test_the_multi_group_hang_note_names_device_id_only_where_it_applies():
    note = nccl_errors.multi_group_hang_note("nccl", True, "init")
    assert "device_id" in note and "same order on every rank" in note
    assert nccl_errors.multi_group_hang_note("gloo", True, "init") == ""
    assert nccl_errors.multi_group_hang_note("nccl", False, "init") == ""
    assert nccl_errors.multi_group_hang_note("nccl", True, "bandwidth") == ""


def test_the_probe_names_nccl_failures_on_its_nccl_path_only(tmp_path):
    failure = probe_in(tmp_path, backend="nccl").nccl_failure(RuntimeError(DUPLICATE_GPU))
    assert isinstance(failure, StageFailure)
    assert (failure.reason, failure.status) == ("duplicate_gpu", "failed")
    assert failure.detail.startswith("RuntimeError: NCCL error in:")
    assert probe_in(tmp_path, backend="gloo").nccl_failure(RuntimeError(DUPLICATE_GPU)) is None

"""A hung job's Flight Recorder read from outside (agents.hangs.flight) and used in the join
(cluster_health.core.hangs): over dumps torch 2.13 recorded (tests/support/flight_recorder/, from
devtools/hung_job.py's Gloo ranks), hostile dumps, and real two-rank Gloo jobs with it on."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from agents.hangs import flight, procs
from cluster_health.core.hangs import EXIT_CODES, diagnose, position
from tests.agents.test_hang_inspect import node_view
from tests.support.hung_jobs import job

RECORDED = Path(__file__).resolve().parents[1] / "support" / "flight_recorder"
IN_ALL_REDUCE = {"collective": "all_reduce", "frame": {"function": "main", "file": "/job/hung_job.py", "line": 44}}
IN_LOADER = {"collective": None, "frame": {"function": "load_batch", "file": "/job/hung_job.py", "line": 26}}


def recorded(name: str) -> dict:
    return flight.summarize(json.loads((RECORDED / f"{name}.json").read_text()))


def rank(n: int, where: dict, summary: dict | None) -> dict:
    out = {"rank": n, "node": f"gpu-{n}", "pid": 100 + n, "state": "sleeping", "where": where, "moved": False}
    return {**out, "flight": summary} if summary is not None else out


def test_a_recorded_gloo_dump_gives_each_groups_counters_and_the_collective_a_rank_is_in():
    waiting, loading = recorded("loader-rank0"), recorded("loader-rank1")
    assert waiting["groups"] == [{"pg": 0, "group": "0", "last_enqueued": 2, "last_completed": 1}]
    assert {k: waiting["pending"][k] for k in ("op", "pg", "seq", "desc", "completed")} == {
        "op": "all_reduce",
        "pg": 0,
        "seq": 2,
        "desc": "default_pg",
        "completed": False,
    }
    assert loading["pending"] is None and loading["last_completed"]["seq"] == 1
    groups = [recorded(f"groups-rank{r}")["pending"] for r in (0, 1)]
    assert [(p["pg"], p["desc"], p["seq"]) for p in groups] == [(1, "data", 1), (2, "experts", 1)]


def test_the_join_uses_the_flight_recorder_in_place_of_the_stack_and_names_sequence_numbers():
    with_fr = [rank(0, IN_ALL_REDUCE, recorded("loader-rank0")), rank(1, IN_LOADER, recorded("loader-rank1"))]
    without = [rank(0, IN_ALL_REDUCE, None), rank(1, IN_LOADER, None)]
    on, off = diagnose(with_fr, world_size=2), diagnose(without, world_size=2)
    assert (
        (on["verdict"], on["culprits"][0]["ranks"])
        == (off["verdict"], off["culprits"][0]["ranks"])
        == (
            "application",
            [1],
        )
    )
    assert on["culprits"][0]["text"] == (
        "rank 1 on gpu-1 is inside `load_batch` (hung_job.py:26), not in `all_reduce` #2 on default_pg where the "
        "other rank waits (the last collective it completed: `all_reduce` #1 on default_pg): the job's code, not "
        "the network"
    )
    assert position(with_fr[0])["seq"] == 2 and position(with_fr[1])["last_completed"]["seq"] == 1
    # A stack that says all_reduce while the recorder says nothing is pending: the recorder wins.
    assert position(rank(0, IN_ALL_REDUCE, recorded("loader-rank1")))["collective"] is None


def test_process_groups_entered_in_different_orders_are_a_mismatch_naming_ranks_and_groups():
    ranks = [rank(r, IN_ALL_REDUCE, recorded(f"groups-rank{r}")) for r in (0, 1)]
    out = diagnose(ranks, world_size=2)
    (c,) = out["culprits"]
    assert (out["verdict"], c["kind"], c["ranks"], c["evidence"]["groups"]) == (
        "application",
        "mismatch",
        [0, 1],
        ["data", "experts"],
    )
    assert c["text"] == (
        "the ranks wait in different collectives: rank(s) 0 in `all_reduce` #1 on data; "
        "rank(s) 1 in `all_reduce` #1 on experts"
    )
    # Their stacks alone show both in all_reduce: no mismatch to see, and the answer says what would tell.
    blind = diagnose([rank(r, IN_ALL_REDUCE, None) for r in (0, 1)], world_size=2)
    assert blind["verdict"] == "unknown" and "TORCH_FR_BUFFER_SIZE" in blind["why"]
    one_op = diagnose([rank(r, IN_ALL_REDUCE, recorded(f"mismatch-rank{r}")) for r in (0, 1)], world_size=2)
    assert "rank(s) 1 in `broadcast` #2 on default_pg" in one_op["culprits"][0]["text"]


@pytest.mark.parametrize(
    "doc, why",
    [
        ([], "not a Flight Recorder dump"),
        ({"entries": "x"}, "not a Flight Recorder dump"),
        ({"entries": [1]}, "expected objects"),
        ({"entries": [{"record_id": "1e99"}]}, "expected an integer"),
        ({"entries": [{"record_id": 2**70}]}, "out of range"),
        ({"entries": [{}] * (flight.MAX_ENTRIES + 1)}, "more than"),
        ({"entries": [], "pg_status": {"0": "x"}}, "expected objects"),
        ({"entries": [], "pg_status": {"zero": {}}}, "expected an integer"),
    ],
)
def test_a_hostile_dump_is_refused_with_the_reason(doc, why):
    with pytest.raises(flight.FlightError, match=why):
        flight.summarize(doc)


def test_names_are_bounded_and_stripped_of_control_characters():
    doc = {"entries": [{"profiling_name": "gloo:" + "\x1b[31m" + "x" * 500, "process_group": ["1", "\n" * 9]}]}
    (entry,) = [flight.summarize(doc)["pending"]]
    assert entry["op"] == "[31m" + "x" * 71 and entry["desc"] == ""  # 80 characters, less "gloo:"


def test_dump_files_are_read_only_as_json_the_ranks_user_owns_and_not_through_links(tmp_path):
    pid = os.getpid()
    good = tmp_path / "fr_0"
    good.write_text((RECORDED / "loader-rank0.json").read_text())
    assert flight.read(pid, 0, {flight.DUMP_VARIABLE: f"{tmp_path}/fr_"})["pending"]["seq"] == 2
    (tmp_path / "fr_1").write_bytes(b"\x80\x04\x95pickled")
    assert "never read" in flight.read(pid, 1, {flight.DUMP_VARIABLE: f"{tmp_path}/fr_"})["error"]
    (tmp_path / "fr_2").symlink_to(good)
    assert "not a regular file" in flight.read(pid, 2, {flight.DUMP_VARIABLE: f"{tmp_path}/fr_"})["error"]
    assert flight.read(pid, 3, {flight.DUMP_VARIABLE: f"{tmp_path}/fr_"}) is None  # not written: no recorder
    assert "absolute" in flight.read(pid, 0, {flight.DUMP_VARIABLE: "relative/fr_"})["error"]
    assert "absolute" in flight.read(pid, 0, {flight.DUMP_VARIABLE: f"{tmp_path}/../{tmp_path.name}/fr_"})["error"]


def test_a_worker_server_that_answers_too_much_or_not_http_is_refused(tmp_path):
    path = str(tmp_path / "ws.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(2)
    answers = [b"HTTP/1.1 200 OK\r\n\r\n" + b"{" * (flight.MAX_BYTES + 8192), b"SSH-2.0-OpenSSH\r\n\r\n{}"]

    def serve() -> None:
        for answer in answers:
            conn, _ = server.accept()
            with conn:
                conn.recv(4096)
                try:
                    conn.sendall(answer)
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    launch = {flight.SOCKET_VARIABLE: path}
    assert "more than its bound" in flight.read(os.getpid(), 0, launch)["error"]
    assert "answered 'SSH-2.0-OpenSSH'" in flight.read(os.getpid(), 0, launch)["error"]
    thread.join(10)
    server.close()


@pytest.mark.timeout(150)
def test_real_gloo_jobs_with_the_flight_recorder_on_carry_sequence_numbers_and_the_same_verdicts(tmp_path):
    with job("loader", tmp_path, launcher="direct", flight=True) as selector:
        ranks = node_view(selector)
        assert "TORCH_WORKER_SERVER_SOCKET" in procs.find_ranks(selector)[0].launch
        # A stopped rank's worker server cannot answer: it is not asked (it would cost 5 s a sample).
        os.kill(next(r.pid for r in procs.find_ranks(selector) if r.rank == 1), signal.SIGSTOP)
        started = time.monotonic()
        stopped = diagnose(node_view(selector), world_size=2)
        assert time.monotonic() - started < 8 and stopped["verdict"] == "node"
        assert stopped["culprits"][0]["text"].startswith("rank 1 on local is stopped")
    by_rank = {r["rank"]: r for r in ranks}
    assert by_rank[0]["flight"]["source"] == "worker server" and position(by_rank[0])["seq"] == 2
    out = diagnose(ranks, world_size=2)
    assert (out["verdict"], out["culprits"][0]["ranks"], EXIT_CODES[out["verdict"]]) == ("application", [1], 2)
    assert "not in `all_reduce` #2 on default_pg" in out["culprits"][0]["text"]
    with job("groups", tmp_path, launcher="torchrun", flight=True) as selector:
        groups = diagnose(node_view(selector), world_size=2)
    (c,) = groups["culprits"]
    assert (groups["verdict"], c["kind"], c["evidence"]["groups"]) == ("application", "mismatch", ["data", "experts"])
    assert (
        "rank(s) 0 in `all_reduce` #1 on data" in c["text"] and "rank(s) 1 in `all_reduce` #1 on experts" in c["text"]
    )


def test_a_rank_moved_when_its_recorder_completed_more_but_not_when_one_read_failed():
    from agents.hangs.inspect import _moved

    def sample(summary):
        return {"where": IN_ALL_REDUCE, "connections": [], "flight": summary}

    waiting, done = recorded("loader-rank0"), recorded("loader-rank1")
    assert not _moved(sample(waiting), sample(waiting))
    assert _moved(sample({**waiting, "groups": [{**waiting["groups"][0], "last_completed": 0}]}), sample(waiting))
    assert not _moved(sample({"error": "worker server: timed out"}), sample(done))
    assert not _moved(sample(None), sample(done))


def test_a_silent_worker_server_costs_its_deadline_once_then_the_samples_budget_skips_the_rest(tmp_path, monkeypatch):
    from agents.hangs import inspect as helper

    path = str(tmp_path / "silent.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)  # accepts (the kernel's backlog) and never answers, as a wedged worker server
    monkeypatch.setattr(flight, "DEADLINE_S", 1.0)
    rank = procs.RankProcess(os.getpid(), 0, 0, 2, "sleeping", {flight.SOCKET_VARIABLE: path})
    started = time.monotonic()
    assert "timed out" in helper._flight(rank, "sleeping", time.monotonic() + 10)["error"]
    assert 0.9 < time.monotonic() - started < 3
    assert "were spent" in helper._flight(rank, "sleeping", time.monotonic() - 1)["error"]
    assert helper._flight(rank, "stopped", time.monotonic() + 10) is None  # not asked at all
    server.close()


def test_a_sample_whose_stack_could_not_be_read_is_not_a_move():
    from agents.hangs.inspect import _moved

    read = {"where": IN_ALL_REDUCE, "connections": [], "flight": None, "stack_error": None}
    unread = {**read, "where": {"collective": None, "frame": None}, "stack_error": "Failed to get stack traces"}
    assert not _moved(read, unread) and not _moved(unread, read)
    assert _moved(read, {**read, "where": IN_LOADER})

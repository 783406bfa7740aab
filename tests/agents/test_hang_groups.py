"""Which process group each rank waits on, without the Flight Recorder: the job's own names for the group
objects, read on the node from py-spy's locals (agents/hangs/groups.py), joined by core/group_waits.py.
Under real torchrun, two groups entered in different orders (devtools/hung_job.py ``groups``) are a
mismatch naming both groups; no value of a local leaves the node."""

from __future__ import annotations

import json

import pytest

from agents.hangs import groups
from cluster_health.core import group_waits
from cluster_health.core.hangs import EXIT_CODES, diagnose
from tests.agents.test_hang_inspect import node_view
from tests.support.hung_jobs import job

pytestmark = pytest.mark.timeout(150)
GROUP = "<torch._C._distributed_c10d.ProcessGroup at {}>"


def test_groups_entered_in_different_orders_are_a_mismatch_named_from_the_stacks(tmp_path):
    with job("groups", tmp_path, launcher="torchrun") as selector:
        ranks = node_view(selector)
    assert all(r.get("flight") is None for r in ranks)  # no Flight Recorder: the stacks alone
    by_rank = {r["rank"]: r["groups"] for r in ranks}
    assert by_rank == {
        0: {"waits_on": ["data", "group"], "other_groups": ["experts"]},
        1: {"waits_on": ["experts", "group"], "other_groups": ["data"]},
    }
    out = diagnose(ranks, world_size=2)
    (c,) = out["culprits"]
    assert (out["verdict"], EXIT_CODES[out["verdict"]], c["kind"], c["ranks"]) == ("application", 2, "mismatch", [0, 1])
    assert c["evidence"]["groups"] == ["data", "experts"]
    assert "rank(s) 0 on `data`; rank(s) 1 on `experts`" in c["text"]
    assert "<torch" not in json.dumps(ranks) and "0x" not in json.dumps([r["groups"] for r in ranks])


def frame(name: str, file: str, local: dict[str, str]) -> dict:
    return {"name": name, "filename": file, "line": 1, "locals": [{"name": k, "repr": v} for k, v in local.items()]}


def test_the_names_come_from_the_jobs_own_frames_and_only_names_leave():
    torch_file = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
    dump = [
        {
            "thread_name": "MainThread",
            "frames": [
                frame("all_reduce", torch_file, {"group": GROUP.format("0x1"), "tensor": "<Tensor at 0x9>"}),
                frame("wrapper", torch_file, {"pg": GROUP.format("0x1")}),  # torch's own frame: not a name
                frame("step", "/job/train.py", {"expert_pg": GROUP.format("0x1"), "token": '"s3cr3t"'}),
                frame("main", "/job/train.py", {"dp": GROUP.format("0x2"), "bad name": GROUP.format("0x2")}),
            ],
        }
    ]
    assert groups.waits_on(dump) == {"waits_on": ["expert_pg"], "other_groups": ["dp"]}
    default = [{"thread_name": "MainThread", "frames": [frame("barrier", torch_file, {"group": "None"})]}]
    assert groups.waits_on(default) == {"waits_on": ["the default group"], "other_groups": []}
    for hostile in ("x", [1], [{"thread_name": "MainThread", "frames": "no"}], [{"thread_name": "MainThread"}]):
        assert groups.waits_on(hostile) is None


def test_the_join_names_a_mismatch_only_when_a_name_means_two_groups():
    def ranks(*views: dict) -> list[dict]:
        return [{"rank": i, "node": f"n{i}", "groups": v} for i, v in enumerate(views)]

    found = group_waits.split(ranks({"waits_on": ["data"], "other_groups": ["experts"]}, {"waits_on": ["experts"]}))
    assert found == {"data": [0], "experts": [1]}
    # Same names everywhere, or names that contradict nothing (each rank's code names its groups differently).
    assert group_waits.split(ranks({"waits_on": ["data"], "other_groups": ["experts"]}) * 2) is None
    assert group_waits.split(ranks({"waits_on": ["a"]}, {"waits_on": ["b"]})) is None
    hostile = ranks({"waits_on": "data"}, {"waits_on": [1, None, "x" * 65]}, None, {"other_groups": ["data"]})
    assert group_waits.split(hostile) is None

"""End to end: ``manage.py sweep --kind gpu --wait --json`` on the loopback stack, real agents, real gpu checks.

The loopback nodes have no NVIDIA GPU: each agent runs the real gpu check process
(torch imported, CUDA asked), which answers ``skipped`` / ``no_gpu``, and the sweep passes.
"""

import json

import pytest

from tests.support.sweep_setup import manage, running_agents

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_gpu_sweep_of_cpu_nodes_reports_every_check_skipped_and_passes(stack):
    names = ["e0", "e1"]
    running_agents(stack, names)
    run = manage(stack, "sweep", "--kind", "gpu", "--nodes", ",".join(names), "--wait", "--json", "--timeout", "150")
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(run.stdout)
    assert (report["kind"], report["status"], report["verdict"], report["rounds"]) == ("gpu", "finished", "pass", 1)
    assert report["pairs"] == []
    assert [(g["node"], g["status"], g["stage"], g["reason"]) for g in report["gpus"]] == [
        (n, "skipped", "init", "no_gpu") for n in names
    ]
    assert all("has no usable NVIDIA GPU" in g["hint"] for g in report["gpus"])

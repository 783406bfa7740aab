"""A full sweep's groups held against the declared topology: a node measuring with another rack is a warn finding."""

import re

import pytest

from cluster_health.models import Finding, Node
from tests.support.racked_sweep import NODES, racked_sweep

pytestmark = pytest.mark.usefixtures("memory_channel_layer")


def test_a_node_labelled_with_one_rack_but_measuring_with_another_is_a_warn_finding(db, driver, tmp_path):
    sweep = racked_sweep(driver, tmp_path)
    assert dict(Node.objects.values_list("name", "topology_group"))["gpu03"] == "rack-a"  # read from topology.conf
    (found,) = Finding.objects.filter(sweep=sweep, code="topology_mismatch")
    assert (found.severity, found.subject) == ("warn", "gpu03")
    assert found.text.startswith("gpu03 is labelled rack-a but measures with rack-b: 12 us, 9.")
    assert re.search(r" vs 4[0-2] us, 2\.\d\d GB/s \(confidence 1\.00\)$", found.text)
    assert sweep.verdict in ("warn", "fail")


def test_labels_that_match_the_measurements_raise_nothing(db, driver, tmp_path):
    cabled = {n: "rack-a" if n in NODES[:3] else "rack-b" for n in NODES}
    sweep = racked_sweep(driver, tmp_path, cabled)
    assert sweep.status == "finished"
    assert not Finding.objects.filter(sweep=sweep, code="topology_mismatch").exists()

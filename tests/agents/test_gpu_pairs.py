"""The links of the GPU x GPU matrix as NVML reports them (recorded nodes through the fake NVML).

The copies and the NCCL pairs themselves need two CUDA GPUs: scripts/test --gpu runs them."""

import copy

from agents import gpu_pairs
from tests.support.nvml_fake import FakeNvml


def bus_ids(nvml) -> list[str]:
    return [d["pci_bus_id"] for d in nvml.rec["devices"]]


def test_every_pair_of_an_hgx_node_is_nvlink_through_the_switches_with_the_lanes_both_have():
    nvml = FakeNvml.load("nvlink_lane_down")
    links = gpu_pairs.nvml_links(nvml, bus_ids(nvml))
    assert len(links) == 8 * 7
    assert links[(0, 1)] == {"link": "nvlink", "nvlink_lanes": 18}
    assert links[(3, 5)] == links[(5, 3)] == {"link": "nvlink", "nvlink_lanes": 17}  # GPU 3's link 7 is down
    assert nvml.shutdowns == 1


def test_nvlink_straight_between_two_gpus_counts_their_own_lanes():
    rec = copy.deepcopy(FakeNvml.load("h100_node").rec)
    a, b = rec["devices"][0]["pci_bus_id"], rec["devices"][1]["pci_bus_id"]
    for dev in rec["devices"]:
        dev["nvlink"] = [0] * 18
    rec["devices"][0].update(nvlink=[1] * 4 + [0] * 14, nvlink_remote=[b] * 18)  # an NVLink bridge of 4 lanes
    rec["devices"][1].update(nvlink=[1] * 4 + [0] * 14, nvlink_remote=[a] * 18)
    rec["topology"] = 30
    nvml = FakeNvml(rec)
    links = gpu_pairs.nvml_links(nvml, bus_ids(nvml))
    assert links[(0, 1)] == links[(1, 0)] == {"link": "nvlink", "nvlink_lanes": 4}
    assert links[(0, 2)] == {"link": "host_bridge", "nvlink_lanes": None}


def test_gpus_without_nvlink_are_named_by_their_pcie_topology():
    rec = copy.deepcopy(FakeNvml.load("h100_node").rec)
    for dev in rec["devices"]:
        dev["nvlink"] = []
    for level, name in ((10, "pcie_switch"), (40, "numa_node"), (50, "system")):
        nvml = FakeNvml({**rec, "topology": level})
        assert gpu_pairs.nvml_links(nvml, bus_ids(nvml))[(2, 6)] == {"link": name, "nvlink_lanes": None}


def test_no_nvml_gives_no_links():
    assert gpu_pairs.nvml_links(FakeNvml.load("cpu_node"), ["00000000:18:00.0"]) == {}

"""GPU facts through NVML, read from recorded nodes (tests/support/nvml/*.json) through a fake NVML module."""

import json
import subprocess
import sys

import pytest

from agents import facts, gpu
from tests.support.nvml_fake import FakeNvml


def test_it_reports_every_gpu_of_a_healthy_h100_node():
    nvml = FakeNvml.load("h100_node")
    out = gpu.collect(nvml)
    assert out["error"] is None
    assert (out["driver"], out["cuda_driver"]) == ("550.54.15", "12.4")
    assert [d["index"] for d in out["devices"]] == list(range(8))
    d = out["devices"][0]
    assert d["name"] == "NVIDIA H100 80GB HBM3" and d["uuid"].startswith("GPU-")
    assert d["pci_bus_id"] == "00000000:18:00.0"
    assert d["memory_total_mib"] == 81559
    assert d["persistence_mode"] is True
    assert d["ecc"] == {
        "enabled": True,
        "volatile": {"uncorrected": 0, "corrected": 0},
        "aggregate": {"uncorrected": 0, "corrected": 0},
    }
    assert list(d["ecc"]["volatile"]) == ["uncorrected", "corrected"]  # the ones that crash jobs come first
    assert d["retired_pages"] is None  # H100 remaps rows instead: NVML says not supported
    assert d["remapped_rows"] == {"uncorrectable": 0, "correctable": 0, "pending": False, "failure": False}
    assert d["pcie"] == {"gen": 5, "width": 16, "max_gen": 5, "max_width": 16}
    assert d["nvlink"] == {"active": 18, "inactive": []}
    assert d["unreadable"] == []
    assert nvml.shutdowns == 1 and not nvml.initialised


def test_it_reports_a_cpu_node_as_no_devices_and_why():
    out = gpu.collect(FakeNvml.load("cpu_node"))
    assert out["devices"] == []
    assert "no NVIDIA driver is installed" in out["error"]


def test_it_says_the_driver_is_not_loaded():
    nvml = FakeNvml({"init": {"nvml_error": 9}, "devices": []})
    assert "not loaded" in gpu.collect(nvml)["error"]


def test_it_says_when_nvml_finds_no_gpus():
    nvml = FakeNvml({"driver": "550.54.15", "cuda_driver": 12040, "devices": []})
    out = gpu.collect(nvml)
    assert out["devices"] == [] and out["error"] == "NVML found no GPUs on this node"
    assert out["driver"] == "550.54.15"


def test_it_reads_a_degraded_pcie_link():
    d = gpu.collect(FakeNvml.load("degraded_pcie"))["devices"][2]
    assert d["pcie"] == {"gen": 4, "width": 8, "max_gen": 4, "max_width": 16}


def test_it_reads_ecc_errors_pending_rows_and_nvlink_down():
    devices = gpu.collect(FakeNvml.load("faulty_gpus"))["devices"]
    assert devices[3]["ecc"]["volatile"] == {"uncorrected": 2, "corrected": 41}
    assert devices[3]["ecc"]["aggregate"] == {"uncorrected": 5, "corrected": 230}
    assert devices[3]["remapped_rows"]["pending"] is True
    assert devices[5]["nvlink"] == {"active": 16, "inactive": [15, 17]}
    assert devices[5]["persistence_mode"] is False


def test_it_keeps_a_gpu_nvml_cannot_open_and_notes_unreadable_fields():
    rec = FakeNvml.load("h100_node").rec
    rec["devices"][1]["handle"] = {"nvml_error": 15}
    rec["devices"][2]["ecc"] = {"nvml_error": 15}
    devices = gpu.collect(FakeNvml(rec))["devices"]
    assert devices[1] == {"index": 1, "name": None, "error": "GPU is lost"}
    assert devices[2]["ecc"]["volatile"] == {"uncorrected": None, "corrected": None}
    assert {"field": "ecc.volatile.uncorrected", "error": "GPU is lost"} in devices[2]["unreadable"]


def test_it_bounds_the_number_of_gpus():
    out = gpu.NvmlCollector(FakeNvml.load("h100_node"), max_devices=3).collect()
    assert len(out["devices"]) == 3 and out["truncated_from"] == 8


def test_an_agent_without_nvidia_ml_py_reports_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    out = gpu.collect()
    assert out["devices"] == [] and "nvidia-ml-py is not installed" in out["error"]


def test_the_real_nvml_module_without_a_driver_reports_no_library():
    pynvml = pytest.importorskip("pynvml")
    out = gpu.collect(pynvml)
    if out["devices"]:
        pytest.skip("this machine has an NVIDIA driver and GPUs")
    assert out["error"]


def test_facts_carry_the_gpus_and_the_driver_version():
    out = facts.collect({"torch": "2.13.0"}, nvml=FakeNvml.load("h100_node"))
    assert len(out["gpus"]["devices"]) == 8 and out["gpus"]["error"] is None
    assert out["versions"]["driver"] == "550.54.15" and out["versions"]["cuda_driver"] == "12.4"
    json.dumps(out)  # a heartbeat carries it as JSON


@pytest.mark.timeout(60)
def test_the_facts_command_prints_the_gpus_section():
    out = subprocess.run([sys.executable, "-m", "agents", "facts"], capture_output=True, text=True, timeout=50)
    assert out.returncode == 0, out.stderr
    gpus = json.loads(out.stdout)["gpus"]
    assert set(gpus) >= {"devices", "error"}
    assert gpus["devices"] or gpus["error"]  # a node without GPUs says why

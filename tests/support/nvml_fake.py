"""A stand-in for pynvml built from a recorded node (tests/support/nvml/*.json): the GPU boundary, faked.

A recorded value {"nvml_error": CODE} makes the call raise NVMLError(CODE), as
pynvml does for a device that does not support it (3) or a missing library (12).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

RECORDINGS = Path(__file__).parent / "nvml"


class NVMLError(Exception):
    def __init__(self, value: int):
        super().__init__(value)
        self.value = value

    def __str__(self):
        return {3: "Not Supported", 9: "Driver Not Loaded", 12: "NVML Shared Library Not Found", 15: "GPU is lost"}.get(
            self.value, f"NVML error {self.value}"
        )


def _value(v):
    if isinstance(v, dict) and "nvml_error" in v:
        raise NVMLError(v["nvml_error"])
    return v


def _recorded(key: str, part: str | None = None):
    """A device call that answers the device's recorded ``key`` (its ``part``, where one is named)."""

    def call(self, h):
        value = _value(self._dev(h)[key])
        return value if part is None else value[part]

    return call


class FakeNvml:
    """The pynvml functions the collector calls, answering from one recorded node."""

    NVMLError = NVMLError
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_DRIVER_NOT_LOADED = 9
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_AGGREGATE_ECC = 1
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
    NVML_NVLINK_MAX_LINKS = 18

    def __init__(self, recording: dict):
        self.rec = recording
        self.initialised = False
        self.shutdowns = 0

    @classmethod
    def load(cls, name: str) -> FakeNvml:
        return cls(json.loads((RECORDINGS / f"{name}.json").read_text()))

    def nvmlInit(self):
        _value(self.rec.get("init", None))
        self.initialised = True

    def nvmlShutdown(self):
        self.shutdowns += 1
        self.initialised = False

    def _dev(self, h) -> dict:
        assert self.initialised, "NVML called before nvmlInit"
        return self.rec["devices"][h]

    def nvmlSystemGetDriverVersion(self):
        return _value(self.rec["driver"])

    def nvmlSystemGetCudaDriverVersion(self):
        return _value(self.rec["cuda_driver"])

    def nvmlDeviceGetCount(self):
        assert self.initialised
        return len(self.rec["devices"])

    def nvmlDeviceGetHandleByIndex(self, i):
        _value(self.rec["devices"][i].get("handle"))
        return i

    nvmlDeviceGetName = _recorded("name")
    nvmlDeviceGetUUID = _recorded("uuid")
    nvmlDeviceGetPersistenceMode = _recorded("persistence_mode")
    nvmlDeviceGetEccMode = _recorded("ecc_mode")
    nvmlDeviceGetRetiredPagesPendingStatus = _recorded("retired_pages_pending")
    nvmlDeviceGetCurrPcieLinkGeneration = _recorded("pcie", "gen")
    nvmlDeviceGetCurrPcieLinkWidth = _recorded("pcie", "width")
    nvmlDeviceGetMaxPcieLinkGeneration = _recorded("pcie", "max_gen")
    nvmlDeviceGetMaxPcieLinkWidth = _recorded("pcie", "max_width")

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=_value(self._dev(h)["pci_bus_id"]).encode())

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(**_value(self._dev(h)["memory"]))

    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter):
        ecc = _value(self._dev(h)["ecc"])
        return ecc[("volatile", "aggregate")[counter]][("corrected", "uncorrected")[error_type]]

    def nvmlDeviceGetRetiredPages(self, h, cause):
        pages = _value(self._dev(h)["retired_pages"])
        return pages[("single_bit", "double_bit")[cause]]

    def nvmlDeviceGetRemappedRows(self, h):
        return tuple(_value(self._dev(h)["remapped_rows"]))

    def nvmlDeviceGetNvLinkState(self, h, link):
        links = _value(self._dev(h)["nvlink"])
        if link >= len(links):
            raise NVMLError(2)  # INVALID_ARGUMENT: no such link on this GPU
        return links[link]

    # The GPU x GPU links (agents/gpu_pairs.py). A recording may give a device's "nvlink_remote" (the PCI
    # bus id at the far end of each link) and the node's "topology" level between any two GPUs; by default
    # every NVLink goes into one of four NVSwitches (an HGX board) and the GPUs share a NUMA node.
    def nvmlDeviceGetHandleByPciBusId(self, bus_id):
        assert self.initialised
        for i, dev in enumerate(self.rec["devices"]):
            if dev["pci_bus_id"].upper() == str(bus_id).upper():
                return i
        raise NVMLError(6)  # NOT_FOUND

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        remote = self._dev(h).get("nvlink_remote") or [f"00000000:{0xC0 + link % 4:02X}:00.0"] * 18
        return SimpleNamespace(busId=remote[link].encode())

    def nvmlDeviceGetTopologyCommonAncestor(self, h1, h2):
        self._dev(h1), self._dev(h2)
        return self.rec.get("topology", 40)

"""GPU facts through NVML: count, model, driver, memory, ECC, retired/remapped rows, PCIe, NVLink.

nvidia-ml-py (module ``pynvml``) is optional and imported lazily: an agent
without it, or on a node without a driver, reports an empty device list and
says why. NvmlCollector takes its NVML module as a parameter, so tests feed a
recorded fake built from plain data; this module never imports torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MAX_GPUS = 64  # bounds what one heartbeat carries, whatever NVML says
MAX_NVLINKS = 36  # NVML_NVLINK_MAX_LINKS of current drivers
MAX_NAME = 128

# NVML return codes (nvml.h); looked up on the module first, these are the fallback.
ERROR_NOT_SUPPORTED = 3
ERROR_INVALID_ARGUMENT = 2
ERROR_DRIVER_NOT_LOADED = 9
ERROR_LIBRARY_NOT_FOUND = 12

# NvmlCollector.device's call(fn, *args, field=None): one NVML call on the device, None where refused.
DeviceCall = Callable[..., Any]


def load_nvml() -> tuple[Any, str | None]:
    """The pynvml module, or (None, why) where nvidia-ml-py is not installed."""
    try:
        import pynvml
    except ImportError as e:
        return None, f"nvidia-ml-py is not installed ({e}): install requirements/agent.txt to report GPUs"
    return pynvml, None


def _text(value: object) -> str:
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    return str(value)[:MAX_NAME]


class NvmlCollector:
    """Reads every GPU of this node through an NVML module (pynvml, or a fake with the same names).

    collect() never raises: anything NVML refuses becomes None for that field
    (not supported) or an entry in the device's "unreadable" list.
    """

    def __init__(self, nvml: Any, max_devices: int = MAX_GPUS):
        self.nvml = nvml
        self.max_devices = max_devices
        self.error_class = getattr(nvml, "NVMLError", Exception)

    def _code(self, name: str, fallback: int) -> int:
        return getattr(self.nvml, name, fallback)

    def _call(
        self, fn: str, *args: Any, unreadable: list[dict[str, str]] | None = None, field: str | None = None
    ) -> Any:
        """fn(*args), or None where the device does not support it; other NVML errors are noted."""
        try:
            return getattr(self.nvml, fn)(*args)
        except self.error_class as e:
            code = getattr(e, "value", None)
            if code not in (self._code("NVML_ERROR_NOT_SUPPORTED", ERROR_NOT_SUPPORTED),) and unreadable is not None:
                unreadable.append({"field": field or fn, "error": _text(e)})
            return None
        except AttributeError:  # an older pynvml without this call
            return None

    def init_error(self, e: BaseException) -> str:
        code = getattr(e, "value", None)
        if code == self._code("NVML_ERROR_LIBRARY_NOT_FOUND", ERROR_LIBRARY_NOT_FOUND):
            return "no NVML library (libnvidia-ml.so): no NVIDIA driver is installed on this node"
        if code == self._code("NVML_ERROR_DRIVER_NOT_LOADED", ERROR_DRIVER_NOT_LOADED):
            return "the NVIDIA driver is installed but not loaded (check `lsmod | grep nvidia` and dmesg)"
        return f"NVML did not start: {_text(e)}"

    def collect(self) -> dict[str, Any]:
        """{"devices": [...], "error": None or why there are none, "driver": ..., "cuda_driver": ...}."""
        out: dict[str, Any] = {"devices": [], "error": None, "driver": None, "cuda_driver": None}
        try:
            self.nvml.nvmlInit()
        except Exception as e:  # NVMLError, or OSError from a broken library
            out["error"] = self.init_error(e)
            return out
        try:
            driver = self._call("nvmlSystemGetDriverVersion")
            out["driver"] = _text(driver) if driver is not None else None
            cuda = self._call("nvmlSystemGetCudaDriverVersion")
            if isinstance(cuda, int) and cuda > 0:  # 12040 -> "12.4"
                out["cuda_driver"] = f"{cuda // 1000}.{cuda % 1000 // 10}"
            count = self._call("nvmlDeviceGetCount")
            if count is None:
                out["error"] = "NVML could not count the GPUs"
                return out
            if count == 0:
                out["error"] = "NVML found no GPUs on this node"
                return out
            for index in range(min(count, self.max_devices)):
                out["devices"].append(self.device(index))
            if count > self.max_devices:
                out["truncated_from"] = count
        finally:
            try:
                self.nvml.nvmlShutdown()
            except Exception:  # shutting down a half-started NVML is not worth a fact
                pass
        return out

    def device(self, index: int) -> dict[str, Any]:
        """One GPU's facts; a GPU NVML cannot open is reported with its error, not skipped."""
        unreadable: list[dict[str, str]] = []
        try:
            h = self.nvml.nvmlDeviceGetHandleByIndex(index)
        except self.error_class as e:
            return {"index": index, "name": None, "error": _text(e)}

        def call(fn: str, *a: Any, field: str | None = None) -> Any:
            return self._call(fn, h, *a, unreadable=unreadable, field=field)

        dev: dict[str, Any] = {"index": index}
        name = call("nvmlDeviceGetName")
        dev["name"] = _text(name) if name is not None else None
        uuid = call("nvmlDeviceGetUUID")
        dev["uuid"] = _text(uuid) if uuid is not None else None
        pci = call("nvmlDeviceGetPciInfo")
        bus = getattr(pci, "busId", None) if pci is not None else None
        dev["pci_bus_id"] = _text(bus) if bus is not None else None
        mem = call("nvmlDeviceGetMemoryInfo")
        dev["memory_total_mib"] = int(mem.total) // 2**20 if mem is not None else None
        dev["memory_used_mib"] = int(mem.used) // 2**20 if mem is not None else None
        persistence = call("nvmlDeviceGetPersistenceMode")
        dev["persistence_mode"] = None if persistence is None else bool(persistence)
        dev["ecc"] = self.ecc(call)
        dev["retired_pages"] = self.retired_pages(call)
        dev["remapped_rows"] = self.remapped_rows(call)
        dev["pcie"] = {
            "gen": call("nvmlDeviceGetCurrPcieLinkGeneration"),
            "width": call("nvmlDeviceGetCurrPcieLinkWidth"),
            "max_gen": call("nvmlDeviceGetMaxPcieLinkGeneration"),
            "max_width": call("nvmlDeviceGetMaxPcieLinkWidth"),
        }
        dev["nvlink"] = self.nvlink(h)
        dev["unreadable"] = unreadable[:16]
        return dev

    def ecc(self, call: DeviceCall) -> dict[str, Any]:
        """ECC mode and error counts, uncorrectable first (those are the ones that crash jobs)."""
        nv = self.nvml
        mode = call("nvmlDeviceGetEccMode")
        current = mode[0] if isinstance(mode, (list, tuple)) else mode
        out: dict[str, Any] = {"enabled": None if current is None else bool(current)}
        unc = getattr(nv, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
        cor = getattr(nv, "NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)
        for counter, key in (
            (getattr(nv, "NVML_VOLATILE_ECC", 0), "volatile"),
            (getattr(nv, "NVML_AGGREGATE_ECC", 1), "aggregate"),
        ):
            out[key] = {
                "uncorrected": call("nvmlDeviceGetTotalEccErrors", unc, counter, field=f"ecc.{key}.uncorrected"),
                "corrected": call("nvmlDeviceGetTotalEccErrors", cor, counter, field=f"ecc.{key}.corrected"),
            }
        return out

    def retired_pages(self, call: DeviceCall) -> dict[str, Any] | None:
        """Pages retired for ECC errors (pre-Ampere); None where the GPU remaps rows instead."""
        nv = self.nvml
        double = call("nvmlDeviceGetRetiredPages", getattr(nv, "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1))
        single = call(
            "nvmlDeviceGetRetiredPages", getattr(nv, "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0)
        )
        pending = call("nvmlDeviceGetRetiredPagesPendingStatus")
        if double is None and single is None and pending is None:
            return None
        return {
            "double_bit": len(double) if double is not None else None,
            "single_bit": len(single) if single is not None else None,
            "pending": None if pending is None else bool(pending),
        }

    def remapped_rows(self, call: DeviceCall) -> dict[str, Any] | None:
        """Row remapping (Ampere and later): a pending remap needs a GPU reset to take effect."""
        rows = call("nvmlDeviceGetRemappedRows")
        if rows is None:
            return None
        corrected, uncorrected, pending, failure = (list(rows) + [0, 0, 0, 0])[:4]
        return {
            "uncorrectable": int(uncorrected),
            "correctable": int(corrected),
            "pending": bool(pending),
            "failure": bool(failure),
        }

    def nvlink(self, handle: Any) -> dict[str, Any] | None:
        """Which NVLink links are up; None on a GPU without NVLink."""
        links = min(getattr(self.nvml, "NVML_NVLINK_MAX_LINKS", MAX_NVLINKS), MAX_NVLINKS)
        active: list[int] = []
        inactive: list[int] = []
        for link in range(links):
            try:
                state = self.nvml.nvmlDeviceGetNvLinkState(handle, link)
            except self.error_class:
                # NOT_SUPPORTED / INVALID_ARGUMENT: this GPU has no such link.
                continue
            except AttributeError:
                return None
            (active if state else inactive).append(link)
        if not active and not inactive:
            return None
        return {"active": len(active), "inactive": inactive}


def collect(nvml: Any = None) -> dict[str, Any]:
    """This node's GPUs: {"devices": [...], "error": None or why none are reported, ...}."""
    if nvml is None:
        nvml, why = load_nvml()
        if nvml is None:
            return {"devices": [], "error": why, "driver": None, "cuda_driver": None}
    return NvmlCollector(nvml).collect()

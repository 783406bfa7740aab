"""The local GPU check (sweep kind `gpu`): one process per node, no peer.

`run_gpu_check(command)` is the agent side: it starts `python -m agents.gpu_check
SPEC.json` in its own session and holds it to the command's deadline, as the
runner holds a probe. The child imports torch and, for every GPU, climbs
init -> memory (allocate and touch most free memory, check the pattern) ->
matmul (bf16 and fp16 TFLOP/s, checked result) -> copy (pinned host<->device
GB/s against what the PCIe link carries); then, with two GPUs or more, pairs
(the GPU x GPU matrix, agents/gpu_pairs.py). A node without a usable GPU reports
`skipped` with reason `no_gpu`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from typing import Any

from agents import contract, gpu, gpu_contract, gpu_pairs
from agents.probe import StagedChild, StageLog, first_line, run_child

PROCESS_STARTED = time.time()
CHUNK_BYTES = 2**30  # memory is taken in 1 GiB pieces: one refused piece does not lose the others
TOUCH_PATTERN = 0xA5


class GpuStageFailure(Exception):
    """This GPU (or the whole check) stops here, with a reason code and a hint."""

    def __init__(self, reason: str, hint: str, status: str = "failed"):
        super().__init__(hint)
        self.reason, self.hint, self.status = reason, hint, status


def worst(statuses: Iterable[str]) -> str:
    out = "ok"
    for s in statuses:
        if contract.STATUS_SEVERITY[s] >= contract.STATUS_SEVERITY[out]:
            out = s
    return out


class GpuCheck(StagedChild):
    """One node's check; every exit goes through finish(), which writes the result once."""

    def __init__(self, spec: dict[str, Any], log: StageLog):
        super().__init__(spec, log, "init")
        # The agent's own NVML reading, passed in the spec (read here when it has none).
        nvml_facts = spec.get("nvml")
        self.nvml_facts = nvml_facts if nvml_facts is not None else gpu.collect()
        self.devices: list[dict[str, Any]] = []
        self.pairs: list[dict[str, Any]] = []
        self.gpu_index: int | None = None

    def enter(self, stage: str, gpu_index: int | None = None) -> None:
        now = self.close_stage()
        self.stage, self.gpu_index, self.stage_started = stage, gpu_index, now
        self.stage_limit = self.cmd["timeouts"][stage]
        self.log.emit(event="stage", stage=stage, gpu=gpu_index, limit_s=self.stage_limit)

    def watchdog(self) -> None:
        """A stage that overruns its timeout ends the check with a named result (a hung GPU never returns)."""
        while True:
            time.sleep(0.05)
            limit = self.overrun_limit()
            if limit is None:
                continue
            where = f"GPU {self.gpu_index}" if self.gpu_index is not None else "CUDA"
            hint = (
                f"{where} on {self.name} did not finish the {self.stage} stage within {limit:.0f}s: the GPU may "
                "be hung or in an error state (look for Xid errors in dmesg and in nvidia-smi -q)"
            )
            if self.finish("timeout", "gpu_error", hint):
                os._exit(3)
            return

    def result_fields(self, status: str) -> dict[str, Any]:
        return {
            "devices": self.devices,
            "pairs": self.pairs,
            "versions": self.versions,
            "stage_times": self.stage_times,
            "timings": {"total_s": round(time.time() - PROCESS_STARTED, 4)},
            "extra": {"nvml_error": self.nvml_facts.get("error"), "driver": self.nvml_facts.get("driver")},
        }

    def fail(self, e: BaseException) -> None:
        if isinstance(e, GpuStageFailure):
            self.finish(e.status, e.reason, e.hint)
            return
        import traceback

        traceback.print_exc()
        self.finish_crashed("gpu_error", "the gpu check", e)

    # -- the stages ---------------------------------------------------------------
    def run(self) -> None:
        self.enter("init")
        torch = self.import_torch()
        nvml_devices = self.nvml_facts.get("devices") or []
        if not torch.cuda.is_available():
            built = f"torch {torch.__version__}, CUDA {torch.version.cuda or 'not built in'}"
            if nvml_devices:
                raise GpuStageFailure(
                    "backend_unavailable",
                    (
                        f"NVML sees {len(nvml_devices)} GPU(s) on {self.name} but torch cannot use CUDA ({built}): install "
                        "a CUDA build of torch, or a driver new enough for its CUDA version"
                    ),
                )
            why = self.nvml_facts.get("error") or "NVML reports no GPUs"
            raise GpuStageFailure(
                "no_gpu",
                f"{self.name} has no usable NVIDIA GPU ({why}; {built}): nothing to "
                "check here; leave CPU nodes out of gpu sweeps",
                status="skipped",
            )
        count = min(torch.cuda.device_count(), gpu_contract.MAX_GPUS)
        for i in range(count):
            self.devices.append(self.check_device(i, nvml_devices))
        if count > 1:
            self.measure_pairs(count, nvml_devices)
        statuses = [d["status"] for d in self.devices]
        status = worst(statuses)
        bad = [d for d in self.devices if d["status"] == status and status != "ok"]
        if bad:
            self.stage = bad[0]["stage"]
            hint = "; ".join(f"GPU {d['index']}: {d['hint']}" for d in bad)[: contract.MAX_TEXT]
            self.finish(status, bad[0]["reason"], hint)
        else:
            self.finish("ok")

    def import_torch(self) -> Any:
        import warnings

        warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
        try:
            import torch
        except ImportError as e:
            raise GpuStageFailure("backend_unavailable", f"torch is not installed on {self.name}: {e}") from None
        self.torch = torch
        self.versions = {
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "driver": self.nvml_facts.get("driver"),
        }
        return torch

    def nvml_device_for(self, i: int, nvml_devices: list[dict[str, Any]]) -> dict[str, Any]:
        """The NVML facts of torch's device i: matched by UUID (CUDA's order need not be NVML's)."""
        try:
            uuid = str(self.torch.cuda.get_device_properties(i).uuid)
        except Exception:
            uuid = ""
        for dev in nvml_devices:
            if uuid and (dev.get("uuid") or "").removeprefix("GPU-") == uuid.removeprefix("GPU-"):
                return dev
        return nvml_devices[i] if i < len(nvml_devices) and not os.environ.get("CUDA_VISIBLE_DEVICES") else {}

    def check_device(self, i: int, nvml_devices: list[dict[str, Any]]) -> dict[str, Any]:
        torch = self.torch
        facts = self.nvml_device_for(i, nvml_devices)
        props = torch.cuda.get_device_properties(i)
        entry = {
            "index": i,
            "name": props.name[:128],
            "uuid": facts.get("uuid"),
            "status": "ok",
            "stage": "memory",
            "reason": None,
            "hint": None,
            "pcie": dict(facts.get("pcie") or {}),
        }
        try:
            self.enter("memory", i)
            entry.update(self.touch_memory(i))
            entry["stage"] = "matmul"
            self.enter("matmul", i)
            entry.update(self.matmul(i))
            entry["stage"] = "copy"
            self.enter("copy", i)
            entry.update(self.copy(i, entry["pcie"]))
        except GpuStageFailure as f:
            entry.update(status=f.status, reason=f.reason, hint=f.hint)
        except Exception as e:  # a CUDA error: this GPU fails, the others are still checked
            entry.update(status="failed", reason="gpu_error", hint=f"{self.stage} on GPU {i} failed: {first_line(e)}")
        finally:
            torch.cuda.empty_cache()
        return entry

    def measure_pairs(self, count: int, nvml_devices: list[dict[str, Any]]) -> None:
        """The GPU x GPU matrix (agents/gpu_pairs.py); a pair that fails is kept with its reason."""
        self.enter("pairs")
        # The NCCL part gets what the stage has left after the copies, less a margin to report in.
        deadline = time.monotonic() + self.cmd["timeouts"]["pairs"] - 5.0
        nvml, _ = gpu.load_nvml()
        bus_ids = [self.nvml_device_for(i, nvml_devices).get("pci_bus_id") for i in range(count)]
        links = gpu_pairs.nvml_links(nvml, bus_ids) if nvml is not None else {}
        self.pairs = gpu_pairs.measure(
            self.torch, links, count, self.cmd["copy_bytes"], self.cmd["copy_iterations"], deadline
        )

    def touch_memory(self, i: int) -> dict[str, Any]:
        """Take memory_fraction of the free memory in 1 GiB pieces, fill each and read it back."""
        torch = self.torch
        free, _ = torch.cuda.mem_get_info(i)
        want = int(free * self.cmd["memory_fraction"])
        chunks: list[Any] = []
        touched = 0
        try:
            while touched < want:
                size = min(CHUNK_BYTES, want - touched)
                try:
                    chunk = torch.empty(size, dtype=torch.uint8, device=f"cuda:{i}")
                except torch.cuda.OutOfMemoryError:
                    break  # someone else took memory meanwhile: measure what we got
                chunk.fill_(TOUCH_PATTERN)
                chunks.append(chunk)
                touched += size
            for n, chunk in enumerate(chunks):
                if not bool((chunk == TOUCH_PATTERN).all()):
                    raise GpuStageFailure(
                        "gpu_error",
                        f"memory read back wrong on GPU {i} (piece {n} of {len(chunks)} "
                        "GiB): suspect a memory fault; check ECC counters and retire the GPU",
                    )
        finally:
            del chunks
        if touched < want // 2:
            raise GpuStageFailure(
                "gpu_error",
                f"GPU {i} gave {touched / 2**30:.1f} GiB of the {want / 2**30:.1f} GiB it reported free",
                status="degraded",
            )
        return {"memory_touched_gib": round(touched / 2**30, 3), "memory_free_gib": round(free / 2**30, 3)}

    def matmul(self, i: int) -> dict[str, float]:
        """bf16 and fp16 square matmuls: TFLOP/s, after a result check on all-ones inputs."""
        torch = self.torch
        n, iters = self.cmd["matmul_n"], self.cmd["matmul_iterations"]
        out: dict[str, float] = {}
        for dtype, key in ((torch.bfloat16, "bf16_tflops"), (torch.float16, "fp16_tflops")):
            ones = torch.ones(n, n, dtype=dtype, device=f"cuda:{i}")
            # Every element of ones @ ones is n (accumulated in fp32, then rounded to the output type).
            got = float((ones @ ones)[0, 0].float().item())
            if abs(got - n) > n * 0.01:
                raise GpuStageFailure(
                    "gpu_error",
                    f"{key[:4]} matmul on GPU {i} returned {got} where {n} was due: wrong results; drain the node",
                )
            a = torch.randn(n, n, dtype=dtype, device=f"cuda:{i}")
            b = torch.randn(n, n, dtype=dtype, device=f"cuda:{i}")
            for _ in range(3):
                a @ b
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                a @ b
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1000.0
            out[key] = round(2.0 * n**3 * iters / seconds / 1e12, 2)
            del ones, a, b
        return out

    def copy(self, i: int, pcie: dict[str, Any]) -> dict[str, Any]:
        """Pinned host<->device copies in GB/s, compared with what the PCIe link carries."""
        torch = self.torch
        nbytes, iters = self.cmd["copy_bytes"], self.cmd["copy_iterations"]
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        dev = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{i}")
        out: dict[str, Any] = {}
        for key, dst, src in (("h2d_gbps", dev, host), ("d2h_gbps", host, dev)):
            dst.copy_(src, non_blocking=True)  # warm-up: maps the pages once
            torch.cuda.synchronize(i)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                dst.copy_(src, non_blocking=True)
            end.record()
            end.synchronize()
            out[key] = round(nbytes * iters / (start.elapsed_time(end) / 1000.0) / 1e9, 3)
        del host, dev
        link = gpu_contract.pcie_gbps(pcie.get("max_gen"), pcie.get("max_width"))
        out["pcie_gbps"] = link
        slower = min(out["h2d_gbps"], out["d2h_gbps"])
        if link and slower < gpu_contract.COPY_MIN_FRACTION * link:
            now = f"Gen{pcie.get('gen')} x{pcie.get('width')}"
            out.update(
                status="degraded",
                reason="below_baseline",
                hint=(
                    f"pinned copies on GPU {i} run {out['h2d_gbps']:.1f} GB/s to and {out['d2h_gbps']:.1f} GB/s from the "
                    f"GPU, {slower / link:.0%} of the {link:.1f} GB/s a PCIe Gen{pcie['max_gen']} x{pcie['max_width']} link "
                    f"carries (the link runs {now} now): reseat the card or riser, check the slot's BIOS lane settings"
                ),
            )
        return out


def main(argv: list[str] | None = None) -> None:
    run_child(argv, GpuCheck)


# -- the agent side ---------------------------------------------------------------


def run_gpu_check(
    command: dict[str, Any], *, python: str | None = None, nvml_facts: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Run the gpu check for this node and return its result (gpu_contract.validate_result shape).

    command is validated first (ContractError if invalid). nvml_facts: this node's
    gpu.collect() (read here when None), for the PCIe links and the UUIDs. Never
    blocks longer than the command's deadline_s plus the kill grace: a hung GPU is a timeout.
    """
    from agents import runner  # its process-group handling; imported here to keep the child light

    cmd = gpu_contract.validate_command(command)
    started = time.monotonic()
    with runner.child_dir() as (tmpdir, events_path, result_path, output_path):
        spec = {
            "command": cmd,
            "events_path": str(events_path),
            "result_path": str(result_path),
            "spawned_at": time.time(),
            "nvml": nvml_facts if nvml_facts is not None else gpu.collect(),
        }
        (tmpdir / "spec.json").write_text(json.dumps(spec))
        probe = runner.start_cold("agents.gpu_check", tmpdir, output_path, python)
        offset, events, killed = 0, [], False
        try:
            while not probe.done():
                new, offset = runner._read_events(events_path, offset)
                events += new
                if time.monotonic() >= started + cmd["deadline_s"]:
                    killed = True
                    break
                time.sleep(0.05)
        finally:
            runner._stop_group(probe)
        events += runner._read_events(events_path, offset)[0]
        output, written = runner.child_output(result_path, output_path)
    stages = [e for e in events if e.get("event") == "stage"]
    stage = stages[-1]["stage"] if stages else "init"
    gpu_index = stages[-1].get("gpu") if stages else None
    result = _unstamped_result(cmd, written, stage, gpu_index, killed, probe.returncode)
    return runner.closed_result(
        result,
        output,
        time.monotonic() - started,
        gpu_contract.validate_result,
        lambda e: gpu_contract.failed_result(
            cmd, "probe_crashed", f"the gpu check wrote an invalid result: {e}", stage, finished_at=time.time()
        ),
    )


def _unstamped_result(
    cmd: dict[str, Any],
    written: dict[str, Any] | None,
    stage: str,
    gpu_index: int | None,
    killed: bool,
    returncode: int | None,
) -> dict[str, Any]:
    """The check's own result, or one saying how the child ended without it (stopped at the deadline, or crashed).

    stage and gpu_index: where the child's stage log ends.
    """
    if written is not None:
        return dict(gpu_contract.addressed(cmd), **written)
    where = f" on GPU {gpu_index}" if gpu_index is not None else ""
    if killed:
        status, reason, hint = (
            "timeout",
            "gpu_error",
            f"the gpu check on {cmd['node']} was stopped at its {cmd['deadline_s']:.0f}s deadline in stage "
            f"{stage}{where}: the GPU may be hung (look for Xid errors in dmesg)",
        )
    else:
        status, reason, hint = (
            "failed",
            "probe_crashed",
            f"the gpu check on {cmd['node']} exited with code {returncode} in stage {stage}{where} without a result",
        )
    return dict(gpu_contract.addressed(cmd), status=status, stage=stage, reason=reason, hint=hint)


if __name__ == "__main__":
    main()

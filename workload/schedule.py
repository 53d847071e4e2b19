"""A step's averaging schedule, recorded on rank 0 for the last epoch's measured steps: when backward made each
gradient ready (a hook on its parameter, after its gradient was accumulated) and its bytes, backward's end and the
wait after it, and for DDP when each bucket's allreduce was handed to the process group and when it finished. Times
are seconds from the step's first forward. results.json's `schedule`; experiments/gpu_model replays it.

On a GPU readiness is a CUDA event recorded on the stream that computed the gradient, read after the step; DDP's
launches are events recorded at the host's hand-off, and its ends are not recorded (NCCL's work completes on its
stream). Horovod fuses and launches in its C++ background thread, which Python does not see: with --fused-buffers
(or --trace) the last STEPS_KEPT steps hold its fused buffers, from its timeline (horovod_ddp/fused_buffers.py), host
times from the step's start on every device; without it its record is the readiness and the wait."""

import functools
import statistics
import time
from typing import Any, Protocol

import torch

from contract.results import HOROVOD_TIMELINE

STEPS_KEPT = 8
"""Measured steps recorded whole, the last ones of the epoch; the rest is their medians."""


class Launches(Protocol):
    """Allreduces launched out of Python's sight, recorded by their framework (Horovod's fused buffers)."""

    def prepare(self, wanted: bool) -> None:
        """Before a step's timing: record it if `wanted`."""

    def stop(self) -> None:
        """The last recorded step is over."""

    def buffers(self) -> list[dict[str, Any]]:
        """Each allreduce's `indices`, when every rank had asked for it (`negotiated`), `launched` and `finished`:
        perf_counter's clock."""


class ScheduleRecorder:
    def __init__(self, module: torch.nn.Module, device: torch.device, launches: Launches | None = None) -> None:
        params = [p for p in module.parameters() if p.requires_grad]
        self.index = {id(p): i for i, p in enumerate(params)}
        self.bytes = [p.numel() * p.element_size() for p in params]
        self.gpu = device.type == "cuda"
        self.launches = launches
        self.host_start = 0.0
        self.wanted = False
        self.start: Any = None
        self.ready: dict[int, Any] = {}
        self.buckets: list[list[Any]] = []  # [indices, bytes, launched, finished]
        self.steps: list[dict[str, Any]] = []  # every recorded step, its stamps as taken
        for i, param in enumerate(params):
            param.register_post_accumulate_grad_hook(functools.partial(self._ready, i))

    def _stamp(self) -> Any:
        if self.gpu:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def _since(self, start: Any, stamp: Any) -> float:
        """Seconds from `start` to `stamp`, two of _stamp's: CUDA events on a GPU, host times elsewhere."""
        return start.elapsed_time(stamp) / 1000 if self.gpu else stamp - start

    def _ready(self, i: int, param: torch.Tensor) -> None:
        if self.wanted:
            self.ready[i] = self._stamp()  # the last micro-batch's: the one whose gradient is averaged

    def prepare(self, wanted: bool, left: int) -> None:
        """A step is about to be timed; `wanted`: it is recorded; `left`: the epoch's steps after it."""
        if self.launches:
            self.launches.prepare(wanted and left < STEPS_KEPT)  # the steps record() keeps whole

    def begin(self, wanted: bool) -> None:
        """A step starts (its first forward); `wanted`: a measured step of the last epoch, recorded."""
        self.wanted, self.ready, self.buckets = wanted, {}, []
        if wanted:
            self.start, self.host_start = self._stamp(), time.perf_counter()

    def launched(self, bucket: Any) -> list[Any] | None:
        """DDP's comm hook hands `bucket` (a dist.GradBucket) to the process group: its record, for finished()."""
        if not self.wanted:
            return None
        entry = [sorted(self.index[id(p)] for p in bucket.parameters()), bucket.buffer().numel() *
                 bucket.buffer().element_size(), self._stamp(), None]
        self.buckets.append(entry)
        return entry

    def finished(self, entry: list[Any] | None) -> None:
        """The bucket's allreduce completed (its future's callback, on the CPU: a host time)."""
        if entry is not None and not self.gpu:
            entry[3] = time.perf_counter()

    def end(self, backward_end: float, wait_s: float, last: bool = False) -> None:
        """The step's backward ended at `backward_end` (perf_counter, the device synchronised on a GPU) and it waited
        `wait_s` for its averaged gradients; `last`: the epoch's last step. Called after the step's timing: its stamps
        are kept as they are, and made seconds only in record(), after training."""
        if not self.wanted:
            return
        self.wanted = False
        now = self._stamp() if self.gpu else None  # on a GPU: the host's backward_end, placed on the device's clock
        self.steps.append({"start": self.start, "ready": self.ready, "buckets": self.buckets, "wait_s": wait_s,
                           "backward_end": backward_end, "now": now, "host_start": self.host_start,
                           "host_now": time.perf_counter()})
        if last and self.launches:
            self.launches.stop()

    def _seconds(self, raw: dict[str, Any], launched: list[dict[str, Any]]) -> dict[str, Any]:
        """One recorded step in seconds from its start; `launched`: the Launches' allreduces, host times."""
        start = raw["start"]
        if self.gpu:
            raw["now"].synchronize()
            backward = self._since(start, raw["now"]) - (raw["host_now"] - raw["backward_end"])
        else:
            backward = raw["backward_end"] - start
        return {"ready_s": sorted(((i, self._since(start, s)) for i, s in raw["ready"].items()), key=lambda r: r[1]),
                "backward_end_s": backward, "wait_s": raw["wait_s"],
                "allreduces": [{"indices": indices, "bytes": size, "launched_s": self._since(start, launched),
                                "finished_s": None if done is None else done - start}
                               for indices, size, launched, done in raw["buckets"]] + [
                    {"indices": a["indices"], "bytes": sum(self.bytes[i] for i in a["indices"]),
                     **{f"{k}_s": a[k] - raw["host_start"] for k in ("negotiated", "launched", "finished")}}
                    for a in launched if raw["host_start"] <= a["launched"] <= raw["host_now"]]}

    def record(self) -> dict[str, Any] | None:
        """results.json's `schedule`: each gradient's bytes, its median readiness over the measured steps, the median
        backward end and wait, and the last STEPS_KEPT steps whole; None where no step was recorded."""
        if not self.steps:
            return None
        launched = self.launches.buffers() if self.launches else []
        kept = len(self.steps) - STEPS_KEPT
        every = [self._seconds(raw, launched if i >= kept else []) for i, raw in enumerate(self.steps)]
        readiness: dict[int, list[float]] = {}
        for step in every:
            for i, at in step["ready_s"]:
                readiness.setdefault(i, []).append(at)
        return {"clock": "cuda events" if self.gpu else "host", "steps_measured": len(every),
                "allreduces_from": HOROVOD_TIMELINE if self.launches else
                "DDP's comm hook" if any(raw["buckets"] for raw in self.steps) else None,
                "gradient_bytes": self.bytes,
                "ready_s": {str(i): statistics.median(v) for i, v in sorted(readiness.items())},
                "backward_end_s": statistics.median(s["backward_end_s"] for s in every),
                "wait_s": statistics.median(s["wait_s"] for s in every), "steps": every[-STEPS_KEPT:]}

"""`--trace`: a Chrome trace per rank of a few steady-state steps, for the reader who asks why one backend is faster.

Every backend records the same steps with torch.profiler (`trace-rank<R>.json`); Horovod also writes its own
timeline of those steps (`horovod-timeline.json`, rank 0 records every rank's collectives). Open either in
chrome://tracing or https://ui.perfetto.dev. The profiler slows the traced steps; the speed metric is the median
step, which a few slow steps barely move. Horovod's timeline slows every step (docs/options.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from workload.tools import Tool

if TYPE_CHECKING:  # torch is imported when a run traces, not by the entry points that only name the files
    import torch

STEPS = 3
TIMELINE = "horovod-timeline.json"


def trace_file(rank: int) -> str:
    return f"trace-rank{rank}.json"


class Tracer(Tool):
    """Traces steps warmup+1 … warmup+STEPS of the first epoch this run trains (the first steps timed), warmup as the
    trainer applies it (`timed_after`)."""

    def __init__(self, rank: int, output_dir: str, device: torch.device,
                 timeline: tuple[Callable[[str], None], Callable[[], None]] | None = None) -> None:
        self.rank, self.first, self.dir, self.device = rank, 0, Path(output_dir), device
        self.timeline = timeline
        self.profiler: torch.profiler.profile | None = None
        self.done = False

    def timed_after(self, warmup: int) -> None:
        self.first = warmup + 1

    def before_step(self, epoch: int, step: int) -> None:
        if self.done or self.profiler or step != self.first:
            return
        import torch

        self.dir.mkdir(parents=True, exist_ok=True)
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.profiler = torch.profiler.profile(activities=activities)
        self.profiler.__enter__()
        if self.timeline:
            self.timeline[0](str(self.dir / TIMELINE))  # Horovod: every rank starts it, rank 0 writes it

    def after_step(self, epoch: int, step: int, steps: int) -> None:
        if not self.profiler or (step < self.first + STEPS - 1 and step < steps):
            return
        if self.timeline:
            self.timeline[1]()
        self.profiler.__exit__(None, None, None)
        self.profiler.export_chrome_trace(str(self.dir / trace_file(self.rank)))
        self.profiler, self.done = None, True

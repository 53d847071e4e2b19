"""Horovod's fused buffers, read from its timeline: which gradients each allreduce carried, when every rank had asked
for them, when Horovod's background thread launched it and when its tensors were done. Rank 0 (Horovod's
coordinator) writes the timeline; --fused-buffers (or --trace) turns it on, because Horovod 0.28.1 can start it only
where HOROVOD_TIMELINE was set at hvd.init, and from then on its writer thread polls for events for the whole run
(timeline.cc's WriterLoop), which slows every step (docs/options.md).

In the timeline each tensor is a process. The coordinator's negotiation of a tensor ends once every rank has asked
for it (NEGOTIATE_ALLREDUCE). PerformOperation (operations.cc) then writes a top-level `ALLREDUCE` begin for every
tensor of one response, one after another, before the response's first activity; the tensor's last end closes it. A
fused buffer is such a run of begins: it ends at the first event of a tensor already in it (another thread's events,
a GPU's finalizer, belong to earlier buffers and do not end it). It is launched once its data is ready: where the
op waits for it (WAIT_FOR_DATA, WAIT_FOR_OTHER_TENSOR_DATA: a GPU's ready events) at the end of that wait."""

import atexit
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PREFIX = "allreduce."
"""horovod.torch names a gradient's allreduce after its parameter: `allreduce.<name>`."""
WAITS = ("WAIT_FOR_DATA", "WAIT_FOR_OTHER_TENSOR_DATA")
TIMES = ("negotiated", "launched", "finished")
"""A fused buffer's moments: every rank had asked for it, it was launched, its tensors were done."""


class Timeline:
    """Horovod's timeline, one file at a time, shared by --trace's file and the fused buffers' own; every file it
    opened, for fused_buffers to read."""

    def __init__(self, start: Callable[[str], None], stop: Callable[[], None]) -> None:
        self._start, self._stop = start, stop
        self.file: str | None = None
        self.files: list[str] = []

    def start(self, path: str) -> None:
        self._start(path)  # Horovod: blocks until the writer has opened it
        self.file = path
        self.files.append(path)

    def stop(self) -> None:
        self._stop()  # Horovod: blocks until the writer has flushed and closed it
        self.file = None


class FusedBuffers:
    """The schedule recorder's source of Horovod's launches (workload/schedule.py): the timeline is on for every
    step the recorder wants, its own scratch file where --trace's is not open."""

    def __init__(self, timeline: Timeline, names: list[str]) -> None:
        self.timeline = timeline
        self.index = {PREFIX + name: i for i, name in enumerate(names)}
        self.scratch: str | None = None
        # The timeline's times are the wall clock's; taken after hvd.init, as Horovod took its own anchor.
        self.offset = time.time() - time.perf_counter()

    def prepare(self, wanted: bool) -> None:
        if wanted and self.timeline.file is None:
            if not self.scratch:
                self.scratch = tempfile.mkdtemp(prefix="fused-buffers-")
                atexit.register(shutil.rmtree, self.scratch, True)  # a run that fails before buffers() too
            self.timeline.start(os.path.join(self.scratch, f"timeline-{len(self.timeline.files)}.json"))

    def stop(self) -> None:
        if self.timeline.file is not None and self.scratch and self.timeline.file.startswith(self.scratch):
            self.timeline.stop()

    def buffers(self) -> list[dict[str, Any]]:
        """Every fused buffer of a gradient in the files written so far, its times on perf_counter's clock; the
        scratch files are removed."""
        self.stop()
        found = [b for path in self.timeline.files if Path(path).is_file()
                 for b in fused_buffers(read(Path(path)), self.index)]
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)
        return [{"indices": b["indices"], **{k: b[f"{k}_epoch_s"] - self.offset for k in TIMES}} for b in found]


def read(path: Path) -> list[dict[str, Any]]:
    """A timeline's events. Horovod closes the list after each event, so a file whose writer stopped mid-event
    lacks only its last one."""
    text = path.read_text()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        cut = text.rstrip().rstrip("]").rstrip().rsplit("},", 1)[0]
        return json.loads(cut + "}]") if cut.startswith("[") else []


def _processes(events: list[dict[str, Any]]) -> tuple[int, dict[int, str]]:
    """The timeline's start (µs since the epoch) and each process's tensor name."""
    epoch_us, names = 0, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            args = e.get("args", {})
            if "start_time_since_epoch_in_micros" in args:
                epoch_us = args["start_time_since_epoch_in_micros"]
            elif "name" in args:
                names[e["pid"]] = args["name"]
    return epoch_us, names


def fused_buffers(events: list[dict[str, Any]], index: dict[str, int]) -> list[dict[str, Any]]:
    """The fused buffers of the tensors `index` names (a tensor's name → its parameter's index): each buffer's
    indices, when its last tensor's negotiation ended (every rank had asked for it), its launch (the end of its wait
    for data, else its first top-level begin) and its finish (its tensors' last end), seconds since the epoch.
    Buffers holding none of `index`'s tensors (metrics, the averaging alone) are left out."""
    epoch_us, names = _processes(events)
    depth: dict[str, int] = {}
    activity: dict[str, str] = {}  # a tensor's open activity
    negotiated: dict[str, int] = {}  # a tensor's last negotiation end
    runs: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    open_run: dict[str, dict[str, Any]] = {}  # a tensor's buffer, until its top-level end
    for e in events:
        if e.get("ph") not in ("B", "E") or e.get("pid") not in names:
            continue
        tensor = names[e["pid"]]
        if e["ph"] == "B" and e.get("name") == "ALLREDUCE" and depth.get(tensor, 0) == 0:
            if current is None:
                current = {"tensors": [], "begun_us": e["ts"], "asked_us": None, "launched_us": None,
                           "finished_us": e["ts"]}
                runs.append(current)
            current["tensors"].append(tensor)
            if tensor in negotiated:
                current["asked_us"] = max(current["asked_us"] or 0, negotiated.pop(tensor))
            open_run[tensor] = current
            depth[tensor] = 1
            continue
        if current is not None and tensor in current["tensors"]:
            current = None  # the response's first activity: its begins are over
        if e["ph"] == "B":
            activity[tensor] = e.get("name", "")
            if tensor in open_run:
                depth[tensor] += 1
            continue
        ended = activity.pop(tensor, "")
        if tensor not in open_run:
            if ended.startswith("NEGOTIATE"):
                negotiated[tensor] = e["ts"]
            continue
        found = open_run[tensor]
        depth[tensor] -= 1
        if ended in WAITS:
            found["launched_us"] = max(found["launched_us"] or 0, e["ts"])
        if depth[tensor] == 0:
            open_run.pop(tensor)
            found["finished_us"] = max(found["finished_us"], e["ts"])
    out = []
    for run in runs:
        indices = sorted(index[t] for t in run["tensors"] if t in index)
        if indices and not any(t in open_run for t in run["tensors"]):  # whole: every tensor ended in this file
            launched = run["launched_us"] or run["begun_us"]
            asked = run["asked_us"] or run["begun_us"]
            out.append({"indices": indices, "negotiated_epoch_s": (epoch_us + asked) / 1e6,
                        "launched_epoch_s": (epoch_us + launched) / 1e6,
                        "finished_epoch_s": (epoch_us + run["finished_us"]) / 1e6})
    return out

"""Horovod's fused buffers read from its timeline (horovod_ddp/fused_buffers.py), on a timeline written by hand as
Horovod 0.28.1's timeline.cc writes one: each tensor a process, a response's top-level ALLREDUCE begins one after
another, then its activities; and the timeline shared by --trace and the recorder, with its start and stop faked. A
real two-rank run's buffers are checked in tests/test_options.py."""

import json
from pathlib import Path

import pytest

from horovod_ddp.fused_buffers import FusedBuffers, Timeline, fused_buffers, read

EPOCH_US = 1_700_000_000_000_000


def timeline(*events: tuple[str, str, str, int]) -> list[dict]:
    """Events (phase, name, tensor, ts µs) as Horovod writes them: a process per tensor, named when first seen."""
    out = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"start_time_since_epoch_in_micros": EPOCH_US}}]
    pids: dict[str, int] = {}
    for phase, name, tensor, ts in events:
        if tensor not in pids:
            pids[tensor] = len(pids) + 1
            out.append({"name": "process_name", "ph": "M", "pid": pids[tensor], "args": {"name": tensor}})
        out.append({"ph": phase, "ts": ts, "pid": pids[tensor], **({"name": name} if phase != "E" else {})})
    return out


def allreduce(tensors: list[str], start: int, end: int) -> list[tuple[str, str, str, int]]:
    """One response: negotiated, its begins, one activity each, its ends."""
    return ([("B", "NEGOTIATE_ALLREDUCE", t, start - 5) for t in tensors] + [("E", "", t, start - 1) for t in tensors]
            + [("B", "ALLREDUCE", t, start) for t in tensors] + [("B", "GLOO_ALLREDUCE", t, start + 1) for t in tensors]
            + [("E", "", t, end - 1) for t in tensors] + [("E", "", t, end) for t in tensors])


INDEX = {"allreduce.fc.weight": 0, "allreduce.fc.bias": 1, "allreduce.conv.weight": 2}


def test_each_response_is_one_buffer_with_its_launch_and_its_last_end():
    events = timeline(*allreduce(["allreduce.fc.bias", "allreduce.fc.weight"], 100, 300),
                      *allreduce(["allreduce.conv.weight"], 400, 900))
    found = fused_buffers(events, INDEX)
    assert [b["indices"] for b in found] == [[0, 1], [2]]
    assert found[0]["launched_epoch_s"] == (EPOCH_US + 100) / 1e6
    assert found[0]["finished_epoch_s"] == (EPOCH_US + 300) / 1e6
    assert found[1]["finished_epoch_s"] - found[1]["launched_epoch_s"] == pytest.approx(500e-6, abs=1e-6)


def test_another_thread_s_events_inside_a_response_s_begins_do_not_split_it_and_metrics_are_left_out():
    first = allreduce(["allreduce.conv.weight", "metric"], 10, 20)  # a buffer with a tensor that is no gradient
    # A GPU's finalizer ends an earlier buffer between a response's begins.
    events = timeline(*first, ("B", "ALLREDUCE", "early", 30), ("B", "NCCL_ALLREDUCE", "early", 31),
                      ("B", "ALLREDUCE", "allreduce.fc.bias", 40), ("E", "", "early", 41), ("E", "", "early", 41),
                      ("B", "ALLREDUCE", "allreduce.fc.weight", 42),
                      ("B", "MEMCPY_IN_FUSION_BUFFER", "allreduce.fc.bias", 43), ("E", "", "allreduce.fc.bias", 44),
                      ("B", "MEMCPY_IN_FUSION_BUFFER", "allreduce.fc.weight", 43), ("E", "", "allreduce.fc.weight", 44),
                      ("E", "", "allreduce.fc.bias", 60), ("E", "", "allreduce.fc.weight", 61),
                      *allreduce(["metric"], 70, 80))
    found = fused_buffers(events, INDEX)
    assert [b["indices"] for b in found] == [[2], [0, 1]]
    assert found[1]["launched_epoch_s"] == (EPOCH_US + 40) / 1e6
    assert found[1]["finished_epoch_s"] == (EPOCH_US + 61) / 1e6


def test_a_buffer_still_open_when_the_file_ends_is_left_out_and_a_cut_file_is_read_to_its_last_whole_event(tmp_path):
    events = timeline(*allreduce(["allreduce.fc.bias"], 100, 200), ("B", "ALLREDUCE", "allreduce.fc.weight", 300))
    assert [b["indices"] for b in fused_buffers(events, INDEX)] == [[1]]
    path = tmp_path / "timeline.json"
    path.write_text(json.dumps(events)[:-1] + ',\n{"ph": "E", "ts": 3')  # the writer stopped mid-event
    assert read(path) == events


def test_a_buffer_is_launched_when_its_wait_for_data_ends_and_negotiated_when_its_last_tensor_was():
    events = timeline(("B", "NEGOTIATE_ALLREDUCE", "allreduce.fc.bias", 10), ("E", "", "allreduce.fc.bias", 12),
                      ("B", "NEGOTIATE_ALLREDUCE", "allreduce.fc.weight", 11), ("E", "", "allreduce.fc.weight", 15),
                      ("B", "ALLREDUCE", "allreduce.fc.bias", 20), ("B", "ALLREDUCE", "allreduce.fc.weight", 20),
                      ("B", "WAIT_FOR_DATA", "allreduce.fc.bias", 21), ("E", "", "allreduce.fc.bias", 30),
                      ("B", "WAIT_FOR_DATA", "allreduce.fc.weight", 21), ("E", "", "allreduce.fc.weight", 35),
                      ("B", "NCCL_ALLREDUCE", "allreduce.fc.bias", 36), ("E", "", "allreduce.fc.bias", 50),
                      ("E", "", "allreduce.fc.bias", 51), ("E", "", "allreduce.fc.weight", 52))
    (found,) = fused_buffers(events, INDEX)
    assert found["indices"] == [0, 1]
    assert [round(found[k] * 1e6 - EPOCH_US) for k in ("negotiated_epoch_s", "launched_epoch_s", "finished_epoch_s")] \
        == [15, 35, 52]


def test_the_recorder_s_timeline_starts_where_the_tracer_s_is_not_open_and_stops_only_its_own(tmp_path):
    calls = []
    shared = Timeline(lambda path: calls.append(("start", path)), lambda: calls.append(("stop",)))
    fused = FusedBuffers(shared, ["fc.weight", "fc.bias"])
    shared.start(str(tmp_path / "traced.json"))  # --trace's steps
    fused.prepare(True)
    fused.stop()
    assert calls == [("start", str(tmp_path / "traced.json"))]  # the tracer's file: read, never redirected or stopped
    shared.stop()
    fused.prepare(False)
    fused.prepare(True)
    fused.prepare(True)
    scratch = shared.file
    assert scratch and scratch.startswith(fused.scratch) and calls[-1] == ("start", scratch) and len(calls) == 3
    for path in shared.files:
        Path(path).write_text(json.dumps(timeline(*allreduce(["allreduce.fc.bias"], 100, 200))))
    assert [b["indices"] for b in fused.buffers()] == [[1], [1]]  # both files read
    assert calls[-1] == ("stop",) and not Path(fused.scratch).exists()

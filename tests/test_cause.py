"""Why, and how far from the limit: the ceiling arm, each backend's efficiency, the step's parts paired against the
ceiling and each other, CPU by thread, the cause paragraph and its picture, from records made here."""

import threading

import pytest
import torch

from analysis import cause, report, speed, stats
from contract import options
from contract.config import TrainConfig
from contract.phases import STEP_PHASES, THREAD_GROUPS
from launchers import arms
from workload import metrics, threads


def test_a_thread_is_grouped_by_when_it_first_appeared(monkeypatch):
    loop = threading.get_native_id()
    monkeypatch.setattr(threads, "_seen", {threads.BEFORE: frozenset({loop, 11}),
                                           threads.READY: frozenset({loop, 11, 12})})
    start = {loop: 1.0, 11: 0.5, 12: 0.0}
    end = {loop: 2.0, 11: 0.75, 12: 0.125, 13: 0.25}  # 13 appeared after the group: training's
    assert threads.by_group(start, end) == [1.0, 0.25, 0.125, 0.25]
    assert list(THREAD_GROUPS) == ["training thread", "before the group", "framework", "since training began"]


def test_without_the_group_marked_or_per_thread_times_there_are_no_groups(monkeypatch):
    monkeypatch.setattr(threads, "_seen", {})
    assert threads.by_group({1: 0.0}, {1: 1.0}) is None  # a single-process reference never forms a group
    monkeypatch.setattr(threads, "_seen", {threads.READY: frozenset()})
    assert threads.by_group(None, {1: 1.0}) is None


def test_this_thread_s_cpu_time_is_read_from_proc():
    times = threads.cpu_times()
    assert threading.get_native_id() in times and all(t >= 0 for t in times.values())


def test_cpu_by_thread_is_per_1000_samples_over_all_ranks_and_per_rank():
    by_thread = torch.tensor([[1.0, 0.0, 0.5, 0.0], [3.0, 0.0, 0.5, 0.0]], dtype=torch.float64)
    found = metrics.cpu_by_thread(by_thread, torch.tensor([1000.0, 3000.0], dtype=torch.float64))
    assert found["cpu_s_per_1k_by_thread"] == {"groups": list(THREAD_GROUPS), "all_ranks": [1.0, 0.0, 0.25, 0.0],
                                               "per_rank": [[1.0, 0.0, 0.5, 0.0], [1.0, 0.0, 1 / 6, 0.0]]}
    assert metrics.cpu_by_thread(torch.full((2, 4), float("nan")), torch.ones(2)) == {}


def test_the_step_s_parts_add_up_to_its_middle_half():
    torch.manual_seed(0)
    times = torch.rand(2, 40, 8, dtype=torch.float64) / 100
    times[..., 1] = times[..., 5:8].sum(-1) + 0.001  # compute: forward, backward, optimizer and 1 ms beside them
    times[0, 3, 2] = 5.0  # one stalled wait: outside the middle half, it moves nothing
    step = times[..., :3].sum(-1)
    parts = metrics.phases(times, step)
    assert sum(parts[name] for name in (*STEP_PHASES, "remainder")) == pytest.approx(parts["step"])
    assert parts["remainder"] == pytest.approx(0.001) and parts["wait"] < 0.01


def test_one_ceiling_per_launcher_launched_as_its_arms_are():
    found = arms.ceilings(["native", "horovod"], ["ray", "torchrun", "mp.spawn", "horovodrun"])
    assert [(a.label, a.backend, a.launcher) for a in found] == [
        ("ceiling", "native", "ray"), ("ceiling/torchrun", "native", "torchrun"),
        ("ceiling/mp.spawn", "native", "mp.spawn"), ("ceiling/horovodrun", "horovod", "horovodrun")]
    assert [a.label for a in arms.ceilings(["horovod"], ["ray", "torchrun"])] == ["ceiling"]
    assert arms.ceilings(["horovod"], ["ray"])[0].backend == "horovod"  # RayExecutor where only Horovod runs


def test_the_ceiling_keeps_the_workload_and_drops_what_shapes_averaging():
    cfg = TrainConfig(amp="bf16", grad_accumulation=2, compression="fp16", bucket_mb=0.01, cycle_time_ms=2.0,
                      batch_size=64)
    ceiling = options.ceiling(cfg)
    assert ceiling.no_averaging and (ceiling.amp, ceiling.grad_accumulation, ceiling.batch_size) == ("bf16", 2, 64)
    assert (ceiling.compression, ceiling.bucket_mb, ceiling.cycle_time_ms) == ("none", 0.0, 0.0)
    command = arms.command(arms.Arm("horovod", "horovodrun", ceiling=True), ceiling)
    assert "--no-averaging" in command and command[command.index("--compression") + 1] == "none"


def record(arm, round_, rate, launcher="ray", phases_ms=None, cpu=None):
    parts = dict(zip((*STEP_PHASES, "remainder"), phases_ms or (1, 10, 20, 0, 1, 0)))
    epoch = {"phases_s": {**{k: v / 1000 for k, v in parts.items()}, "step": sum(parts.values()) / 1000}}
    if cpu:
        epoch["cpu_s_per_1k_by_thread"] = {"groups": list(THREAD_GROUPS), "all_ranks": cpu, "per_rank": [cpu]}
    return {"arm": arm, "workers": 2, "round": round_, "status": "ok", speed.METRIC: rate, "epochs": [epoch],
            "launcher": launcher}


def comparison_of(records):
    return {"settings": {"launchers": ["ray"], "workers": [2]}, "runs": records,
            "efficiency": {"2": speed.efficiency(records, 2, ["native", "horovod"])}}


RECORDS = [record(arm, r, rate, "ray", parts, cpu) for r in range(3) for arm, rate, parts, cpu in (
    ("native", 100 + r, (1, 10, 21 + r % 2, 2, 1, 0), [0.2, 0.0, 0.01, 0.0]),
    ("horovod", 80 + r, (1, 10, 27 + r % 2, 4, 1, 0), [0.25, 0.0, 0.05, 0.0]),
    ("ceiling", 120 + r, (1, 10, 20 + r % 2, 0, 1, 0), [0.2, 0.0, 0.0, 0.0]))]


def test_efficiency_is_each_backend_over_its_ceiling_paired_by_round():
    found = speed.efficiency(RECORDS, 2, ["native", "horovod", "native/torchrun"])
    assert list(found) == ["native", "horovod"]  # no ceiling/torchrun ran: no efficiency for its arm
    expected = stats.paired_ratio([100, 101, 102], [120, 121, 122])
    assert found["native"]["ratio"] == pytest.approx(expected.ratio) and found["native"]["ceiling"] == "ceiling"
    assert found["native"]["ci95"] == pytest.approx(list(expected.ci95))
    assert found["native"]["ceiling_samples_per_s"] == 121
    assert speed.ceiling_of("horovod/horovodrun") == "ceiling/horovodrun" and speed.ceiling_of("horovod") == "ceiling"


def test_the_cause_names_only_the_parts_whose_interval_decides():
    comparison = comparison_of(RECORDS)
    assert cause.pairs(comparison) == [("native", "horovod"), ("native", "ceiling"), ("horovod", "ceiling")]
    found = cause.difference(comparison, 2, "native", "horovod")
    assert found["rounds"] == 3 and found["decided"] == ["backward", "wait"]  # biggest first; the rest equal
    assert found["ms"]["step"][0] == pytest.approx(-8.0) and found["ms"]["forward"] == (0.0, (0.0, 0.0))
    said = cause.paragraph(comparison, 2)
    assert "native's step is 8.0 ms shorter than horovod's (95 % CI -8.0 – -8.0 ms, 3 rounds): backward -6.0 ms, " \
           "wait -2.0 ms. " in said
    assert "horovod's step is 11.0 ms longer than ceiling's" in said
    assert "framework: native 0.010, horovod 0.050" in said
    assert "native 0.83 (" in cause.efficiency_line(comparison, 2)
    assert "| native | 3 | 0.200 | 0.000 | 0.010 | 0.000 | 0.210 |" in cause.thread_table(comparison, 2)


def test_a_part_too_small_to_matter_is_not_named_however_certain():
    shifted = [{**r, "epochs": [{"phases_s": {**r["epochs"][0]["phases_s"], "data": 0.001 + 0.0001 * (r["arm"] ==
                                                                                                   "native")}}]}
               for r in RECORDS]
    found = cause.difference(comparison_of(shifted), 2, "native", "horovod")
    assert found["ms"]["data"][0] == pytest.approx(0.1) and "data" not in found["decided"]


def test_the_picture_stacks_each_arm_s_step(tmp_path):
    cause.plot_phases(comparison_of(RECORDS), tmp_path / cause.PHASES_PNG)
    assert (tmp_path / cause.PHASES_PNG).read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("estimate, said", [
    ({"ratio": 1.14, "ci95": [1.09, 1.2]}, "1.14 (1.09–1.20)"),
    ({"ratio": 0.98, "ci95": [0.95, 1.004]}, "undecided 0.98 (0.95–1.00)"),
    ({"ratio": 1.2, "ci95": None}, "1.20 (one round)"),
    (None, "—"),
])
def test_the_answer_table_keeps_one_short_figure_per_cell(estimate, said):
    assert report.short(estimate) == said


def test_horovod_s_ceiling_is_held_against_ddp_s_where_both_ran():
    records = [record(arm, r, rate + r, launcher) for r in range(3) for arm, rate, launcher in (
        ("ceiling/torchrun", 100, "torchrun"), ("ceiling/horovodrun", 90, "horovodrun"))]
    settings = {"repeats": 3, "launchers": ["torchrun", "horovodrun"]}
    said = cause.ceilings_line({"settings": settings, "runs": records}, 2)
    assert said.startswith("**The runtimes alone**: ceiling/horovodrun ÷ ceiling/torchrun, steady samples/s, 0.90 (")
    assert cause.ceilings_line(comparison_of(RECORDS), 2) is None  # on Ray: one ceiling

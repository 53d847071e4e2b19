"""The elastic trials: what a run's timeline says (experiments/elastic/report.py), how an elastic rank cuts the data
(workload/elastic.py), and the refusals of `python -m experiments.elastic.trials`. The trials themselves (three
frameworks on the simulated cluster, half an hour) are a benchmark, run by hand; their figures are in docs/findings.md
and docs/elastic.md."""

import json
import re
import subprocess
import sys

import pytest
import torch
from torch.utils.data import DistributedSampler

from contract.config import ConfigError, TrainConfig
from experiments.elastic import report as elastic, trials as elastic_trials
from workload import elastic as rank


def step(t, world, epoch, offset):
    return {"ev": "step", "t": t, "world": world, "epoch": epoch, "offset": offset, "n": world * 100}


def start(t, world, epoch, offset):
    return {"ev": "start", "t": t, "world": world, "epoch": epoch, "offset": offset}


SHRINK_AND_GROW = [start(0.0, 2, 0, 0), step(1, 2, 0, 200), step(2, 2, 0, 400),
                   step(10.05, 2, 0, 600),  # the dying world's last step, logged after the loss: not progress
                   start(11.0, 1, 0, 400), step(11.5, 1, 0, 500), step(12, 1, 0, 600),
                   start(75.0, 2, 0, 600), step(76, 2, 0, 800), {"ev": "done", "t": 77.0, "accuracy": 0.97}]


def test_a_run_that_shrinks_and_grows_back():
    got = elastic.figures(SHRINK_AND_GROW, killed=10.0, returned=70.0, epochs=1, samples=800, full=2)
    # 200 + 200 + 200 (lost) + 100 + 100 + 200 = 1000 samples for an 800-sample epoch
    assert got == {"finished": True, "stalled_s": 1.5, "continued_world": 1, "regrown_s": 6.0,
                   "samples_twice": 200, "worlds": [1, 2], "accuracy": 0.97}


def test_a_run_that_waits_for_the_node_never_shrank_so_it_has_no_regrowth():
    events = [start(0.0, 2, 0, 0), step(1, 2, 0, 200), start(80.0, 2, 0, 0), step(81, 2, 0, 200), step(82, 2, 0, 400)]
    got = elastic.figures(events, killed=5.0, returned=65.0, epochs=1, samples=400, full=2)
    assert (got["finished"], got["stalled_s"], got["continued_world"], got["regrown_s"], got["samples_twice"],
            got["accuracy"]) == (False, 76.0, 2, None, None, None)


def test_a_full_size_world_that_broke_up_before_its_first_step_is_not_the_regrowth():
    events = SHRINK_AND_GROW[:7] + [start(71.0, 2, 0, 600), start(72.0, 1, 0, 600), step(73, 1, 0, 700)] \
        + SHRINK_AND_GROW[7:]
    got = elastic.figures(events, killed=10.0, returned=70.0, epochs=1, samples=800, full=2)
    assert (got["stalled_s"], got["regrown_s"]) == (1.5, 6.0)


def test_no_loss_no_figures_of_a_loss():
    got = elastic.figures([start(0.0, 2, 0, 0), step(1, 2, 0, 200), {"ev": "done", "t": 2.0}], killed=None,
                          returned=None, epochs=1, samples=200, full=2)
    assert (got["stalled_s"], got["continued_world"], got["regrown_s"], got["samples_twice"]) == (None, None, None, 0)


def test_membership_lists_every_world_formed_and_the_node_s_loss_and_return_in_order():
    got = elastic.membership(SHRINK_AND_GROW, origin=0.0, killed=10.0, returned=70.0)
    assert [(e["t_s"], e["event"], e.get("world")) for e in got] == [
        (0.0, "world formed", 2), (10.0, "node lost", None), (11.0, "world formed", 1), (70.0, "node back", None),
        (75.0, "world formed", 2)]
    assert got[2]["offset"] == 400


def test_throughput_drops_to_zero_where_no_step_came():
    events = [start(0.0, 2, 0, 0), step(1.0, 2, 0, 200), step(1.5, 2, 0, 400), step(9.0, 1, 0, 500)]
    assert elastic.throughput(events, origin=0.0, window_s=2.0) == [
        (1.0, 2, 100.0), (1.5, 2, 200.0), (3.5, 2, 0.0), (9.0, 1, 0.0), (9.0, 1, 50.0)]


def test_the_table_has_a_row_per_mode_with_median_range_and_the_fixed_size_accuracy():
    rows = [{"mode": "torchrun", "finished": True, "stalled_s": s, "continued_world": 1, "regrown_s": 6.0,
             "samples_twice": 900, "accuracy": a} for s, a in ((44.0, 0.97), (47.5, 0.96), (45.1, 0.98))]
    lines = elastic.table(rows, ["torchrun"]).splitlines()
    assert lines[2] == "| torchrun | 3 | 3/3 | 45.1 (44.0–47.5) | 1, 1, 1 | 6.0 (6.0–6.0) | 900 (900–900) |"
    assert elastic.table(rows[:2], ["torchrun"]).splitlines()[2].split(" | ")[3] == "45.8 (44.0–47.5)"
    with_fixed = elastic.table(rows, ["torchrun", "ray-native"], fixed={"torchrun": 0.975},
                               reasons={"ray-native": "no Ray here"}).splitlines()
    assert with_fixed[2].endswith("| 0.9700 (0.9600–0.9800) (0.9750) |")
    assert with_fixed[3] == "| ray-native | 0 | – | no Ray here |"


def test_an_elastic_rank_s_shard_at_any_world_size_is_distributed_sampler_s():
    cfg = TrainConfig(seed=3, batch_size=10)
    data = torch.arange(100)
    for epoch in (0, 1):
        for world in (1, 2, 4):
            samplers = [DistributedSampler(data, num_replicas=world, rank=r, shuffle=True, seed=cfg.seed)
                        for r in range(world)]
            for sampler in samplers:
                sampler.set_epoch(epoch)
            shards = [list(sampler) for sampler in samplers]
            for r in range(world):
                mine = [int(i) for _, _, indices in rank.steps(cfg, epoch, world, r, 100) for i in indices]
                assert mine == shards[r]


def test_the_trials_write_every_run_the_membership_events_and_a_plot(tmp_path):
    fixed = [start(0.0, 2, 0, 0), step(1, 2, 0, 400), step(2, 2, 0, 800), {"ev": "done", "t": 3.0, "accuracy": 0.98}]
    runs = {"torchrun": [elastic_trials.summary("torchrun", 0, {"exit": 0, "killed": None, "returned": None,
                                                                "events": fixed}, 1, 800, 2),
                         elastic_trials.summary("torchrun", 1, {"exit": 0, "killed": 10.0, "returned": 70.0,
                                                                "events": SHRINK_AND_GROW}, 1, 800, 2)],
            "ray-native": [elastic_trials.summary("ray-native", 0, {"exit": 1, "killed": None, "returned": None,
                                                                    "events": fixed[:2]}, 1, 800, 2)]}
    elastic_trials.write(tmp_path, {"max_workers": 2}, runs, {"ray-native": "its fixed-size run did not finish"})
    modes = json.loads((tmp_path / "elastic.json").read_text())["modes"]
    assert [(m["mode"], m["trials"], m["finished"], m.get("reason")) for m in modes] == [
        ("torchrun", 1, 1, None), ("ray-native", 0, 0, "its fixed-size run did not finish")]
    assert (modes[0]["fixed_size"]["accuracy"], modes[0]["runs"][0]["regrown_s"]) == (0.98, 6.0)
    section = json.loads((tmp_path / "results.json").read_text())["elastic"]
    assert [e["event"] for e in section["modes"]["torchrun"][1]["membership"]] == [
        "world formed", "node lost", "world formed", "node back", "world formed"]
    assert (tmp_path / "elastic.png").stat().st_size > 0


@pytest.mark.parametrize("argv, needle", [
    (["--min-workers", "0"], "--min-workers must be >= 1"),
    (["--min-workers", "3", "--max-workers", "2"], "--min-workers 3 is above --max-workers 2"),
    (["--max-workers", "1"], "--max-workers takes 2 to"),
    (["--modes", "ray-native,slurm"], "--modes takes distinct names"),
    (["--trials", "0"], "--trials must be >= 1"),
    (["--epochs", "2"], "--epochs must be > 2"),
    (["--return-after-s", "-1"], "--return-after-s must be > 0"),
    (["--return-after-s", "inf"], "--return-after-s must be > 0 and finite, got inf"),
    (["--synthetic-train-size", "2000"], "--synthetic-train-size must hold more than 10 full steps"),
])
def test_bad_input_is_refused_before_anything_is_created(argv, needle, monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "argv", ["elastic_trials", *argv, "--output-dir", str(tmp_path / "out"),
                                      "--data-dir", str(tmp_path / "data")])
    with pytest.raises(ConfigError, match=re.escape(needle)):
        elastic_trials.main()
    assert list(tmp_path.iterdir()) == []


def test_without_the_simulated_cluster_it_refuses_before_creating_anything(monkeypatch, tmp_path):
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    monkeypatch.setattr(sys, "argv", ["elastic_trials", "--output-dir", str(tmp_path / "out"),
                                      "--data-dir", str(tmp_path / "data")])
    with pytest.raises(ConfigError, match=r"experiments.elastic.trials \(one simulated node per worker\) needs root"):
        elastic_trials.main()
    assert list(tmp_path.iterdir()) == []


def test_a_refusal_on_the_command_line_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "experiments.elastic.trials", "--min-workers", "0", "--output-dir",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", "error: --min-workers must be >= 1 (a run of no "
                                                                  "worker trains nothing), got 0\n")
    assert list(tmp_path.iterdir()) == []

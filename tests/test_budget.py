"""--budget-min bounds the whole comparison, its pilot included, and the time left is estimated from runs measured
(ray_jobs/orchestrator.py, ray_jobs/progress.py): without a cluster, each run replaced by its record."""

from pathlib import Path

from contract.comparison import CompareConfig
from contract.config import TrainConfig
from launchers.arms import Arm
from ray_jobs import orchestrator, progress


def record(arm: Arm, round_: int, n: int, *args) -> dict:
    return {"arm": arm.label, "launcher": arm.launcher, "workers": n, "round": round_, "status": "ok",
            "final": {"test_accuracy": 0.5}, "steady_samples_per_s": 100.0, "end_to_end_s": 1.0}


def test_a_pilot_past_the_budget_stops_at_the_end_of_a_round_and_says_how_many_ran(monkeypatch, tmp_path):
    monkeypatch.setattr(orchestrator, "run_one", record)
    cmp = CompareConfig(repeats=4, target_ci=3, budget_min=1, no_ceiling=True)
    planned = orchestrator.Plan(TrainConfig(), cmp, Path(tmp_path), [], [])
    planned.runs, _ = orchestrator.runs([2], planned.arms, cmp.repeats)
    records, spent = [], {}
    cut = orchestrator._run_all(planned, planned.runs, records, spent, deadline=0.0)  # spent before it began
    assert cut == {"workers": 2, "rounds": 1}  # the first round runs whole: a verdict needs one
    assert [(r["arm"], r["round"]) for r in records if r["launcher"] != "local"] == [("native", 0), ("horovod", 0)]


def test_the_first_time_left_comes_from_a_run_of_the_same_kind_never_a_guess():
    todo = [(0, "reference", 2, True), (0, "native", 2, False), (0, "horovod", 2, False), (1, "horovod", 2, False)]
    shown = progress.Progress(todo, 2)
    shown.took[("reference", 2)] = [1.0]
    assert shown.left(1) == "the time left is known after the first round"  # a reference prices no training run
    shown.took[("native", 2)] = [60.0]
    assert shown.left(2) == "about 2 min 0 s left"  # horovod priced as native ran until it has run itself

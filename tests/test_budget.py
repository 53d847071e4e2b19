"""--budget-min bounds the whole comparison, its pilot included, and the time left is estimated from runs measured
(ray_jobs/orchestrator.py, ray_jobs/progress.py): without a cluster, each run replaced by its record."""

from pathlib import Path

import pytest

from contract.comparison import CompareConfig
from contract.config import TrainConfig
from launchers.arms import Arm
from ray_jobs import orchestrator, progress


def record(arm: Arm, round_: int, n: int, *args) -> dict:
    return {"arm": arm.label, "launcher": arm.launcher, "workers": n, "round": round_, "status": "ok",
            "final": {"test_accuracy": 0.5}, "steady_samples_per_s": 100.0, "end_to_end_s": 1.0}


@pytest.fixture
def ten_second_runs(monkeypatch, tmp_path):
    """A pilot of 4 rounds at 2 workers whose every run takes 10 s of a clock the test reads: (clock, plan)."""
    clock = [0.0]

    def ten_seconds(arm: Arm, round_: int, n: int, *args) -> dict:
        clock[0] += 10.0
        return record(arm, round_, n)

    monkeypatch.setattr(orchestrator, "run_one", ten_seconds)
    monkeypatch.setattr(orchestrator.time, "monotonic", lambda: clock[0])
    cmp = CompareConfig(repeats=4, target_ci=3, budget_min=1, no_ceiling=True)
    planned = orchestrator.Plan(TrainConfig(), cmp, Path(tmp_path), [], [])
    planned.runs, _ = orchestrator.runs([2], planned.arms, cmp.repeats)
    return clock, planned


def test_a_pilot_past_the_budget_stops_at_the_end_of_a_round_and_says_how_many_ran(monkeypatch, tmp_path):
    monkeypatch.setattr(orchestrator, "run_one", record)
    cmp = CompareConfig(repeats=4, target_ci=3, budget_min=1, no_ceiling=True)
    planned = orchestrator.Plan(TrainConfig(), cmp, Path(tmp_path), [], [])
    planned.runs, _ = orchestrator.runs([2], planned.arms, cmp.repeats)
    records, spent = [], {}
    cut = orchestrator._run_all(planned, planned.runs, records, spent, deadline=0.0)  # spent before it began
    assert (cut["workers"], cut["rounds"], cut["left_s"]) == (2, 1, 0.0)  # the first round runs whole: a verdict needs one
    assert [(r["arm"], r["round"]) for r in records if r["launcher"] != "local"] == [("native", 0), ("horovod", 0)]


def test_the_first_time_left_comes_from_a_run_of_the_same_kind_never_a_guess():
    todo = [(0, "reference", 2, True), (0, "native", 2, False), (0, "horovod", 2, False), (1, "horovod", 2, False)]
    shown = progress.Progress(todo, 2)
    shown.took[("reference", 2)] = [1.0]
    assert shown.left(1) == "the time left is known after the first round"  # a reference prices no training run
    shown.took[("native", 2)] = [60.0]
    # horovod priced as native ran until it has run itself
    assert shown.left(2) == "about 2 min 0 s left at the pace so far"


def test_no_round_starts_that_the_rounds_so_far_say_would_end_past_the_budget(ten_second_runs):
    clock, planned = ten_second_runs
    records = []
    # round 1 (the two references and both arms) takes 40 s; a second, its two arms at 10 s each, would end at 60 s,
    # past a deadline at 50 s
    assert orchestrator._run_all(planned, planned.runs, records, {}, deadline=50.0) == {
        "workers": 2, "rounds": 1, "round_s": 20.0, "left_s": 10.0}
    assert clock[0] == 40.0  # the old rule, past the deadline only, started round 2 at 40 s and ran to 60 s


def test_the_time_left_never_passes_the_budget(monkeypatch):
    monkeypatch.setattr(progress.time, "monotonic", lambda: 100.0)
    todo = [(r, arm, 2, False) for r in range(6) for arm in ("native", "horovod")]
    shown = progress.Progress(todo, 6, deadline=100.0 + 9 * 60)
    shown.took = {("native", 2): [120.0], ("horovod", 2): [120.0]}
    assert shown.left(2) == "about 9 min 0 s left: --budget-min starts no round that would end past it"
    unbounded = progress.Progress(todo, 6)
    unbounded.took = shown.took
    assert unbounded.left(2) == "about 20 min 0 s left at the pace so far"


def test_make_compare_s_target_gives_way_to_a_repeats_below_its_pilot_and_to_one_backend_and_says_so(caplog):
    from ray_jobs import compare

    caplog.set_level("INFO")
    parse = compare.parser().parse_args
    made = ["--make-target-ci", "3", "--budget-min", "9"]
    assert compare.make_defaults(parse(made), []).target_ci == 3
    fixed = compare.make_defaults(parse([*made, "--model", "convnet", "--repeats", "2"]), ["--model", "convnet",
                                                                                           "--repeats", "2"])
    assert fixed.target_ci == 0 and "--repeats 2: a fixed 2 round(s), without make compare's --target-ci 3" in \
        caplog.text
    assert compare.make_defaults(parse([*made, "--backends", "native"]), ["--backends", "native"]).target_ci == 0
    own = ["--target-ci", "5", "--repeats", "2"]  # their own target: CompareConfig refuses the short pilot
    assert compare.make_defaults(parse([*made, *own]), own).target_ci == 5


def test_a_resume_s_kept_rounds_do_not_price_the_rounds_it_runs(ten_second_runs):
    clock, planned = ten_second_runs
    # rounds 1 and 2 finished before a stop: kept in no time, they must not make a round look free
    planned.finished = {orchestrator.run_name(arm, r, 2): record(arm, r, 2) for r, arm, _ in planned.runs if r < 2}
    records = []
    assert orchestrator._run_all(planned, planned.runs, records, {}, deadline=25.0) == {
        "workers": 2, "rounds": 3, "round_s": 20.0, "left_s": 5.0}
    assert clock[0] == 20.0  # round 3 ran (20 s); round 4 would have ended at 40 s


def test_a_cut_pilot_s_verdict_says_what_stopped_it_and_what_helps_and_the_command_exits_3(ten_second_runs):
    from ray_jobs import compare

    clock, planned = ten_second_runs
    planned.pilot_cut = orchestrator._run_all(planned, planned.runs, [], {}, deadline=50.0)
    assert orchestrator.cut_advice(planned) == (
        "--budget-min 1 stopped the pilot after 1 of 4 rounds, a round taking 20 s on this machine; run it on a "
        "quieter machine or with a larger --budget-min")
    unanswered = {"settings": {"repeats": 4, "backends": ["native", "horovod"], "workers": [2]}, "runs": [],
                  "parity": {}, "speed": {"2": {"ci95": None}}}
    assert compare.outcome([unanswered], assert_parity=False) == compare.NO_VERDICT == 3
    one_asked = {**unanswered, "settings": {**unanswered["settings"], "repeats": 1}}
    assert compare.outcome([one_asked], assert_parity=False) == 0  # --repeats 1 asked for no interval


def test_the_ceiling_runs_in_the_first_rounds_only_and_a_round_after_them_is_priced_without_it(monkeypatch,
                                                                                              tmp_path):
    clock = [0.0]

    def ten_seconds(arm: Arm, round_: int, n: int, *args) -> dict:
        clock[0] += 10.0
        return record(arm, round_, n)

    monkeypatch.setattr(orchestrator, "run_one", ten_seconds)
    monkeypatch.setattr(orchestrator.time, "monotonic", lambda: clock[0])
    cmp = CompareConfig(repeats=5, target_ci=3, budget_min=1)
    planned = orchestrator.Plan(TrainConfig(), cmp, Path(tmp_path), [], [])
    planned.runs, _ = orchestrator.runs([2], planned.arms, cmp.repeats)
    assert sorted(r for r, arm, _ in planned.runs if arm.ceiling) == list(range(orchestrator.CEILING_ROUNDS))
    assert sorted(r for r, arm, _ in planned.runs if arm.label == "horovod") == list(range(5))
    # two references (20 s), three rounds of three arms (90 s): the fourth round, two arms, is priced at 20 s and
    # ends at 130 s; a fifth would end at 150 s
    assert orchestrator._run_all(planned, planned.runs, [], {}, deadline=135.0) == {
        "workers": 2, "rounds": 4, "round_s": 20.0, "left_s": 5.0}

"""make gpu-check (ray_jobs/gpu_check.py) without a GPU: its plan, and its arms, grid, report and table with CPU runs
in place of GPU ones (its refusals: tests/test_bad_input.py)."""

import dataclasses
import json
from pathlib import Path

import pytest

from analysis import report, terminal
from contract.config import ConfigError
from ray_jobs import compare, gpu_check, orchestrator
from tests.helpers import data_flags


def test_the_check_compares_three_models_in_three_precisions_on_every_gpu_under_their_own_launchers():
    cmp, base, settings = compare.configs(compare.parser().parse_args(gpu_check.arguments(2, ["--repeats", "3"])))
    assert [(s["model"], s["amp"]) for s in settings] == [
        (model, amp) for model in ("convnet", "resnet50", "vit_b_16") for amp in ("none", "fp16", "bf16")]
    assert cmp.launcher_names == ("torchrun", "horovodrun") and cmp.worker_counts == (2,) and cmp.repeats == 3
    assert base.use_gpu and base.epochs == 1 and base.dataset == "synthetic"  # no download on an offline machine


def test_the_default_check_on_one_gpu_is_estimated_within_its_7_minute_budget_the_build_included(caplog):
    cmp, _, settings = compare.configs(compare.parser().parse_args(gpu_check.arguments(1, [])))
    seconds = gpu_check.estimate_s(settings, cmp)
    # the build, then 9 settings of a reference and one run under each of torchrun and horovodrun
    assert seconds == pytest.approx(gpu_check.ESTIMATE_S["build"] + 9 * sum(
        gpu_check.ESTIMATE_S[name] for name in ("local", "torchrun", "horovodrun")))
    assert seconds <= 7 * 60 and cmp.budget_min == 7
    planned = gpu_check.plan_text(settings, cmp, 1, seconds)
    assert planned.startswith("9 setting(s) × 1 worker(s) on 1 GPU(s), 1 round(s) of native/torchrun, "
                              "horovod/horovodrun: 27 runs; about 5 min 39 s with the build")


def test_cpu_stand_ins_run_the_plan_but_fp16_which_needs_a_gpu():
    argv = gpu_check.on_cpus(gpu_check.arguments(1, [], use_gpu=False))
    _, base, settings = compare.configs(compare.parser().parse_args(argv))
    assert [s["amp"] for s in settings] == ["none", "bf16"] * 3 and not base.use_gpu


def test_one_rank_each_is_said_as_such_in_the_check_table_not_as_a_library_that_averaged():
    run = {"arm": "native/torchrun", "status": "ok", "workers": 1, "round": 0, "averaged_by": "NCCL",
           "steady_samples_per_s": 100.0}
    comparison = {"settings": {"launchers": ["torchrun", "horovodrun"]}, "speed": {}, "parity": {}, "runs": [
        run, {**run, "arm": "horovod/horovodrun"}]}
    grid = {"settings": [{"folder": "amp-none", "amp": "none"}], "varied": ["amp"], "workers": [1],
            "budget_cut": ["amp-bf16"]}
    table = terminal.check_table(grid, {"amp-none": comparison}, Path("g"))
    assert "| amp none | 1 | 100.0 | 100.0 | — | not judged | one rank each: nothing | — / — |" in table
    assert "NCCL" not in "\n".join(table) and "not run (--budget-min spent): amp-bf16" in table
    assert any("no gradient averaging was measured" in line for line in table)


@pytest.mark.cluster
def test_with_cpus_in_place_of_gpus_it_writes_a_grid_that_renders_and_prints_one_table(base_cfg, tmp_path, caplog):
    caplog.set_level("INFO")
    argv = gpu_check.arguments(1, ["--models", "convnet", "--amp", "none,bf16", "--repeats", "1",
                                   "--max-steps-per-epoch", "12", "--output-dir", str(tmp_path), *data_flags(base_cfg)],
                               use_gpu=False)
    assert gpu_check.measure(argv) == 0
    grid_dir = next(tmp_path.iterdir())
    grid = json.loads((grid_dir / "grid.json").read_text())
    assert [s["folder"] for s in grid["settings"]] == ["amp-none", "amp-bf16"]
    for folder in ("amp-none", "amp-bf16"):
        comparison = json.loads((grid_dir / folder / "comparison.json").read_text())
        assert {r["arm"]: r["averaged_by"] for r in comparison["runs"] if r["status"] == "ok"} == {
            "reference": None, "native/torchrun": "Gloo", "horovod/horovodrun": "Gloo"}
        assert comparison["parity"]["1"]["verdict"] == "PASS"
        markdown = (grid_dir / folder / "report.md").read_text()
        assert report.ONE_RANK_NOTE in markdown and "Gradients averaged by horovod/horovodrun: Gloo" in markdown
        # horovodrun -np 1 started the rank: it must not say it was not
        said = (grid_dir / folder / "horovod-horovodrun-1w-r0" / "launcher.log").read_text()
        assert "horovod via horovodrun: 1 worker(s)" in said and "not started by horovodrun" not in said
    assert report.ONE_RANK_NOTE in (grid_dir / "report.md").read_text()
    table = [line for line in caplog.text.splitlines() if line.startswith("| amp ")]
    assert [line.split(" | ")[0] for line in table] == ["| amp none", "| amp bf16"] and all("PASS" in t for t in table)
    before = (grid_dir / "report.md").read_text()
    compare.render(grid_dir)  # --render of the folder: the same report again, from the JSON alone
    assert (grid_dir / "report.md").read_text() == before


def test_the_estimate_prices_every_arm_a_comparison_runs():
    cmp, _, settings = compare.configs(compare.parser().parse_args(gpu_check.arguments(
        1, ["--launchers", "mp.spawn,horovodrun", "--aa", "--models", "convnet", "--amp", "none"])))
    cmp = dataclasses.replace(cmp, no_ceiling=False)
    labels = [arm.label for arm in orchestrator.planned_arms(cmp)]
    assert labels == ["native/mp.spawn", "horovod/horovodrun", "native/mp.spawn-aa", "horovod/horovodrun-aa",
                      "ceiling/mp.spawn", "ceiling/horovodrun"]
    assert gpu_check.estimate_s(settings, cmp) == pytest.approx(
        gpu_check.ESTIMATE_S["build"] + gpu_check.ESTIMATE_S["local"] + 3 * (
            gpu_check.ESTIMATE_S["mp.spawn"] + gpu_check.ESTIMATE_S["horovodrun"]))


def plan_with_budget(budget: str):
    cmp, _, settings = compare.configs(compare.parser().parse_args(gpu_check.arguments(1, ["--budget-min", budget])))
    return settings, cmp, gpu_check.estimate_s(settings, cmp)


def test_a_plan_past_its_budget_says_what_fits():
    settings, cmp, seconds = plan_with_budget("3")
    assert gpu_check.plan_text(settings, cmp, 1, seconds).endswith(
        "about 5 min 39 s with the build (ray_jobs/gpu_check.py's ESTIMATE_S, assumed per run), more than "
        "--budget-min 3: about 1 of 9 setting(s) fit, and no setting starts once the time so far says it cannot finish")


def test_a_budget_below_the_build_and_one_setting_is_refused_before_anything_is_built():
    settings, cmp, seconds = plan_with_budget("0.1")
    with pytest.raises(ConfigError) as refused:
        gpu_check.plan_text(settings, cmp, 1, seconds)
    assert str(refused.value) == ("--budget-min 0.1 is less than the build and one setting take (about 2 min 51 s by "
                                  "ESTIMATE_S); pass --budget-min 3 or more (6 for the whole plan)")

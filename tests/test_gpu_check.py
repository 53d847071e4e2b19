"""make gpu-check (ray_jobs/gpu_check.py) without a GPU: its plan, and its arms, grid, report and table with CPU runs
in place of GPU ones (its refusals: tests/test_bad_input.py)."""

import json

import pytest

from analysis import report
from ray_jobs import compare, gpu_check
from tests.helpers import data_flags


def test_the_check_compares_four_models_in_three_precisions_on_every_gpu_under_their_own_launchers():
    cmp, base, settings = compare.configs(compare.parser().parse_args(gpu_check.arguments(2, ["--repeats", "3"])))
    assert [(s["model"], s["amp"]) for s in settings] == [
        (model, amp) for model in ("convnet", "resnet18", "resnet50", "vit_b_16") for amp in ("none", "fp16", "bf16")]
    assert cmp.launcher_names == ("torchrun", "horovodrun") and cmp.worker_counts == (2,) and cmp.repeats == 3
    assert base.use_gpu and base.epochs == 1


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
    table = [line for line in caplog.text.splitlines() if line.startswith("| amp ")]
    assert [line.split(" | ")[0] for line in table] == ["| amp none", "| amp bf16"] and all("PASS" in t for t in table)
    before = (grid_dir / "report.md").read_text()
    compare.render(grid_dir)  # --render of the folder: the same report again, from the JSON alone
    assert (grid_dir / "report.md").read_text() == before

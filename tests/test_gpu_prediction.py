"""The GPU clusters' prediction (experiments/gpu_model/predict_gpus.py) and the replay's check (experiments/gpu_model/schedule_check.py),
on inputs made by hand: what moves the waits, the range, the bar, and the report rendered from its JSON alone."""

import json
import re
import shutil
import sys

import pytest

from experiments.gpu_model import predict_gpus, schedule_check
from runtime import cli
from tests.helpers import REPO

# A backward of 4 gradients of 25 MB ready evenly through it, the last at its end; a step 20/70/10 % forward,
# backward and optimizer.
SHAPE = {"model": "resnet50", "shares": {3: 0.25, 2: 0.5, 1: 0.75, 0: 1.0}, "bytes": [25_000_000] * 4,
         "split": [0.2, 0.7, 0.1], "from": "by hand"}


def test_one_gpu_averages_nothing_and_a_slower_link_exposes_more_of_the_last_bucket():
    shaped = {**SHAPE, "model": "vit_b_16"}  # its published step is below the host-bound criterion: it has a scaling
    alone = predict_gpus.predict(shaped, 1, 100)
    assert alone["native_wait_ms"] == 0 and alone["ratio"] == pytest.approx(1.0, abs=0.01)
    slow, fast = predict_gpus.predict(shaped, 16, 100), predict_gpus.predict(shaped, 16, 400)
    assert slow["native_wait_ms"] > fast["native_wait_ms"] > 0 and slow["rate_gbit"] == 100
    assert slow["range"][0] <= slow["ratio"] <= slow["range"][1]
    assert slow["native_per_gpu_range"][0] <= slow["native_per_gpu"] <= slow["native_per_gpu_range"][1]
    assert slow["native_scaling_range"][0] <= slow["native_scaling"] <= slow["native_scaling_range"][1]
    assert slow["beyond_checked"] and not alone["beyond_checked"] and slow["host_bound"] is None
    bound = predict_gpus.predict(SHAPE, 16, 100)  # resnet50's published A100 step, past the criterion
    assert bound["host_bound"] and bound["native_scaling"] is None and bound["range"][0] <= bound["ratio"]
    # 25 MB (23.8 MiB) each: the first alone (its 1 MiB limit), then two to pass 25 MiB, then the last
    assert slow["buckets"] == 3 and slow["horovod_cycles"] >= 1


def test_the_report_and_its_picture_are_made_again_from_the_json_alone(tmp_path):
    rows = [predict_gpus.predict(SHAPE, gpus, 100) for gpus in (1, 8, 16)]
    doc = {"schema_version": 1, "command": "python -m experiments.gpu_model.predict_gpus by-hand --output out", "rows": rows,
           "assumed": {"steps": {"resnet50": predict_gpus.STEPS["resnet50"]}, "links": predict_gpus.LINKS},
           "validation": "The replay matched 1 of 2", "measured_shapes_from": {"resnet50": "by hand"},
           "published": predict_gpus.PUBLISHED, "parameters": {}, "published_check": "by hand, 1 of 2 rows",
           "constants": {"overlap_cost": 0.3, "step_end_scale": 3.0}}
    (tmp_path / predict_gpus.FILE).write_text(json.dumps(doc))
    first = predict_gpus.render(tmp_path)
    picture = (tmp_path / "gpu-prediction.png").read_bytes()
    assert predict_gpus.render(tmp_path) == first and picture.startswith(b"\x89PNG")
    assert "| resnet50 | 16 | 100 Gbit/s | no: 16 GPUs" in first and "none: host-bound" in first
    assert "(assumed)" in first and "The replay matched 1 of 2" in first
    assert "by hand, 1 of 2 rows" in first and "`step_end_scale` 3.000" in first
    assert predict_gpus.render(tmp_path / "nowhere") is None


@pytest.mark.parametrize("predicted, measured, interval, unit, precise, passed", [
    (10.5, 10.0, (9.5, 10.5), "ms", True, True),  # within 10 %, measured to ±5 %
    (12.0, 10.0, (9.5, 10.5), "ms", True, False),
    (12.0, 10.0, (8.0, 13.0), "ms", False, False),  # inside a wide interval: not judged, never a match
    (0.9, 0.2, (-0.6, 1.0), "ms", True, True),  # near 0: within the 1 ms floor, measured to ±0.8 ms
    (1.5, 0.2, (-0.6, 1.0), "ms", True, False),
    (0.9, 0.2, None, "ms", False, False),  # one run: no interval, not judged
    (3.4, 3.0, (3.0, 3.0), "count", True, False),  # a count has no floor
])
def test_a_point_is_judged_only_where_measured_precisely_and_matches_within_10_percent_or_1_ms(
        predicted, measured, interval, unit, precise, passed):
    point = schedule_check.Point("s", "a", "w", measured, interval, predicted, None, predicted, 3, unit)
    assert point.precise is precise and point.matches(predicted) is passed


def test_the_pages_say_the_check_s_counts_and_the_prediction_s_span():
    headline = (REPO / "docs" / "results" / "schedule-check.md").read_text().splitlines()[2]
    alone, judged = re.search(r"matched (\d+) of (\d+) precisely measured waits", headline).groups()
    in_step = re.search(r"and (\d+) of \d+ under the link", headline)[1]
    old = re.search(r"nothing hidden\), (\d+) of", headline)[1]
    total = re.search(r"of the (\d+) waits", headline)[1]
    cluster = " ".join((REPO / "docs" / "cluster.md").read_text().split())
    assert (f"Of the {total} waits (each backend's, and native − Horovod's) only {judged} were: the replay matched "
            f"{alone} of {judged} with the link of the averaging alone, {in_step} of {judged} with the link") in cluster
    assert f"and the simplest rival (the averaging alone) {old} of {judged}" in cluster
    findings = " ".join((REPO / "docs" / "findings.md").read_text().split())
    assert f"{judged} of {total} were measured precisely enough" in findings
    rows = json.loads((REPO / "docs" / "results" / "gpu-prediction" / predict_gpus.FILE).read_text())["rows"]
    ratios = [r["ratio"] for r in rows if r["gpus"] >= 8]
    assert f"native ÷ Horovod {min(ratios):.3f}-{max(ratios):.3f}" in findings


def test_the_committed_check_and_prediction_are_made_again_byte_for_byte(tmp_path, monkeypatch):
    import sys

    from runtime import cli
    from tests.helpers import REPO

    committed = (REPO / "docs" / "results" / "schedule-check.md").read_text()
    command = committed.split("`python -m experiments.gpu_model.schedule_check ", 1)[1].split("`", 1)[0].split()
    monkeypatch.chdir(REPO)
    assert schedule_check.check(command) == committed
    prediction = REPO / "docs" / "results" / "gpu-prediction"
    monkeypatch.setattr(sys, "argv", ["predict_gpus", "docs/results/schedule-models", "--validation",
                                      "docs/results/schedule-check.md", "--output", str(tmp_path)])
    with pytest.raises(SystemExit) as done:
        cli.run(predict_gpus.main)
    assert done.value.code == 0
    made = json.loads((tmp_path / predict_gpus.FILE).read_text())
    assert made["rows"] == json.loads((prediction / predict_gpus.FILE).read_text())["rows"]
    assert (tmp_path / "gpu-prediction.md").read_text().split("\n", 3)[3] == \
        (prediction / "gpu-prediction.md").read_text().split("\n", 3)[3]  # all but the command, which names --output


def _damaged(tmp_path, damage):
    folder = tmp_path / "model-convnet"
    shutil.copytree(REPO / "docs" / "results" / "schedule-models" / "model-convnet", folder)
    path = folder / "native-torchrun-2w-r1" / "results.json"
    if damage == "another model":
        shutil.copy(REPO / "docs" / "results" / "schedule-models" / "model-resnet18" / "native-torchrun-2w-r1" /
                    "results.json", path)
    elif damage == "cut mid-file":
        path.write_text(path.read_text()[:5000])
    elif damage == "run folder absent":
        shutil.rmtree(path.parent)
    elif damage != "given twice":
        doc = json.loads(path.read_text())
        if damage == "schedule cut short":
            doc["schedule"]["gradient_bytes"] = doc["schedule"]["gradient_bytes"][:2]
        elif damage == "NaN in ready_s":
            doc["schedule"]["ready_s"]["0"] = float("nan")
        else:
            doc["schedule"]["wait_s"] = float("nan")
        path.write_text(json.dumps(doc))
    return folder


@pytest.mark.parametrize("damage, says", [
    ("another model", "is a run of resnet18 under native, in a comparison of convnet"),
    ("cut mid-file", "cannot be read as a run's results"),
    ("run folder absent", "without that run's folder"),
    ("schedule cut short", "schedule is cut short or holds a number that is not finite"),
    ("NaN in ready_s", "schedule is cut short or holds a number that is not finite"),
    ("NaN in wait_s", "schedule is cut short or holds a number that is not finite"),
    ("given twice", "is given twice"),
])
def test_a_damaged_or_doubled_folder_is_refused_in_one_line(damage, says, tmp_path, monkeypatch, capsys):
    folder = _damaged(tmp_path, damage)
    argv = [str(folder), str(tmp_path)] if damage == "given twice" else [str(folder)]
    monkeypatch.setattr(sys, "argv", ["schedule_check", *argv])
    with pytest.raises(SystemExit) as done:
        cli.run(schedule_check.main)
    err = capsys.readouterr().err
    assert done.value.code == 2 and len(err.strip().splitlines()) == 1 and says in err, err

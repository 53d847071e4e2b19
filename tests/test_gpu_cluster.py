"""A team's own cluster predicted (experiments/gpu_model/gpu_cluster.py, `predict_gpus --cluster`) and the prediction checked
against published GPU runs (experiments/gpu_model/published_check.py): the refusals, the figures' directions, the fit that
sees the calibration rows alone, and the committed check made again."""

import importlib.util
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
from dataclasses import replace

import pytest

from experiments.gpu_model import gpu_cluster, predict_gpus, published_check
from runtime import cli
from tests.helpers import REPO, tree

CLUSTER = {"model": "resnet50", "image_size": 224, "batch_per_gpu": 64, "precision": "tf32",
           "one_gpu_images_per_s": 800, "gpus_per_node": 8, "nodes": 4, "intra_node_busbw_gbyte_s": 300,
           "inter_node_gbit_s": 200}
"""Below the host-bound criterion (check.json's, 938 img/s), so that it gets a scaling; 32 GPUs, past any row's."""
PUBLISHED = REPO / "docs" / "results" / "published-gpu"


def predict(**changed):
    cluster = replace(gpu_cluster.Cluster(**CLUSTER), **changed)
    shape = predict_gpus.shape(predict_gpus.SHAPES, cluster.model)
    return gpu_cluster.predict(cluster, shape, gpu_cluster.checked().fits, gpu_cluster.host())


def run(argv, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["predict_gpus", *argv])
    with pytest.raises(SystemExit) as done:
        cli.run(predict_gpus.main)
    return done.value.code, capsys.readouterr().err


@pytest.mark.parametrize("change, says", [
    ({"nodes": None}, "missing nodes"),
    ({"gpus": 8}, "unknown gpus"),
    ({"nodes": 0}, "nodes must be a positive finite number, not 0"),
    ({"gpus_per_node": 0.5}, "gpus_per_node must be a whole number"),
    ({"one_gpu_images_per_s": -3}, "one_gpu_images_per_s must be a positive finite number"),
    ({"inter_node_gbit_s": math.nan}, "inter_node_gbit_s must be a positive finite number, not nan"),
    ({"intra_node_busbw_gbyte_s": math.inf}, "intra_node_busbw_gbyte_s must be a positive finite number"),
    ({"batch_per_gpu": "32"}, "batch_per_gpu must be a positive finite number, not 32"),
    ({"model": "resnet152"}, "model 'resnet152' is not one of"),
    ({"precision": "fp8"}, "precision 'fp8' is not one of fp32, tf32, amp, bf16"),
    ({"model": "mlp"}, "no backward of mlp is recorded in"),
    ({"nodes": 1e308}, "nodes 1e+308 is beyond any cluster's"),
    ({"nodes": 10 ** 400}, f"nodes must be a positive finite number, not {10 ** 400}"),
    ({"one_gpu_images_per_s_low": 900}, "one_gpu_images_per_s 800 is outside its own one_gpu_images_per_s_low"),
    ({"one_gpu_images_per_s_high": -1}, "one_gpu_images_per_s_high must be a positive finite number, not -1"),
    (None, "cannot be read as JSON"),
])
def test_a_bad_cluster_file_is_one_line_and_exit_2_and_writes_nothing(change, says, tmp_path, monkeypatch, capsys):
    doc = dict(CLUSTER)
    for key, value in (change or {}).items():
        if value is None:
            del doc[key]
        else:
            doc[key] = value
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(doc) if change else "{not json")
    _refused(path, says, tmp_path, monkeypatch, capsys)


@pytest.mark.parametrize("text, says", [
    (json.dumps(CLUSTER)[:-1] + ', "nodes": 2}', "nodes is given twice; keep one"),
    (json.dumps(CLUSTER).replace('"nodes": 4', '"nodes": 1e400'), "nodes must be a positive finite number, not 1e400"),
])
def test_a_key_given_twice_is_refused_and_a_number_is_quoted_as_written(text, says, tmp_path, monkeypatch, capsys):
    path = tmp_path / "cluster.json"
    path.write_text(text)
    _refused(path, says, tmp_path, monkeypatch, capsys)


def _refused(path, says, tmp_path, monkeypatch, capsys):
    before = tree(tmp_path)
    code, err = run(["--cluster", str(path), "--output", str(tmp_path / "out")], monkeypatch, capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and says in lines[0], err
    assert tree(tmp_path) == before


def test_an_output_that_is_a_file_or_a_missing_cluster_file_is_refused(tmp_path, monkeypatch, capsys):
    (tmp_path / "cluster.json").write_text(json.dumps(CLUSTER))
    (tmp_path / "taken").write_text("")
    code, err = run(["--cluster", str(tmp_path / "cluster.json"), "--output", str(tmp_path / "taken")],
                    monkeypatch, capsys)
    assert code == 2 and "--output" in err and "is a file" in err
    code, err = run(["--cluster", str(tmp_path / "nowhere.json"), "--output", str(tmp_path / "out")],
                    monkeypatch, capsys)
    assert code == 2 and "does not exist" in err and not (tmp_path / "out").exists()
    monkeypatch.chdir(tmp_path)
    code, err = run(["--cluster", "cluster.json", "--output", ""], monkeypatch, capsys)
    assert code == 2 and "is empty: name a folder" in err and sorted(tree(tmp_path)) == ["cluster.json", "taken"]


def test_a_cluster_file_gives_each_backend_its_rate_and_scaling_and_the_ratio_with_its_range(tmp_path, monkeypatch,
                                                                                           capsys):
    (tmp_path / "cluster.json").write_text(json.dumps(CLUSTER))
    code, err = run(["--cluster", str(tmp_path / "cluster.json"), "--output", str(tmp_path / "out")],
                    monkeypatch, capsys)
    assert code == 0, err
    made = json.loads((tmp_path / "out" / "prediction.json").read_text())
    for backend in ("native", "horovod"):
        rate = made[backend]["images_per_s_per_gpu"]
        assert made[backend]["scaling_efficiency"] == pytest.approx(rate / CLUSTER["one_gpu_images_per_s"])
        low, high = made[backend]["scaling_range"]
        assert 0 < low <= made[backend]["scaling_efficiency"] <= high <= 1
    ratio = made["native_over_horovod"]
    assert ratio["low"] <= ratio["value"] <= ratio["high"]
    assert ratio["value"] == pytest.approx(made["native"]["images_per_s_per_gpu"]
                                           / made["horovod"]["images_per_s_per_gpu"])
    assert made["deciding"] and made["cluster"] == CLUSTER and made["host_bound"] is None
    assert made["beyond_checked"] == ["32 GPUs (the published rows and measurements: at most 8)",
                                      "4 nodes (the published rows and measurements: at most 2)"]
    page = (tmp_path / "out" / "prediction.md").read_text()
    assert f"native ÷ Horovod: {ratio['value']:.3f}" in page and "docs/results/published-gpu/check.md" in page
    assert "**Beyond what was checked**: 32 GPUs" in page


def test_the_ranges_span_every_fit_each_cluster_left_out_and_the_links_at_their_bounds():
    checked = gpu_cluster.checked()
    fits = {(f.on, f.bandwidth, f.latency) for f in checked.fits}
    assert {on for on, _, _ in fits} == {"mahti", "puhti"}
    assert {(b, l) for _, b, l in fits} == {(b, l) for b in gpu_cluster.LINK_RANGE for l in gpu_cluster.LATENCY_RANGE}
    made = predict()
    for fit in checked.fits:  # each fit alone, at the host's mean step end, lies within the range
        alone = predict_one(fit)
        for backend in ("native", "horovod"):
            low, high = made[backend]["scaling_range"]
            assert low <= alone[backend]["scaling_efficiency"] <= high
        assert made["native_over_horovod"]["low"] <= alone["native_over_horovod"]["value"] <= \
            made["native_over_horovod"]["high"]
    # the one-GPU figure is varied only as far as the file says: a range given widens the scaling's
    wider = predict(one_gpu_images_per_s_low=600, one_gpu_images_per_s_high=900)
    assert wider["native"]["scaling_range"][0] <= made["native"]["scaling_range"][0]


def predict_one(fit):
    cluster = gpu_cluster.Cluster(**CLUSTER)
    return gpu_cluster.predict(cluster, predict_gpus.shape(predict_gpus.SHAPES, cluster.model), (fit,),
                               gpu_cluster.host())


@pytest.mark.parametrize("change, bound, beyond", [
    ({"one_gpu_images_per_s": 2500, "precision": "amp"}, True, ["32 GPUs", "4 nodes"]),
    ({"gpus_per_node": 10 ** 9, "nodes": 1}, False, ["1,000,000,000 GPUs (", "1,000,000,000 GPUs a node"]),
    ({"nodes": 128}, False, ["1,024 GPUs", "128 nodes"]),
    ({"gpus_per_node": 4, "nodes": 2}, False, []),
])
def test_a_host_bound_or_larger_cluster_gets_no_scaling_or_is_flagged(change, bound, beyond):
    cluster = gpu_cluster.Cluster(**{**CLUSTER, **change})
    made = gpu_cluster.limits(cluster, predict(**change), gpu_cluster.checked())
    assert (made["host_bound"] is not None) is bound
    assert ("scaling_efficiency" in made["native"]) is not bound and "native_over_horovod" in made
    assert [said[:len(start)] for said, start in zip(made["beyond_checked"], beyond)] == beyond


def test_one_gpu_is_its_own_figure_and_the_causes_move_the_way_docs_cluster_md_says():
    alone = predict(nodes=1, gpus_per_node=1)
    assert alone["native"]["scaling_efficiency"] == pytest.approx(1.0)
    assert alone["native_over_horovod"]["value"] == pytest.approx(1.0)
    base = predict()
    # a GPU twice as fast: Horovod's step end, host time, weighs twice as much of a step half as long
    faster = predict(one_gpu_images_per_s=2 * CLUSTER["one_gpu_images_per_s"])
    assert faster["native_over_horovod"]["value"] > base["native_over_horovod"]["value"] > 1
    # where DDP's wait decides (a short step on many nodes over a slow link), a faster GPU lowers it instead
    wide = {"model": "vit_b_16", "batch_per_gpu": 32, "precision": "bf16", "one_gpu_images_per_s": 900, "nodes": 16,
            "inter_node_gbit_s": 100}
    waits, quicker = predict(**wide), predict(**{**wide, "one_gpu_images_per_s": 1800})
    assert waits["deciding"].startswith("the averaging's wait after backward")
    assert quicker["native_over_horovod"]["value"] < waits["native_over_horovod"]["value"] < 1
    assert f"puts Horovod ahead, {waits['native_over_horovod']['value']:.2f}" in " ".join(
        (REPO / "docs" / "cluster.md").read_text().split())
    # a link a quarter as fast: both backends scale worse, the averaging beside backward costing each more
    slower = predict(inter_node_gbit_s=CLUSTER["inter_node_gbit_s"] / 4)
    for backend in ("native", "horovod"):
        assert slower[backend]["scaling_efficiency"] < base[backend]["scaling_efficiency"]


def test_the_fit_sees_the_calibration_rows_alone(tmp_path):
    folder = tmp_path / "published"
    shutil.copytree(PUBLISHED, folder)
    rows = (folder / "rows.csv").read_text().splitlines()
    # lower every validation row's Horovod figure by a tenth (the last columns: DDP's, Horovod's, the part): the
    # calibration fit stays, the validation errors move
    cells = [line.rsplit(",", 3) for line in rows[1:]]
    edited = [rows[0]] + [(f"{c[0]},{c[1]},{float(c[2]) * 0.9:.2f},{c[3]}" if c[3] == "validation" and c[2] else line)
                          for line, c in zip(rows[1:], cells)]
    (folder / "rows.csv").write_text("\n".join(edited) + "\n")
    ours, theirs = published_check.check(folder), json.loads((PUBLISHED / "check.json").read_text())
    assert ours["fitted"] == theirs["fitted"] and ours["fits"][0] == theirs["fits"][0]
    assert ours["validation"]["worst"]["ratio_error"] > theirs["validation"]["worst"]["ratio_error"]


@pytest.mark.parametrize("damage, says", [
    ("split names a cluster no row has", "split.json names nowhere, which no row of rows.csv has"),
    ("a row lacks a field", "row mahti-2022-05-18 has no one_gpu_images_per_s: fill it in"),
])
def test_a_damaged_folder_of_published_rows_is_one_line_and_exit_2(damage, says, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "published"
    shutil.copytree(PUBLISHED, folder)
    if damage.startswith("split"):
        split = json.loads((folder / "split.json").read_text())
        (folder / "split.json").write_text(json.dumps({**split, "validation": [*split["validation"], "nowhere"]}))
    else:
        rows = (folder / "rows.csv").read_text().replace(",758.90,", ",,")
        (folder / "rows.csv").write_text(rows)
    before = tree(folder)
    monkeypatch.setattr(sys, "argv", ["published_check", str(folder)])
    with pytest.raises(SystemExit) as done:
        cli.run(published_check.main)
    err = capsys.readouterr().err
    assert done.value.code == 2 and len(err.strip().splitlines()) == 1 and says in err, err
    assert tree(folder) == before


def test_with_the_split_swapped_the_prose_names_the_day_the_cause_and_the_direction_from_that_fit(tmp_path):
    """Fitted on puhti, checked on mahti: the validation GPUs are now the faster ones, and the words follow."""
    folder = tmp_path / "published"
    shutil.copytree(PUBLISHED, folder)
    split = json.loads((folder / "split.json").read_text())
    swapped = {"calibration": ["puhti"], "validation": ["mahti", *split["validation"][1:]]}
    (folder / "split.json").write_text(json.dumps({**split, **swapped}))
    rows = (folder / "rows.csv").read_text().splitlines()
    (folder / "rows.csv").write_text("\n".join([rows[0]] + [
        line.replace(",calibration", ",validation") if line.startswith("mahti") else
        line.replace(",validation", ",calibration") if line.startswith("puhti") else line for line in rows[1:]]) + "\n")
    doc = published_check.check(folder)
    said = " ".join(published_check.markdown(doc).split())
    assert doc["fits"][0]["on"] == "puhti"
    assert "Their one-GPU step is shorter than the calibration rows'" in said
    assert "weighs more on a shorter step" in said
    mahti = [r for r in doc["rows"] if r["cluster"] == "mahti"]
    worst = max(mahti, key=lambda r: abs(r["ratio_error"]))
    slowest = all(worst["published"][k] == min(r["published"][k] for r in mahti)
                  for k in ("ddp_scaling", "horovod_scaling"))
    assert f"The largest ratio error is {worst['id']}" in said
    assert ("%), the day that cluster's two backends both ran slowest" in said) is slowest
    assert ("%), not the day that cluster's two backends both ran slowest" in said) is not slowest


def test_the_committed_check_is_made_again_from_the_committed_rows(monkeypatch):
    monkeypatch.chdir(REPO)
    committed = json.loads((PUBLISHED / "check.json").read_text())
    monkeypatch.setattr(sys, "argv", ["published_check", "docs/results/published-gpu"])
    made = published_check.check(PUBLISHED)
    assert made["fitted"] == committed["fitted"] and made["rows"] == committed["rows"]
    assert published_check.markdown(committed) == (PUBLISHED / "check.md").read_text()
    calibration = {r["id"] for r in committed["rows"] if r["part"] == "calibration"}
    assert calibration == {r["id"] for r in committed["rows"] if r["id"].startswith("mahti")}


def _host_costs():
    """tools/host_costs.py, a tool rather than a package, loaded from its file."""
    spec = importlib.util.spec_from_file_location("host_costs", REPO / "tools" / "host_costs.py")
    host_costs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(host_costs)
    return host_costs


def test_the_committed_host_costs_page_is_its_json_and_docs_cluster_md_says_its_figures():
    host_costs = _host_costs()
    doc = json.loads((REPO / "docs" / "results" / "host-costs" / host_costs.FILE).read_text())
    assert host_costs.markdown(doc) == (REPO / "docs" / "results" / "host-costs" / "host-costs.md").read_text()
    summary = doc["summary"]
    said = " ".join((REPO / "docs" / "cluster.md").read_text().split())
    ms = {b: [1000 * summary[b][f"step_end_s_at_{n}"]["mean"] for n in doc["tensors"]] for b in summary}
    assert (f"costs {ms['horovod'][0]:.2f}, {ms['horovod'][1]:.2f} and {ms['horovod'][2]:.2f} ms beyond the plain "
            f"step, DDP's {ms['native'][0]:.2f}, {ms['native'][1]:.2f} and {ms['native'][2]:.2f}") in said
    hook = {b: summary[b]["hook_s_per_gradient"] for b in summary}
    assert (f"Horovod {1e6 * hook['horovod']['mean']:.0f} µs ({1e6 * hook['horovod']['low']:.0f}-"
            f"{1e6 * hook['horovod']['high']:.0f}) during backward and DDP {1e6 * hook['native']['mean']:.0f} "
            f"({1e6 * hook['native']['low']:.0f}-{1e6 * hook['native']['high']:.0f})") in said


def test_the_grid_refuses_an_output_that_is_a_file_and_a_missing_validation_in_one_line(tmp_path, monkeypatch,
                                                                                      capsys):
    (tmp_path / "taken").write_text("")
    code, err = run(["--output", str(tmp_path / "taken")], monkeypatch, capsys)
    assert code == 2 and "is a file" in err and len(err.strip().splitlines()) == 1
    code, err = run(["--validation", str(tmp_path / "nowhere.md"), "--output", str(tmp_path / "out")],
                    monkeypatch, capsys)
    assert code == 2 and "--validation" in err and "is not a file" in err and len(err.strip().splitlines()) == 1
    assert sorted(tree(tmp_path)) == ["taken"]


def test_the_gpu_node_s_host_costs_page_is_its_json_and_the_pages_that_quote_it_say_its_figures():
    """One H200's run of tools/host_costs.py --device cuda: its page rendered again from its JSON, and its figures
    where docs/cluster.md and the run's README quote them."""
    host_costs = _host_costs()
    folder = REPO / "docs" / "results" / "gpu-nvidia-h200"
    doc = json.loads((folder / host_costs.FILE).read_text())
    assert host_costs.markdown(doc) == (folder / "host-costs.md").read_text()
    summary = doc["summary"]
    end = summary["horovod"]["step_end_s_at_161"]
    cluster = " ".join((REPO / "docs" / "cluster.md").read_text().split())
    assert (f"Horovod's step end at 161 gradients is {1000 * end['mean']:.2f} ms ({1000 * end['low']:.2f}-"
            f"{1000 * end['high']:.2f})") in cluster
    assert (f"the hooks cost DDP {1e6 * summary['native']['hook_s_per_gradient']['mean']:.0f} µs and Horovod "
            f"{1e6 * summary['horovod']['hook_s_per_gradient']['mean']:.0f} a gradient") in cluster
    readme = (folder / "README.md").read_text()

    def cell(figure: dict[str, object], scale: float, digits: int) -> str:
        return (f"{scale * figure['mean']:,.{digits}f} ({scale * figure['low']:,.{digits}f} to "
                f"{scale * figure['high']:,.{digits}f})")
    for key, scale, digits in (("hook_s_per_gradient", 1e6, 1), ("step_end_s_at_161", 1e6, 0),
                               ("step_end_s_at_640", 1e6, 0), ("step_extra_s_resnet50_b32", 1e3, 1)):
        row = " | ".join(cell(summary[arm][key], scale, digits) for arm in ("native", "horovod", "horovod-async"))
        assert row in readme, (key, row)


def test_a_gpu_round_s_whole_steps_come_apart_into_plain_framework_and_what_it_adds():
    host_costs = _host_costs()
    lines = [{"backend": "horovod", "tensors": n, "backward": 2e-6 * n, "step": 1e-5 * n, "plain_backward": 1e-6 * n,
              "plain_step": 0.0} for n in (20, 161, 640)]
    lines.append({"backend": "horovod", "model": "resnet50", "batch": 32, "plain_step": 0.020, "step": 0.029})
    found = host_costs.per_round(lines)
    assert found["plain_step_s_resnet50_b32"] == 0.020 and found["framework_step_s_resnet50_b32"] == 0.029
    assert abs(found["step_extra_s_resnet50_b32"] - 0.009) < 1e-12
    assert abs(found["hook_s_per_gradient"] - 1e-6) < 1e-12 and abs(found["step_end_s_per_gradient"] - 1e-5) < 1e-12
    assert host_costs.arms("cuda") == ("native", "horovod", "horovod-async") and host_costs.ranks("cuda") == 1
    assert host_costs.arms("cpu") == ("native", "horovod") and host_costs.ranks("cpu") == 2


@pytest.mark.parametrize("argv, said", [
    (["tools/host_costs.py", "--model", "resnet50", "--output", "out"], "give --device cuda"),
    (["tools/host_costs.py", "--device", "cuda", "--output", "out"], "torch.cuda.is_available() is False"),
    (["tools/host_costs_rank.py", "--backend", "native", "--device", "cuda"], "torch sees none here"),
])
def test_the_gpu_benchmarks_refuse_a_machine_or_flags_they_cannot_measure_in_one_line(argv, said, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, str(REPO / argv[0]), *argv[1:]], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 2 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("batch", [32, 256])
def test_the_committed_2x8_h200_predictions_are_made_again_from_their_cluster_files(batch, tmp_path, monkeypatch,
                                                                                    capsys):
    """make docs' 2 x 8 H200s at batch 32 and 256: the same JSON again from the cluster file, the page from the JSON."""
    folder = REPO / "docs" / "results" / "gpu-prediction" / f"h200-2x8-b{batch}"
    committed = json.loads((folder / "prediction.json").read_text())
    monkeypatch.chdir(REPO)
    code, err = run(["--cluster", str(folder.relative_to(REPO) / "cluster.json"), "--output", str(tmp_path)],
                    monkeypatch, capsys)
    assert code == 0, err
    made = json.loads((tmp_path / "prediction.json").read_text())
    assert {**made, "command": committed["command"]} == committed
    assert predict_gpus.cluster_page(committed) == (folder / "prediction.md").read_text()
    assert committed["cluster"]["batch_per_gpu"] == batch and committed["host_bound"]
    # the one-GPU figure and its range are the H200's blocks at that batch in bf16: their median, lowest and highest
    line = next(line for line in (REPO / "docs" / "results" / "gpu-nvidia-h200" / "one-gpu.txt").read_text()
                .splitlines() if line.startswith(f"resnet50 batch {batch} bf16 "))
    blocks = json.loads(line.rsplit(":", 1)[1].split("per block", 1)[1])
    assert [committed["cluster"][k] for k in ("one_gpu_images_per_s", "one_gpu_images_per_s_low",
                                              "one_gpu_images_per_s_high")] == [statistics.median(blocks),
                                                                                min(blocks), max(blocks)]


def test_docs_cluster_md_says_the_host_bound_criterion_and_its_rows_as_the_check_made_them():
    check = json.loads((PUBLISHED / "check.json").read_text())
    bound, rows = check["host_bound"], {r["id"]: r for r in check["rows"]}
    faster = [rows[i] for i in bound["rows"]]
    published = [r["published"]["ddp_scaling"] for r in faster]
    model = [r["predicted"]["native"]["scaling_efficiency"] for r in faster]
    said = " ".join((REPO / "docs" / "cluster.md").read_text().split())
    assert (f"Past {bound['above_images_per_s']:,.0f} img/s a GPU every published run scaled more than "
            f"{100 * check['bar']['scaling']:.0f} points below the model (NVIDIA's mixed-precision runs: "
            f"{min(published):.2f}-{max(published):.2f} where the model says {min(model):.3f}-{max(model):.3f})"
            ) in said
    assert {r["id"].split("-")[-1] for r in faster} == {"amp"}  # the mixed-precision runs, as the page says

"""The comparison runner: artifacts, parity, rendering from comparison.json alone, failures and bad input."""

import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from analysis import runs, stats
from contract import models, phases, results
from contract.comparison import CompareConfig
from contract.config import TrainConfig
from launchers import arms
from ray_jobs import compare, orchestrator
from tests.helpers import assert_one_line_error, data_flags, run_module
from tests.helpers import assert_trained

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def comparison_dir(ray_cluster, users_ray, base_cfg, tmp_path_factory):
    """One small comparison for the module: 2 workers, both backends under Ray, torchrun and horovodrun, two
    interleaved rounds, one epoch (mp.spawn: tests/test_options.py's comparison of every launcher), with a temporary
    folder of its own, where its launchers' scratch goes; beside a user's own token-authenticated Ray and a torchrun's
    leftover folder, which it must neither join nor count."""
    root, scratch = tmp_path_factory.mktemp("compare"), tmp_path_factory.mktemp("scratch")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(scratch))
        patch.setattr(tempfile, "tempdir", None)
        run_dir = orchestrator.compare(base_cfg, CompareConfig(parity_steps=30, target_accuracy=0.9, repeats=2,
                                                               launchers="ray,torchrun,horovodrun", no_ceiling=True),
                                       root)
    LEFT_BY_TORCHRUN.extend(scratch.glob("torchelastic_*"))
    return run_dir


LEFT_BY_TORCHRUN: list[Path] = []
"""The torchelastic_<random>/ folders the module's comparison left in its temporary folder (torchrun's, one per run
before)."""


ARMS = ["native", "horovod", "native/torchrun", "horovod/horovodrun"]


def test_a_small_comparison_writes_every_artifact(comparison_dir):
    assert not LEFT_BY_TORCHRUN
    names = {p.name for p in comparison_dir.iterdir()}
    assert {"comparison.json", "report.md", "verdicts.png", "loss.png", "throughput.png", "overhead.png"} <= names
    comparison = runs.load(comparison_dir)
    assert all(r["status"] == "ok" for r in comparison["runs"]), comparison["runs"]
    ran = [(r["arm"], r["round"]) for r in comparison["runs"]]
    # References once, then the four arms in a Williams design: A B D C, then its mirror C D B A.
    first = [ARMS[i] for i in (0, 1, 3, 2)]
    assert ran == [("reference", 0), ("global-batch", 0), *[(a, 0) for a in first], *[(a, 1) for a in reversed(first)]]
    for run in comparison["runs"]:
        doc = results.read(comparison_dir / run["results"])
        assert doc["phases"] == run["phases"] and doc["end_to_end_s"] == run["end_to_end_s"]
        if run["launcher"] != "local":  # each launcher's run trained, as a run of its own would (no test repeats it)
            assert_trained(doc, 2, run["launcher"], run["backend"])
        # Where every rank ran, under every launcher: one local Ray node, or this host; local ranks 0 and 1.
        ranks = 1 if run["launcher"] == "local" else 2
        assert [(p["rank"], p["local_rank"]) for p in doc["placement"]] == [(r, r) for r in range(ranks)], run["arm"]
        assert len({p["node_id"] for p in doc["placement"]}) == 1 and doc["placement"][0]["node_ip"]
        assert all(p["cores"] for p in doc["placement"])  # unpinned by default: every core the rank may use
        assert run["placement"] == doc["placement"] and "network" not in doc
        assert run["averaged_by"] == (None if run["launcher"] == "local" else "Gloo")  # CPU tensors: Gloo, both
        assert all("link" not in e for e in doc["epochs"])  # no interface named: loopback, nothing to count
        load = run["machine_load"]  # what else used the host while it measured, beside its own ranks' CPU time
        assert load["cores"] >= 1 and load["wall_s"] > 0 and 0 <= load["steal_share"] <= load["busy_share"], load
    for run in comparison["runs"]:
        if run["launcher"] in ("torchrun", "mp.spawn", "horovodrun"):  # the whole command's output, kept beside it
            output = (comparison_dir / run["results"]).with_name(arms.LOG).read_text()
            assert output.count(f"native via {run['launcher']}: 2 worker(s)" if run["backend"] == "native"
                                else "horovod via horovodrun: 2 worker(s)") == 1, output[-3000:]
            assert "Traceback" not in output and "error: " not in output, output[-3000:]
            assert output.index("final test accuracy") < output.index("results: "), output[-3000:]
    assert comparison["not_applicable"] == [
        {"backend": "dataparallel", "workers": 2, "reason": "DataParallel needs 2 GPUs; this machine has 0"}]
    markdown = (comparison_dir / "report.md").read_text()
    for needle in ("## 2 worker(s)", "| native |", "| horovod |", "native/torchrun", "horovod/horovodrun",
                   "**Speed: ", "median step", "## Where the ranks ran", "AMD" if "AMD" in comparison["environment"]["cpu"] else "CPU"):
        assert needle in markdown, needle
    for png in ("verdicts.png", "loss.png", "throughput.png", "overhead.png"):
        assert (comparison_dir / png).read_bytes().startswith(b"\x89PNG")


def test_the_speed_verdict_pairs_the_rounds_and_states_its_interval(comparison_dir):
    comparison = runs.load(comparison_dir)
    answer = comparison["speed"]["2"]
    assert answer["metric"] == "steady_samples_per_s" and answer["repeats"] == 2 and answer["launcher"] == "ray"
    by_arm = {arm: [r["steady_samples_per_s"] for r in comparison["runs"] if r["arm"] == arm] for arm in ARMS}
    assert answer["native"] == by_arm["native"] and answer["horovod"] == by_arm["horovod"]
    expected = stats.paired_ratio(by_arm["native"], by_arm["horovod"])
    assert answer["ratio"] == pytest.approx(expected.ratio) and answer["ci95"] == pytest.approx(list(expected.ci95))
    assert answer["verdict"] == stats.speed_verdict(expected)
    overhead = comparison["launcher_overhead"]["2"]
    assert list(overhead) == ["native/torchrun", "horovod/horovodrun"]
    for arm, section in overhead.items():
        assert (section["backend"], section["vanilla"]) == tuple(arm.split("/"))
        assert section["steady"]["repeats"] == section["end_to_end"]["repeats"] == 2


def test_phases_increase_and_end_at_the_wall_time(comparison_dir):
    comparison = runs.load(comparison_dir)
    for run in comparison["runs"]:
        values = [run["phases"][name] for name in phases.PHASES]
        assert values == sorted(values) and values[0] >= 0, run["phases"]
        assert values[-1] == run["end_to_end_s"]
        assert run["eval_time_s"] > 0 and run["checkpoint_time_s"] >= 0
        if run["launcher"] in ("torchrun", "mp.spawn", "horovodrun"):
            # The whole command: processes start after the launch, the group after them, training after that.
            assert 0 < values[0] < values[1] < values[2] < values[3] <= values[4]


def test_parity_holds_within_the_stated_tolerance(comparison_dir):
    comparison = runs.load(comparison_dir)
    verdict = comparison["parity"]["2"]
    assert verdict["verdict"] == "PASS", verdict
    assert verdict["steps"] == 30
    assert len(verdict["max_abs_step_loss_difference"]) == 10  # every pair of the four arms and the reference
    assert max(verdict["max_abs_step_loss_difference"].values()) <= CompareConfig().tolerance
    # One forward over the global batch normalises differently: reported, and measurably apart.
    assert verdict["informational"]["reference vs global-batch"] > CompareConfig().tolerance
    assert "**Parity: PASS**" in (comparison_dir / "report.md").read_text()


def test_render_from_comparison_json_alone_reproduces_the_report(comparison_dir, tmp_path):
    shutil.copy(comparison_dir / "comparison.json", tmp_path / "comparison.json")
    result = run_module("ray_jobs.compare", "--render", str(tmp_path), timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "report.md").read_text() == (comparison_dir / "report.md").read_text()
    assert (tmp_path / "loss.png").exists() and (tmp_path / "throughput.png").exists()


def test_a_failed_run_is_reported_and_sets_the_exit_code(ray_cluster, base_cfg, tmp_path, monkeypatch):
    real = arms.run

    def horovod_breaks(arm, cfg):
        if arm.backend == "horovod":
            raise RuntimeError("worker died")
        return real(arm, cfg)

    monkeypatch.setattr(arms, "run", horovod_breaks)
    monkeypatch.setattr(sys, "argv", ["compare", "--workers", "1", "--backends", "horovod", "--epochs", "1",
                                      "--repeats", "1", "--no-ceiling", "--output-dir", str(tmp_path),
                                      *data_flags(base_cfg)])
    assert compare.main() == 1
    (run_dir,) = tmp_path.iterdir()
    comparison = runs.load(run_dir)
    failed = [r for r in comparison["runs"] if r["status"] == "failed"]
    assert failed == [{"arm": "horovod", "backend": "horovod", "launcher": "ray", "workers": 1, "round": 0,
                       "status": "failed", "error": "RuntimeError: worker died"}]
    assert comparison["parity"]["1"]["verdict"] == "FAIL"
    assert comparison["parity"]["1"]["why"] == "horovod did not finish"
    assert "worker died" in (run_dir / "report.md").read_text()


@pytest.mark.parametrize("flags, needle", [
    (["--backends", "native,mxnet"], "unknown backend mxnet in --backends"),
    (["--workers", "0,2"], "--workers takes distinct positive integers"),
    (["--workers", "one,two"], "comma-separated list of positive integers"),
    (["--backends", "native", "--cycle-time-ms", "5"], "--cycle-time-ms is a Horovod option"),
    (["--repeats", "0"], "--repeats must be a positive integer"),
    (["--launchers", "ray,mpirun"], "--launchers takes distinct names from ray, torchrun, mp.spawn, horovodrun"),
])
def test_bad_input_is_one_line_and_leaves_no_run_folder(base_cfg, tmp_path, flags, needle):
    out = tmp_path / "results"
    result = run_module("ray_jobs.compare", *data_flags(base_cfg), "--output-dir", str(out), *flags, timeout=120)
    assert_one_line_error(result, needle)
    assert not out.exists() or not any(out.iterdir())


def test_unwritable_output_dir_is_one_line(base_cfg, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = run_module("ray_jobs.compare", *data_flags(base_cfg), "--output-dir", str(blocker / "results"),
                        timeout=120)
    assert_one_line_error(result, "cannot be a folder", "is a file")
    assert blocker.read_text() == ""


@pytest.fixture(scope="module")
def image_comparison_dir(ray_cluster, base_cfg, tmp_path_factory):
    """One small comparison of an image model (torchvision's resnet18, 45 MB of gradient) on Ray, one round, beside
    its ceiling: what a team's model meets that the ConvNet's 116 KB cannot show (several DDP buckets, Horovod's
    fusion), and how far each backend is from the same ranks averaging nothing."""
    cfg = TrainConfig(model="resnet18", data_dir=base_cfg.data_dir, epochs=1, warmup_steps=3, max_steps_per_epoch=8,
                      synthetic_train_size=512, synthetic_test_size=64, log_every=10)
    root = tmp_path_factory.mktemp("compare-image")
    run_dir = orchestrator.compare(cfg, CompareConfig(parity_steps=8, target_accuracy=0.9, repeats=1), root)
    return run_dir


def test_an_image_model_trains_the_same_under_both_backends_and_is_measured(image_comparison_dir):
    comparison = runs.load(image_comparison_dir)
    assert all(r["status"] == "ok" for r in comparison["runs"]), comparison["runs"]
    assert comparison["model"] == {"name": "resnet18", "parameters": 11_181_642,
                                   "gradient_bytes": models.gradient_bytes("resnet18"), "image_size": 32,
                                   "channels": 3, "batch_norm": True}
    verdict = comparison["parity"]["2"]
    assert verdict["verdict"] == "PASS" and verdict["steps"] == 8, verdict
    by_arm = {r["arm"]: r for r in comparison["runs"]}
    for backend in ("native", "horovod"):  # bit for bit where the rounding order allows: with 2 ranks it does
        assert by_arm[backend]["parameters_sha256"] == by_arm["reference"]["parameters_sha256"], backend
        doc = results.read(image_comparison_dir / by_arm[backend]["results"])
        assert doc["model"] == comparison["model"] and len(doc["peak_rss_bytes"]) == 2
        assert doc["overlap"]["comm_alone_s"] > 0 and doc["overlap"]["share"] is not None
        assert doc["cpu_s_per_1k_samples"] > 0 and doc["config"]["batch_size"] == 32
    assert set(comparison["cpu_cost"]["2"]) >= {"ratio", "native", "horovod", "sentence"}
    markdown = (image_comparison_dir / "report.md").read_text()
    for needle in ("Model **resnet18**", "| overlap |", "**CPU cost: ", "final parameters, horovod vs reference: "
                   "bit-identical"):
        assert needle in markdown, needle
    # The same parameters evaluate the same: Horovod's and the reference's BatchNorm buffers, each worker's own in
    # training, averaged over the 2 workers before evaluation (DDP's follow rank 0's batches: its gap is said). The
    # test loss is summed over other groupings of the test set (each rank its share): equal but for rounding.
    mine, theirs = by_arm["horovod"]["final"], by_arm["reference"]["final"]
    assert mine["test_accuracy"] == theirs["test_accuracy"]
    assert mine["test_loss"] == pytest.approx(theirs["test_loss"], rel=1e-6)
    assert all(by_arm[arm]["buffers_averaged"] for arm in ("native", "horovod", "reference"))
    assert "test accuracy, buffers averaged before evaluation, horovod vs reference: " in markdown


def test_each_backend_records_its_schedule_whole_and_the_replay_reads_it(image_comparison_dir):
    from experiments.gpu_model import schedule_check

    comparison = runs.load(image_comparison_dir)
    by_arm = {r["arm"]: r for r in comparison["runs"]}
    for backend in ("native", "horovod"):
        schedule = results.read(image_comparison_dir / by_arm[backend]["results"])["schedule"]
        count = len(schedule["gradient_bytes"])
        assert sum(schedule["gradient_bytes"]) == models.gradient_bytes("resnet18")
        assert sorted(map(int, schedule["ready_s"])) == list(range(count)) and schedule["steps_measured"] == 5
        for step in schedule["steps"]:
            ready = dict(step["ready_s"])
            assert sorted(ready) == list(range(count)) and 0 < max(ready.values()) <= step["backward_end_s"]
            if backend == "horovod":  # fused in Horovod's C++ thread: its timeline is off without --fused-buffers
                assert step["allreduces"] == []
                continue
            # every gradient in exactly one of DDP's buckets, each launched once its gradients were ready (the
            # reducer's hook and the recorder's run in autograd's order: within 1 ms), ended after its launch
            assert sorted(i for a in step["allreduces"] for i in a["indices"]) == list(range(count))
            assert len(step["allreduces"]) > 1
            for bucket in step["allreduces"]:
                assert bucket["launched_s"] >= max(ready[i] for i in bucket["indices"]) - 1e-3
                assert bucket["finished_s"] >= bucket["launched_s"]
    found, _ = schedule_check.points(image_comparison_dir)
    assert [(p.arm, p.what) for p in found] == [("native", "wait after backward"), ("native", "allreduces a step"),
                                               ("horovod", "wait after backward"),
                                               ("native − horovod", "backward's compute + wait")]
    (buckets,) = [p for p in found if p.what == "allreduces a step"]
    assert buckets.replayed_ms == buckets.measured_ms  # DDP's buckets as the replay cuts them


def test_the_ceiling_runs_beside_the_backends_and_each_backend_s_step_is_taken_apart(image_comparison_dir):
    comparison = runs.load(image_comparison_dir)
    by_arm = {r["arm"]: r for r in comparison["runs"]}
    ceiling = by_arm["ceiling"]
    assert (ceiling["backend"], ceiling["launcher"], ceiling["averaged_by"]) == ("native", "ray", None)
    assert not ceiling["parameters_identical_across_ranks"]  # each rank trained its own model
    assert results.read(image_comparison_dir / ceiling["results"])["config"]["no_averaging"]
    assert not any("ceiling" in pair for pair in comparison["parity"]["2"]["max_abs_step_loss_difference"])
    found = comparison["efficiency"]["2"]
    for arm in ("native", "horovod"):
        expected = stats.paired_ratio([by_arm[arm]["steady_samples_per_s"]], [ceiling["steady_samples_per_s"]])
        assert found[arm]["ratio"] == pytest.approx(expected.ratio) and found[arm]["ceiling"] == "ceiling"
    for arm in ("native", "horovod", "ceiling"):
        last = by_arm[arm]["epochs"][-1]
        parts = last["phases_s"]
        assert sum(parts[name] for name in phases.STEP_PHASES) == pytest.approx(parts["step"] - parts["remainder"])
        by_thread = last["cpu_s_per_1k_by_thread"]
        assert by_thread["groups"] == list(phases.THREAD_GROUPS) and len(by_thread["per_rank"]) == 2
        assert by_thread["all_ranks"][0] > 0 and min(by_thread["all_ranks"]) >= 0, (arm, by_thread)
    assert ceiling["epochs"][-1]["phases_s"]["wait"] == 0
    markdown = (image_comparison_dir / "report.md").read_text()
    for needle in ("**Efficiency** (steady samples/s ÷ the ceiling's", "**Why** (a part is named only", "| ceiling |",
                   "native − ceiling, paired by round", "**CPU by thread**", "parity does not apply to it"):
        assert needle in markdown, needle
    assert (image_comparison_dir / "phases.png").read_bytes().startswith(b"\x89PNG")


def test_a_failed_launcher_is_named_by_its_rank_s_error_line_not_by_a_traceback_frame(tmp_path):
    """Seen: "torchrun exited with 1:   File ".../elastic/multiprocessing/errors/__init__.py", line 357" as the line."""
    from contract.errors import RunFailed

    said = ('echo \'  File "/venv/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 357\'; '
            "echo 'error: training diverged: the loss became nan by epoch 1, step 3'; exit 1")
    with pytest.raises(RunFailed, match=r"^torchrun exited with 1: error: training diverged: the loss became nan"):
        arms.run_launcher(["sh", "-c", said], {"PATH": "/usr/bin:/bin"}, tmp_path / arms.LOG, "torchrun")
    assert [p.name for p in tmp_path.iterdir()] == [arms.LOG]

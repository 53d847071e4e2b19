"""The comparison runner: artifacts, parity, rendering from comparison.json alone, failures and bad input."""

import shutil
import sys

import pytest

from ray_jobs import compare
from tests.conftest import assert_one_line_error, data_flags, run_module
from workload import report, results

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def comparison_dir(ray_cluster, base_cfg, tmp_path_factory):
    """One small comparison for the module: 1 and 2 workers, both backends, one epoch."""
    root = tmp_path_factory.mktemp("compare")
    run_dir = compare.compare(base_cfg, [1, 2], ["native", "horovod"], root, parity_steps=30,
                              tolerance=compare.DEFAULT_TOLERANCE, target_accuracy=0.9)
    report.render(run_dir)
    return run_dir


def test_a_small_comparison_writes_every_artifact(comparison_dir):
    names = {p.name for p in comparison_dir.iterdir()}
    assert {"comparison.json", "report.md", "loss.png", "throughput.png"} <= names
    comparison = report.load(comparison_dir)
    ran = {(r["backend"], r["workers"]) for r in comparison["runs"] if r["status"] == "ok"}
    assert ran == {("reference", 1), ("native", 1), ("horovod", 1),
                   ("reference", 2), ("global-batch", 2), ("native", 2), ("horovod", 2)}
    for run in comparison["runs"]:
        results.read(comparison_dir / run["results"])
    assert comparison["not_applicable"] == [
        {"backend": "dataparallel", "workers": 2, "reason": "DataParallel needs 2 GPUs; this machine has 0"}]
    markdown = (comparison_dir / "report.md").read_text()
    for needle in ("## 1 worker(s)", "## 2 worker(s)", "| native |", "| horovod |", "scaling efficiency",
                   "DataParallel needs 2 GPUs", "AMD" if "AMD" in comparison["environment"]["cpu"] else "CPU"):
        assert needle in markdown
    for png in ("loss.png", "throughput.png"):
        assert (comparison_dir / png).read_bytes().startswith(b"\x89PNG")


def test_parity_holds_within_the_stated_tolerance(comparison_dir):
    comparison = report.load(comparison_dir)
    for workers in ("1", "2"):
        verdict = comparison["parity"][workers]
        assert verdict["verdict"] == "PASS", verdict
        assert verdict["steps"] == 30
        assert set(verdict["max_abs_step_loss_difference"]) == {
            "native vs horovod", "native vs reference", "horovod vs reference"}
        assert max(verdict["max_abs_step_loss_difference"].values()) <= compare.DEFAULT_TOLERANCE
    # One forward over the global batch normalises differently: reported, and measurably apart.
    assert comparison["parity"]["2"]["informational"]["reference vs global-batch"] > compare.DEFAULT_TOLERANCE
    assert "**Parity: PASS**" in (comparison_dir / "report.md").read_text()


def test_render_from_comparison_json_alone_reproduces_the_report(comparison_dir, tmp_path):
    shutil.copy(comparison_dir / "comparison.json", tmp_path / "comparison.json")
    result = run_module("ray_jobs.compare", "--render", str(tmp_path), timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "report.md").read_text() == (comparison_dir / "report.md").read_text()
    assert (tmp_path / "loss.png").exists() and (tmp_path / "throughput.png").exists()


def test_a_failed_run_is_reported_and_sets_the_exit_code(ray_cluster, base_cfg, tmp_path, monkeypatch):
    real = compare.execute

    def horovod_breaks(backend, cfg):
        if backend == "horovod":
            raise RuntimeError("worker died")
        return real(backend, cfg)

    monkeypatch.setattr(compare, "execute", horovod_breaks)
    monkeypatch.setattr(sys, "argv", ["compare", "--workers", "1", "--backends", "horovod", "--epochs", "1",
                                      "--output-dir", str(tmp_path), *data_flags(base_cfg)])
    assert compare.main() == 1
    (run_dir,) = tmp_path.iterdir()
    comparison = report.load(run_dir)
    failed = [r for r in comparison["runs"] if r["status"] == "failed"]
    assert failed == [{"backend": "horovod", "workers": 1, "status": "failed", "error": "RuntimeError: worker died"}]
    assert comparison["parity"]["1"]["verdict"] == "FAIL"
    assert "- horovod with 1 worker(s): RuntimeError: worker died" in (run_dir / "report.md").read_text()


@pytest.mark.parametrize("flags, needle", [
    (["--backends", "native,mxnet"], "unknown backend mxnet in --backends"),
    (["--workers", "0,2"], "--workers takes distinct positive integers"),
    (["--workers", "one,two"], "comma-separated list of positive integers"),
    (["--compression", "fp16"], "are Horovod options; use --backend horovod"),
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
    assert_one_line_error(result, "is not writable")
    assert blocker.read_text() == ""

"""compare --resume DIR (ray_jobs/resume.py): a comparison killed midway goes on in its folder, keeping the runs that
finished whole, checked; a damaged or cut-short run runs again; other settings are refused (tests/test_bad_input.py)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from contract import results
from ray_jobs import resume
from tests.helpers import REPO, data_flags, run_module


def whole_run(folder, steady: float = 100.0) -> None:
    """A run's folder as a finished run leaves it: results.json and, after it, record.json."""
    folder.mkdir()
    epoch = {**{k: 0.5 for k in results.EPOCH_KEYS}, "epoch": 1, "samples_per_s_median": steady, "steps": 2}
    doc = {"schema_version": 1, "backend": "native", "launcher": "torchrun", "workers": 1, "dataset": "synthetic",
           "config": {}, "environment": {}, "step_losses": [2.3, 2.2], "epochs": [epoch],
           "final": {"test_accuracy": 0.5, "test_loss": 1.0, "wall_time_s": 1.0}, "timestamps": {}, "phases": {},
           "end_to_end_s": 3.0, "parameters_sha256": "ab"}
    (folder / results.FILENAME).write_text(json.dumps(doc))
    (folder / resume.RECORD).write_text(json.dumps({"status": "ok", "steady_samples_per_s": steady,
                                                    "parameters_sha256": "ab", "step_losses": [2.3, 2.2]}))


def test_only_runs_whose_record_agrees_with_their_results_are_kept_the_rest_run_again(tmp_path):
    whole_run(tmp_path / "native-torchrun-1w-r0")
    whole_run(tmp_path / "horovod-horovodrun-1w-r0")
    record = json.loads((tmp_path / "horovod-horovodrun-1w-r0" / resume.RECORD).read_text())
    (tmp_path / "horovod-horovodrun-1w-r0" / resume.RECORD).write_text(json.dumps({**record, "parameters_sha256": "x"}))
    whole_run(tmp_path / "native-torchrun-1w-r1")
    (tmp_path / "native-torchrun-1w-r1" / resume.RECORD).unlink()  # killed between its results and its record
    (tmp_path / "reference-1w").mkdir()  # killed while it trained
    assert list(resume.finished(tmp_path)) == ["native-torchrun-1w-r0"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["native-torchrun-1w-r0"]


@pytest.mark.cluster
def test_a_comparison_sigkilled_midway_resumes_keeping_its_finished_runs(base_cfg, tmp_path):
    args = ["--launchers", "torchrun,horovodrun", "--workers", "1", "--repeats", "2", "--no-ceiling", "--epochs", "1",
            "--max-steps-per-epoch", "12", "--parity-steps", "12", *data_flags(base_cfg), "--output-dir", str(tmp_path)]
    killed = subprocess.Popen([sys.executable, "-m", "ray_jobs.compare", *args], cwd=REPO, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 240
    while not list(tmp_path.glob("*/*-r0/" + resume.RECORD)):  # the first distributed run finished whole: kill
        assert killed.poll() is None and time.monotonic() < deadline, "no run finished"
        time.sleep(0.2)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    run_dir = next(tmp_path.iterdir())
    first = next(run_dir.glob("*-r0/" + resume.RECORD)).parent
    kept = {p.name: p.stat().st_mtime_ns for p in first.iterdir()}
    done = run_module("ray_jobs.compare", *args, "--resume", str(run_dir), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{first.name.split('-1w')[0].replace('-', '/')}, 1 worker(s), round 1: finished before the comparison " \
           "stopped; kept" in done.stdout + done.stderr
    assert {p.name: p.stat().st_mtime_ns for p in first.iterdir()} == kept  # not run again
    comparison = json.loads((run_dir / "comparison.json").read_text())
    assert [r["status"] for r in comparison["runs"]] == ["ok"] * 5 and comparison["parity"]["1"]["verdict"] == "PASS"
    assert [r.get("kept_on_resume", False) for r in comparison["runs"]].count(True) >= 1
    assert "(resumed with --resume: " in (run_dir / "report.md").read_text()

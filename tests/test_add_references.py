"""python -m ray_jobs.add_references: a finished comparison's missing references, checked before anything runs (its
comparison.json against plan.json and the runs it records), one writer at a time, the cause of a reference that computes
otherwise named, and nothing left where a reference fails or the command is killed."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from analysis import runs
from contract import results
from contract.comparison import CompareConfig
from contract.config import ConfigError, TrainConfig
from contract.errors import RunFailed
from launchers import arms
from launchers.arms import Arm
from ray_jobs import add_references, orchestrator, resume
from runtime import space
from tests.helpers import REPO, tree
from workload import data


@pytest.fixture
def finished(tmp_path):
    """A comparison at 3 workers under torchrun and horovodrun, its reference run here and its arms' records standing
    in for their runs (the reference's losses, no folders), without the references its floor needs. Small: each
    reference added makes the data again and trains 10 steps."""
    folder = tmp_path / "run"
    folder.mkdir()
    cmp = CompareConfig(workers="3", launchers="torchrun,horovodrun", repeats=1, no_ceiling=True, parity_steps=8)
    base = data.resolve(TrainConfig(dataset="synthetic", data_dir=str(tmp_path / "data"), synthetic_train_size=960,
                                    synthetic_test_size=96, batch_size=32, workers=3, output_dir=str(tmp_path),
                                    epochs=1, warmup_steps=2, log_every=100))
    resume.write_plan(folder, resume.request(base, cmp))
    reference = orchestrator.run_one(Arm("reference", "local"), 0, 3, base, folder, None)
    records = [reference, *({**reference, "arm": arm.label, "backend": arm.backend, "launcher": arm.launcher,
                             "results": f"{orchestrator.run_name(arm, 0, 3)}/results.json"}
                            for arm in arms.for_backends(["native", "horovod"], ["torchrun", "horovodrun"]))]
    planned = orchestrator.Plan(base, cmp, folder, [], [])
    space.write_json(folder / runs.COMPARISON, orchestrator.summarize(planned, records, results.environment(), 1.0))
    return folder


def edit(folder, **changes) -> None:
    comparison = runs.load(folder)
    comparison["settings"]["config"].update(changes)
    (folder / runs.COMPARISON).write_text(json.dumps(comparison))


@pytest.mark.parametrize("changes, plan, said", [
    ({"model": "mlp"}, True, "--model mlp, where plan.json says convnet"),
    ({"seed": 7}, True, "--seed 7, where plan.json says 0"),
    ({"seed": 7}, False, "--seed 7, where reference-3w/results.json says 0"),
    ({"lr": 0.05, "momentum": 0.5}, False, "--lr 0.05, where reference-3w/results.json says 0.01; --momentum 0.5"),
])
def test_an_edited_comparison_is_refused_before_any_reference_runs(finished, changes, plan, said, monkeypatch):
    """Seen: a copy whose model (convnet -> mlp) or seed (0 -> 7) was edited had its references run with the edited
    value, and the difference blamed on the machine."""
    if not plan:
        (finished / resume.PLAN).unlink()
    edit(finished, **changes)
    monkeypatch.setattr(orchestrator, "run_one", lambda *args: pytest.fail("a reference ran"))
    before = tree(finished)
    with pytest.raises(ConfigError, match="does not match the comparison it records") as refused:
        add_references.add(finished)
    assert said in str(refused.value) and "restore the comparison.json that comparison wrote" in str(refused.value)
    assert tree(finished) == before


def test_a_second_command_on_the_folder_is_refused_naming_the_first(finished):
    """Seen: two add_references on one folder both ran."""
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], "
                               "os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
                               str(finished)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(ConfigError, match=f"the comparison's folder {finished} is being written by another "
                                              f"command \\(PID {holder.pid}\\)"):
            add_references.add(finished)
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("recorded", [True, False])
def test_the_references_go_in_whole_and_the_floor_says_where_they_ran(finished, recorded):
    """Seen: a comparison without its `reference` read "reference parts from its recorded losses at step 1 (by —…)"."""
    if not recorded:
        comparison = runs.load(finished)
        comparison["runs"] = [r for r in comparison["runs"] if r["arm"] != "reference"]
        (finished / runs.COMPARISON).write_text(json.dumps(comparison))
    said = add_references.add(finished)
    comparison = runs.load(finished)
    measured = comparison["parity"]["3"]["floor"]["measured"]
    assert ("reproduced its recorded losses bit for bit" if recorded else
            "beside the reference they are set against, which the comparison lacked") in measured, measured
    assert "—" not in measured and "reference-again" not in said
    added = {r["arm"] for r in comparison["runs"]} - {"native/torchrun", "horovod/horovodrun"}
    assert added == {"reference", "reference-horovod", "reference-reordered", "global-batch"}
    assert all((finished / r["results"]).exists() for r in comparison["runs"] if r["launcher"] == "local")
    assert not [p.name for p in finished.iterdir() if p.name.startswith(".")]  # the scratch folder went


def test_a_reference_that_fails_is_one_line_exit_1_and_leaves_the_folder_as_it_was(finished, monkeypatch):
    real = orchestrator.run_one

    def reordered_fails(arm, *args):
        if arm.label == "reference-reordered":
            return {"arm": arm.label, "status": "failed", "error": "Diverged: training diverged: the loss became nan"}
        return real(arm, *args)

    monkeypatch.setattr(orchestrator, "run_one", reordered_fails)
    before = tree(finished)
    with pytest.raises(RunFailed, match="reference-reordered with 3 worker\\(s\\) failed: Diverged: training diverged"):
        add_references.add(finished)
    assert tree(finished) == before


@pytest.mark.parametrize("then, cause", [
    ({}, "the same CPU, Python, torch and torchvision as the comparison's, so this project's code computes it"),
    ({"cpu": "AMD EPYC 9654", "torch": "2.10.0"}, "the comparison ran with cpu AMD EPYC 9654, torch 2.10.0"),
])
def test_a_reference_that_computes_otherwise_names_what_differs_from_where_the_comparison_ran(then, cause):
    """Seen: "the comparison ran on AMD EPYC", said on the same CPU and torch."""
    here = results.environment()
    again = {"arm": "reference-again", "workers": 3, "differs_from_recorded": {"step": 1, "by": 0.0428}}
    said = add_references._where({"environment": {**here, **then}}, [again], 3, here)
    assert "parts from its recorded losses at step 1 (by 0.0428; " + cause in said


@pytest.mark.faults
def test_a_sigkilled_add_references_leaves_the_folder_as_it_was_and_nothing_in_the_temp_folder(finished, tmp_path):
    """Seen: an empty run folder in the comparison's, and a temporary folder in the system's."""
    before, temp = tree(finished), tmp_path / "tmp"
    temp.mkdir()
    run = subprocess.Popen([sys.executable, "-m", "ray_jobs.add_references", str(finished)], cwd=REPO,
                           env={**os.environ, "TMPDIR": str(temp)}, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not any(p.name.startswith(".adding-references-") for p in finished.iterdir()):
        assert run.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(1.0)  # a reference under way
    run.send_signal(signal.SIGKILL)
    run.wait()
    deadline = time.monotonic() + 30
    while tree(finished) != before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert tree(finished) == before and not any(temp.iterdir())

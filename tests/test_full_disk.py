"""A full disk: refused before anything starts where the room is known to be short, and a write that still finds it
full ends the run in one line and leaves no half-written file. A real filesystem of 16 kB (tmpfs, as root)."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cluster import worker_output
from contract import results
from contract.errors import RunFailed
from contract.results import History
from runtime import cli, space
from tests.helpers import ENTRY_POINTS, SYNTHETIC, tree
from workload import checkpoint
from workload.model import ConvNet


@pytest.fixture
def tiny_disk(tmp_path):
    """16 kB, nearly all taken by a file, as a disk that filled up."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(disk)], check=True)
    try:
        (disk / "ballast").write_bytes(b"x" * 12 * 1024)
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_data_folder_without_room_for_the_synthetic_digits_is_refused_before_they_are_made(tiny_disk, tmp_path,
                                                                                             monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["ray_jobs.train", *SYNTHETIC, "--data-dir", str(tiny_disk / "data"),
                                      "--output-dir", str(tmp_path / "out")])
    with pytest.raises(SystemExit) as exited:
        cli.run(ENTRY_POINTS["ray_jobs.train"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1, err
    assert f"--data-dir {tiny_disk / 'data' / 'synthetic'} has 4.0 kB free; this run needs about" in err
    assert not (tiny_disk / "data").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("entry", ["ray_jobs.train", "native_ddp.train", "horovod_ddp.train"])
def test_an_output_folder_without_room_is_refused_before_anything_starts(entry, tiny_disk, tmp_path, monkeypatch,
                                                                         capsys):
    monkeypatch.setenv("LOCAL_RANK", "0")  # native_ddp.train as torchrun starts it
    monkeypatch.setattr(sys, "argv", [entry, *SYNTHETIC, "--data-dir", str(tmp_path / "data"), "--output-dir",
                                      str(tiny_disk / "out")])
    before = tree(tmp_path)
    with pytest.raises(SystemExit) as exited:
        cli.run(ENTRY_POINTS[entry])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1, err
    assert f"--output-dir {tiny_disk / 'out'} has 4.0 kB free; this run needs about 2.0 MB there" in err
    assert tree(tmp_path) == before


def test_results_that_find_the_disk_full_are_one_line_and_leave_nothing(tiny_disk):
    with pytest.raises(RunFailed, match=rf"no space left in {tiny_disk}: results.json needs 17.\d kB;"):
        space.write_json(tiny_disk / results.FILENAME, {"losses": [0.125] * 2000})
    assert sorted(p.name for p in tiny_disk.iterdir()) == ["ballast"]


def test_a_checkpoint_that_finds_the_disk_full_is_one_line_and_leaves_nothing(tiny_disk, cfg):
    model = ConvNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with pytest.raises(RunFailed, match=rf"no space left in {tiny_disk}: checkpoint.pt needs"):
        checkpoint.save(tiny_disk, model, optimizer, History(epochs=[{"epoch": 1}]), cfg, "native", "torchrun")
    assert sorted(p.name for p in tiny_disk.iterdir()) == ["ballast"]


def test_ray_s_own_lines_on_a_full_disk_are_dropped_without_a_logging_traceback(tiny_disk, capsys):
    router = worker_output._Router(tiny_disk / "ray.log")
    router.write("before the run\n")
    router.open()
    for _ in range(100):
        router.write("x" * 200 + "\n")
    assert router.full and "Logging error" not in capsys.readouterr().err
    assert Path(tiny_disk / "ray.log").stat().st_size <= 4096


def test_ray_s_log_on_a_full_disk_ends_with_a_whole_line(tiny_disk):
    """Seen: ray.log cut mid-line where the disk filled."""
    router = worker_output._Router(tiny_disk / "ray.log")
    router.open()
    for _ in range(100):
        router.write("y" * 333 + "\n")
    assert router.full and (tiny_disk / "ray.log").read_bytes().endswith(b"\n")


def test_a_run_that_failed_on_a_full_disk_says_so_in_one_line_whatever_raised(tmp_path):
    """Seen: a run's line carrying Ray's whole traceback ("OSError: [Errno 28] … During handling of the above
    exception, another exception occurred: Traceback …")."""
    from ray_jobs.orchestrator import failure_line

    chained = RuntimeError("Training failed.\nTraceback (most recent call last):\n  OSError: [Errno 28] No space left "
                           "on device: '/out/.ray-train'\nDuring handling of the above exception, another exception")
    assert failure_line(chained, "/out") == ("RunFailed: no space left in /out: the run's files could not be written; "
                                             "free some space there (or choose another folder) and run again")
    assert failure_line(RuntimeError("torchrun exited with 1\nmore"), "/out") == "RuntimeError: torchrun exited with 1"


def test_a_disk_that_fills_mid_comparison_names_the_disk_and_starts_no_more_runs(tiny_disk, monkeypatch):
    from contract.comparison import CompareConfig
    from contract.config import TrainConfig
    from launchers.arms import Arm
    from ray_jobs import orchestrator

    started = []

    def fills_the_disk(arm: Arm, round_: int, n: int, *args) -> dict:
        started.append(arm.label)
        (tiny_disk / "ballast").write_bytes(b"x" * 15 * 1024)  # the run filled it, and failed with no line of its own
        return {"arm": arm.label, "launcher": arm.launcher, "workers": n, "round": round_, "status": "failed",
                "error": "RuntimeError: torchrun exited with 1: no error line"}

    monkeypatch.setattr(orchestrator, "run_one", fills_the_disk)
    monkeypatch.setattr(orchestrator.preflight, "OUTPUT_BYTES", 2 * 1024)  # what a run needs, at this disk's scale
    cmp = CompareConfig(repeats=2, no_ceiling=True, launchers="torchrun,horovodrun", workers="1")
    planned = orchestrator.Plan(TrainConfig(), cmp, tiny_disk, [], [])
    planned.runs, _ = orchestrator.runs([1], planned.arms, cmp.repeats)
    records = []
    with pytest.raises(RunFailed, match=rf"no space left in {tiny_disk}: .* free, and a run needs about 2.0 kB; 4 "
                                        rf"run\(s\) not started, the 0 that finished are kept: .*--resume {tiny_disk}"):
        orchestrator._run_all(planned, planned.runs, records, {})
    assert started == ["reference"] and records[0]["error"].startswith(f"RunFailed: no space left in {tiny_disk}")


def test_first_step_gradients_on_a_disk_that_fills_is_one_line_exit_1_and_leaves_no_file(tiny_disk, monkeypatch,
                                                                                         capsys):
    """Seen: a traceback and a 0-byte first-step-gradients.json."""
    from tools import first_step_gradients as tool

    doc = {"workers": 3, "model": "resnet18", "batch_size": 32, "compared": {},
           "environment": {"cpu": "a CPU " * 2000, "torch": "2.11.0"}}  # more than the disk's 4 kB
    monkeypatch.setattr(sys, "argv", ["tools/first_step_gradients.py"])
    with pytest.raises(SystemExit) as exited:
        cli.run(lambda: tool.write(tiny_disk / "out" / "gradients", doc))
    err = capsys.readouterr().err
    assert exited.value.code == 1 and err.count("\n") == 1, err
    assert err.startswith(f"error: no space left in {tiny_disk / 'out' / 'gradients'}: first-step-gradients.json needs")
    assert [p.name for p in tiny_disk.iterdir()] == ["ballast"]

"""A run started by hand gets a folder of its own, named after the launch that every rank of it shares."""

import re
import subprocess
import sys

import pytest

from runtime import launch, run_folder
from tests.helpers import BIN, REPO, data_flags, read_results, run_module

# What a launcher's rank would compute, printed by a child of a process whose command line names the launcher.
CHILD = ("import os; from runtime.run_folder import DEFAULT, resolve; "
         "print(resolve(DEFAULT, 'horovod', 'horovodrun'), os.getppid(), os.getpid())")
PARENT = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {CHILD!r}], check=True)"


def test_a_named_output_dir_is_kept():
    assert run_folder.resolve("/data/run-7", "native", "torchrun") == "/data/run-7"


def test_every_rank_under_one_launcher_names_the_launcher_s_folder(tmp_path):
    """Two ranks (children) of one launcher agree; another launch of the same command gets another folder."""
    launcher = tmp_path / "horovodrun"  # run as `python …/horovodrun`, as horovodrun's own process is
    launcher.write_text(f"{PARENT}; subprocess.run([sys.executable, '-c', {CHILD!r}], check=True)\n")

    def launch() -> list[str]:
        done = subprocess.run([sys.executable, str(launcher), "-np", "2"], cwd=REPO, capture_output=True, text=True,
                              check=True, timeout=60)
        return done.stdout.split()

    first, second = launch(), launch()  # each: folder, launcher pid, own pid, for two ranks
    assert first[0] == first[3] and second[0] == second[3] and first[0] != second[0]
    assert re.fullmatch(rf"results/\d{{8}}-\d{{6}}-horovod-horovodrun-{first[1]}", first[0]), first


def test_a_launcher_is_what_a_process_runs_not_what_its_command_text_mentions():
    assert [launch.program(cmdline) for cmdline in (
        ["/v/bin/python3", "/v/bin/horovodrun", "-np", "2", "python", "-m", "horovod_ddp.train"],
        ["/v/bin/python", "-u", "/v/bin/torchrun", "--standalone"],
        ["python3.11", "-m", "torch.distributed.run", "x.py"],
        ["/v/bin/python", "-m", "native_ddp.spawn", "--workers", "2"],
        ["bash", "-c", "make test; python -m ray_jobs.compare --launchers ray,horovodrun"],
        ["/v/bin/python", "-c", "print(1)", "horovodrun"],
    )] == ["horovodrun", "torchrun", "torch.distributed.run", "native_ddp.spawn", "bash", ""]


def test_without_a_launcher_the_process_names_its_own_folder():
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, capture_output=True, text=True, check=True,
                          timeout=60)
    folder, _, pid = done.stdout.split()
    assert re.fullmatch(rf"results/\d{{8}}-\d{{6}}-horovod-horovodrun-{pid}", folder), folder


@pytest.mark.cluster
def test_horovodrun_then_torchrun_by_hand_keep_their_results_apart(base_cfg, tmp_path):
    """The two hand-run launchers, both with the default --output-dir, from one working directory."""
    flags = [*data_flags(base_cfg), "--epochs", "1", "--max-steps-per-epoch", "8"]
    horovod = run_module("horovod_ddp.train", *flags, launcher=(str(BIN / "horovodrun"), "-np", "2", "--gloo"),
                         cwd=tmp_path, timeout=300)
    native = subprocess.run([str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", "-m",
                             "native_ddp.train", *flags], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    folders = sorted((tmp_path / "results").iterdir())
    assert [f.name.split("-")[2:4] for f in folders] == [["horovod", "horovodrun"], ["native", "torchrun"]], folders
    for result, folder in ((horovod, folders[0]), (native, folders[1])):
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert f"output: results/{folder.name}" in result.stdout
        assert read_results(folder)["backend"] == folder.name.split("-")[2]

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


def test_two_commands_started_in_one_second_get_two_folders(tmp_path):
    first, second = (run_folder.new_folder(tmp_path, "20261123-081500") for _ in range(2))
    assert (first.name, second.name) == ("20261123-081500", "20261123-081500-2")


def test_a_folder_another_command_writes_is_refused_naming_it_and_nothing_is_made(tmp_path):
    from contract.config import ConfigError
    from runtime import folder_lock

    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.path.insert(0, sys.argv[2]); "
                               "from runtime import folder_lock; from pathlib import Path; "
                               "folder_lock.hold(Path(sys.argv[1]), '--resume'); print('held', flush=True); "
                               "time.sleep(60)", str(tmp_path), str(REPO)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(ConfigError, match=rf"--resume {tmp_path} is being written by another command "
                                              rf"\(PID {holder.pid}\); one command writes a folder at a time"):
            folder_lock.hold(tmp_path, "--resume")
        assert not list(tmp_path.iterdir())
    finally:
        holder.kill()
        holder.wait()
    folder_lock.hold(tmp_path, "--resume")  # the holder gone, its lock went with it
    folder_lock.hold(tmp_path, "--resume")  # and this process holds it once, however often it asks


def test_a_filesystem_without_flock_warns_and_goes_on(tmp_path, monkeypatch, caplog):
    import errno
    import fcntl

    from runtime import folder_lock

    def refuses(fd, how):
        raise OSError(errno.EBADF, "Bad file descriptor")  # NFS: POSIX locks on a directory opened read-only

    monkeypatch.setattr(fcntl, "flock", refuses)
    folder_lock.hold(tmp_path / "..", "--resume")
    assert "cannot be locked on its filesystem" in caplog.text

"""Which rank stalled, from the ranks' heartbeats (runtime/heartbeats.py): no process, no cluster."""

import os
import time
from pathlib import Path

import pytest

from runtime import heartbeats
from workload.watchdog import Watchdog


def _beat(out, rank: int, age_s: float) -> None:
    heartbeats.beat(str(out), rank, make=True)
    then = time.time() - age_s
    os.utime(heartbeats.folder(str(out)) / f"rank{rank}", (then, then))


def test_the_quiet_peer_is_named_and_a_live_one_is_not(tmp_path):
    _beat(tmp_path, 0, 0)
    _beat(tmp_path, 1, 12)
    _beat(tmp_path, 2, 1)
    assert heartbeats.quiet_peers(str(tmp_path), 0, 3).keys() == {1}
    assert heartbeats.who_stalled(heartbeats.quiet_peers(str(tmp_path), 0, 3)) == \
        "no sign of life from rank 1 (12 s): stopped, frozen or gone"
    # Another host's peer, without a shared folder, has no file: nothing is claimed about it.
    assert heartbeats.who_stalled(heartbeats.quiet_peers(str(tmp_path), 0, 4)).startswith(
        "no sign of life from rank 1 (")
    assert heartbeats.who_stalled(heartbeats.quiet_peers(str(tmp_path), 1, 3)) == "a peer has stalled or died"


def test_nothing_is_made_outside_an_output_folder_that_does_not_exist(tmp_path):
    assert not heartbeats.beat(str(tmp_path / "not-yet"), 0, make=True)
    assert not (tmp_path / "not-yet").exists()


def test_the_driver_takes_the_line_and_the_folder_goes(tmp_path):
    _beat(tmp_path, 0, 0)
    heartbeats.leave(str(tmp_path), "rank 0 made no progress for 10 s while training")
    assert heartbeats.take(str(tmp_path)) == "rank 0 made no progress for 10 s while training"
    assert not heartbeats.folder(str(tmp_path)).exists()
    assert heartbeats.take(str(tmp_path)) == ""


def test_a_rank_that_ends_removes_its_file_and_the_last_the_folder(tmp_path):
    _beat(tmp_path, 0, 0)
    _beat(tmp_path, 1, 0)
    heartbeats.gone(str(tmp_path), 0)
    assert heartbeats.folder(str(tmp_path)).exists()
    heartbeats.gone(str(tmp_path), 1)
    assert not heartbeats.folder(str(tmp_path)).exists()



def test_a_rank_s_beats_do_not_bring_back_a_folder_a_stall_removed(tmp_path):
    watchdog = Watchdog(0, str(tmp_path))  # 0: no thread; _beat is what its loop does each second
    watchdog.joined(1, 2)
    watchdog._beat()
    assert (heartbeats.folder(str(tmp_path)) / "rank1").exists()
    heartbeats.leave(str(tmp_path))  # rank 0's stall ended the run and removed the folder
    watchdog._beat()
    watchdog._beat()
    assert not heartbeats.folder(str(tmp_path)).exists()


def test_a_sigterm_after_the_second_step_is_never_taken_for_the_start_up(tmp_path):
    """Rank 0 makes the output folder as training starts: by the second step every rank has beaten and seen its
    peers, whenever the watchdog's thread beats next."""
    out = tmp_path / "out"
    watchdog = Watchdog(0, str(out))  # 0: no thread
    watchdog.joined(0, 2)
    assert watchdog.signalled_with_peers() is None  # joined before there was a folder: start-up
    out.mkdir()  # rank 0's training starts
    watchdog.after_step(1, 1, 30)
    heartbeats.beat(str(out), 1, make=True)  # rank 1's first step, before the second's collective
    watchdog.after_step(1, 2, 30)
    assert watchdog.signalled_with_peers() is True  # rank 1 runs (its file holds this process's pid)


def test_a_peer_that_left_on_a_passed_on_sigterm_is_no_lost_peer(tmp_path):
    """horovodrun passes SIGTERM on one rank at a time: rank 1's collective fails as rank 0 leaves on it, before rank
    1's own arrives. A peer that died without one is still a lost peer."""
    watchdog = Watchdog(0, str(tmp_path))  # 0: no thread
    watchdog.joined(1, 2)
    heartbeats.beat(str(tmp_path), 0, make=True)
    watchdog.after_step(1, 1, 30)
    assert not watchdog.left_on_a_signal()  # rank 0 runs, unsignalled: no passed-on signal to speak of
    heartbeats.mark_signalled(str(tmp_path), 0)
    assert watchdog.left_on_a_signal()
    assert not heartbeats.folder(str(tmp_path)).exists()  # rank 1, last to count as signalled, removed the files

    watchdog = Watchdog(0, str(tmp_path / "died"))
    (tmp_path / "died").mkdir()
    watchdog.joined(1, 3)
    for rank in (0, 2):
        heartbeats.beat(str(tmp_path / "died"), rank, make=True)
    watchdog.after_step(1, 1, 30)
    heartbeats.mark_signalled(str(tmp_path / "died"), 0)  # the launcher ending the others after rank 2 died
    (heartbeats.folder(str(tmp_path / "died")) / "rank2").unlink()
    assert not watchdog.left_on_a_signal()


def test_a_launcher_passing_sigterm_on_is_told_from_one_ending_the_ranks_after_a_death(tmp_path):
    import subprocess
    import sys

    for rank in range(3):
        heartbeats.beat(str(tmp_path), rank, make=True)  # each file holds this process's pid: all running
    seen = heartbeats.present(str(tmp_path), 3)
    assert seen == {0, 1, 2} and heartbeats.ended_first(str(tmp_path), 0, 3, seen) == []
    # A peer whose process has ended without SIGTERM reaching it died first; one signalled too did not.
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (heartbeats.folder(str(tmp_path)) / "rank2").write_text(ended.stdout.strip())
    assert heartbeats.ended_first(str(tmp_path), 0, 3, seen) == [2]
    (heartbeats.folder(str(tmp_path)) / "rank2").write_text(f"{ended.stdout.strip()} {heartbeats.SIGNALLED}")
    assert heartbeats.ended_first(str(tmp_path), 0, 3, seen) == []
    # A peer whose file was seen and is gone ended and removed it; one never seen has not beaten yet (a SIGTERM to
    # mp.spawn within a second of the output folder's making).
    (heartbeats.folder(str(tmp_path)) / "rank1").unlink()
    assert heartbeats.ended_first(str(tmp_path), 0, 3, seen) == [1]
    assert heartbeats.ended_first(str(tmp_path), 0, 3, {0, 2}) == []
    heartbeats.beat(str(tmp_path), 1, make=True)
    for rank in (0, 1):
        assert not heartbeats.every_rank_signalled(str(tmp_path), 3)
        heartbeats.mark_signalled(str(tmp_path), rank)
    assert heartbeats.every_rank_signalled(str(tmp_path), 3)
    # The last signalled rank removed the folder: a rank reading after that was signalled with the others.
    heartbeats.leave(str(tmp_path))
    assert heartbeats.ended_first(str(tmp_path), 1, 3, seen) == []


def test_a_peer_reading_the_files_as_the_last_signalled_rank_removes_them_claims_no_death(tmp_path, monkeypatch):
    """Both ranks signalled at once: rank 0, last to mark itself, removes the folder while rank 1 reads rank 0's
    file: rank 1 must not claim a lost peer."""
    out = str(tmp_path)
    for rank in (0, 1):
        heartbeats.beat(out, rank, make=True)
        heartbeats.mark_signalled(out, rank)
    real = Path.read_text

    def removed_as_read(path: Path, *args, **kwargs) -> str:
        if path.name == "rank0":
            heartbeats.leave(out)  # rank 0 found every rank signalled
        return real(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", removed_as_read)
    assert heartbeats.ended_first(out, 1, 2, {0, 1}) == []
    assert not heartbeats.folder(out).exists() and os.listdir(out) == []


def test_a_stall_the_group_s_timeout_named_first_keeps_its_line_when_the_bound_runs_out(tmp_path, monkeypatch, capsys):
    # Ray sets the group's timeout to the stall bound, so the main thread may name the stall as the watchdog fires.
    def exit_(code: int) -> None:
        raise SystemExit(code)

    monkeypatch.setattr(os, "_exit", exit_)
    watchdog = Watchdog(10, str(tmp_path), report=True)  # not entered: no thread; _fire is what it does at the bound
    watchdog.joined(0, 2)
    _beat(tmp_path, 1, 12)
    line = watchdog.named_stall()
    assert line.startswith("rank 0 made no progress for ") and "no sign of life from rank 1 (12 s)" in line
    assert watchdog.phase == "leaving after the stall"  # a whole bound to leave in before the watchdog fires
    with pytest.raises(SystemExit):
        watchdog._fire()
    assert capsys.readouterr().err == "" and heartbeats.take(str(tmp_path)) == line
    # Unnamed, the watchdog says the line itself and leaves it for the driver.
    watchdog = Watchdog(10, str(tmp_path), report=True)
    watchdog.joined(0, 2)
    _beat(tmp_path, 1, 12)
    with pytest.raises(SystemExit):
        watchdog._fire()
    assert capsys.readouterr().err.startswith("error: rank 0 made no progress for ")
    assert "no sign of life from rank 1 (12 s)" in heartbeats.take(str(tmp_path))


def test_a_ray_worker_the_kernel_or_ray_killed_for_memory_is_named_as_memory():
    """Under Ray it read "WorkerHealthCheckFailedError: A worker health check failed", or "died (killed, out of
    memory, or crashed)": the driver counts the kernel's kills from the run's start (runtime/memory.py), and Ray's
    memory monitor raises its own error."""
    from ray.exceptions import OutOfMemoryError, RayActorError

    from launchers.ray_failures import RayRunOptions, worker_failure
    from runtime import memory

    oom = memory.killed_since(-1)
    assert oom and oom.startswith("the kernel's out-of-memory killer ended") and memory.killed_since(None) is None
    assert str(worker_failure(RayActorError(), RayRunOptions(), "rerun", oom)) == f"a Ray worker died: {oom}; rerun"
    assert "died (its process exited" in str(worker_failure(RayActorError(), RayRunOptions(), "rerun"))
    assert "ended by Ray's memory monitor: memory ran out on its node" in str(
        worker_failure(OutOfMemoryError("low memory"), RayRunOptions(), "rerun"))


def test_a_stall_after_the_last_epoch_is_said_to_be_in_the_finish_not_in_training(tmp_path):
    watchdog = Watchdog(30, str(tmp_path))  # not entered: no thread
    watchdog.epoch_done(1)
    assert "while training (--stall-timeout-s 30)" in watchdog._line({})
    watchdog.fit_done()
    assert "while finishing, after its last epoch" in watchdog._line({})

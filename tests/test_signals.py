"""Ctrl-C and SIGTERM end a command in one line with 130 or 143, once what it started is torn down: its private Ray
(no process left, its folder removed); a comparison says which of its runs had finished."""

import contextlib
import glob
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from contract.comparison import CompareConfig
from ray_jobs import orchestrator
from tests.helpers import BIN, REPO, data_flags

PRIVATE_RAY = "/tmp/ray-ddp-vs-horovod-*"  # cluster/ray_cluster.py's folder for a Ray of the command's own


SIGNALS = [
    (signal.SIGINT, 130, "error: interrupted (Ctrl-C) before the command finished; a run that had not finished "
                         "wrote no result"),
    (signal.SIGTERM, 143, "error: ended by SIGTERM before the command finished; a run that had not finished wrote "
                          "no result"),
]


def _private_rays() -> set[str]:
    """The private Ray folders on the machine, the processes that name one, the folder gone or not, and Python's
    multiprocessing folders (Ray's dashboard makes one)."""
    prefix = PRIVATE_RAY.rstrip("*")
    processes = {str(p.pid) for p in psutil.process_iter(["cmdline"])
                 if any(prefix in arg for arg in p.info["cmdline"] or [])}
    return set(glob.glob(PRIVATE_RAY)) | processes | set(glob.glob(os.path.join(tempfile.gettempdir(), "pymp-*")))


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _on_its_own_ray(base_cfg, tmp_path) -> subprocess.Popen:
    """`ray_jobs.train` on a Ray of its own, as a user's first run, started."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(PATH=f"{BIN}{os.pathsep}{env['PATH']}", RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "ray_jobs.train", "--workers", "1", "--epochs", "100",
                             *data_flags(base_cfg), "--output-dir", str(tmp_path / "out")],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _training_on_its_own_ray(base_cfg, tmp_path) -> subprocess.Popen:
    """`_on_its_own_ray`, once its first training line is out."""
    run = _on_its_own_ray(base_cfg, tmp_path)
    seen = ""
    while "Step [" not in seen:  # training has begun: an event, each line bounded
        assert select.select([run.stdout], [], [], 180)[0], "no training line within 180 s"
        seen = run.stdout.readline()
        assert seen, run.stderr.read()[-3000:]
    return run


def _signalled(run: subprocess.Popen, signum: int) -> str:
    """Send `signum` as it comes in life; its stderr once it has ended (killed if it outlives the bound)."""
    try:
        # Ctrl-C reaches the terminal's whole process group; a scheduler's SIGTERM the command alone.
        os.killpg(run.pid, signum) if signum == signal.SIGINT else run.send_signal(signum)
        return run.communicate(timeout=120)[1]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)


@pytest.mark.cluster
@pytest.mark.parametrize("signum, code, line", SIGNALS, ids=["ctrl-c", "sigterm"])
def test_a_signal_during_training_ends_the_run_in_one_line_and_tears_its_ray_down(base_cfg, tmp_path, signum, code,
                                                                                   line):
    before = _private_rays()
    run = _training_on_its_own_ray(base_cfg, tmp_path)
    # Its Ray's daemons in a session of their own: a signal to the command's process group reaches the driver alone
    # (the raylet ending beside it had the driver's core worker exit 1 without a line).
    daemons = [p for p in psutil.Process(run.pid).children() if "ray" in " ".join(p.cmdline())]
    assert daemons and all(os.getsid(p.pid) != os.getsid(run.pid) for p in daemons), daemons
    err = _signalled(run, signum)
    assert (run.returncode, err.strip()) == (code, line), err[-3000:]
    # Its Ray's session is killed as the command exits; a worker the raylet forked meanwhile outlives it briefly.
    deadline = time.monotonic() + 60
    while not _private_rays() <= before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _private_rays() <= before  # nothing of its own left (what was there may have gone)
    assert not (tmp_path / "out" / "results.json").exists()


@pytest.mark.cluster
@pytest.mark.parametrize("signum, code, line", SIGNALS, ids=["ctrl-c", "sigterm"])
def test_a_signal_while_its_ray_starts_is_one_line_and_leaves_no_ray(base_cfg, tmp_path, signum, code, line):
    """Sent once the command's Ray folder exists, as ray.init starts it. Seen: exit 15 and no line (Ray's handler);
    then, 1 in 12, the signal swallowed inside ray.init and the run training on with logging's lock held."""
    before = _private_rays()
    run = _on_its_own_ray(base_cfg, tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not set(glob.glob(PRIVATE_RAY)) - before:  # its folder: ray.init comes next (an event, bounded)
            assert run.poll() is None and time.monotonic() < deadline, "no Ray folder within 120 s"
            time.sleep(0.02)
    except BaseException:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        raise
    err = _signalled(run, signum)
    assert (run.returncode, err.strip()) == (code, line), err[-3000:]
    deadline = time.monotonic() + 60  # its reaper stops that Ray once the command has gone
    while not _private_rays() <= before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _private_rays() <= before  # nothing of its own left (what was there may have gone)


@pytest.mark.cluster
def test_a_driver_killed_with_sigkill_leaves_no_ray_behind(base_cfg, tmp_path):
    """SIGKILL runs nothing of the command's: its Ray's session, which reads a pipe the command held, ends itself and
    removes the folder (cluster/own_ray.py)."""
    before = _private_rays()
    run = _training_on_its_own_ray(base_cfg, tmp_path)
    run.kill()
    run.communicate(timeout=60)
    deadline = time.monotonic() + 60  # the reaper's stop waits up to STOP_WAIT_S per straggler
    while not _private_rays() <= before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _private_rays() <= before  # nothing of its own left (what was there may have gone)
    assert not (tmp_path / "out" / "results.json").exists()


def test_an_interrupted_comparison_says_which_runs_had_finished(base_cfg, tmp_path, monkeypatch):
    record = {"status": "ok", "launcher": "local", "final": {"test_accuracy": 0.9}}
    calls = []

    def run_one(*args, **kwargs):
        calls.append(args)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return record

    monkeypatch.setattr(orchestrator, "run_one", run_one)
    with pytest.raises(KeyboardInterrupt, match=r"^1 run\(s\) of this comparison had finished, the next had not; "
                                                 rf"their folders stay in {tmp_path}/cmp$"):
        orchestrator.compare(base_cfg, CompareConfig(parity_steps=10, target_accuracy=0.9, backends="native",
                                                     launchers="torchrun", no_ceiling=True), tmp_path, run_id="cmp")


def _command(main_body: str) -> subprocess.Popen:
    """A command built as the entry points are (`cli.run(main)`, main defined in __main__), its main's body given."""
    code = "\n".join(["import atexit, os, signal, time", "from runtime import cli", "def main():",
                      *(f"    {line}" for line in main_body.strip().splitlines()), "cli.run(main)"])
    return subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})


WAITING_FOR_A_SIGNAL = """
try:
    print("ready")
    while True:
        time.sleep(0.01)
finally:"""
"""A main's body up to the `finally` the unwinding runs; the test gives that block's body."""


def _signalled_once_ready(command: subprocess.Popen, signum: int) -> tuple[str, str]:
    assert select.select([command.stdout], [], [], 60)[0], "not ready within 60 s"
    assert command.stdout.readline() == "ready\n"
    command.send_signal(signum)
    out, err = command.communicate(timeout=60)
    return out, err


@pytest.mark.parametrize("signum, code, line", SIGNALS, ids=["ctrl-c", "sigterm"])
def test_the_signal_s_second_copy_does_not_cut_the_teardown_short(signum, code, line):
    """`timeout` signals the command, then its process group: the copy arrived during the unwinding once in 18 tries,
    and ended it with 130 after the SIGTERM line."""
    command = _command(WAITING_FOR_A_SIGNAL + """
    os.kill(os.getpid(), signal.Signals(%d))  # the copy
    time.sleep(0.2)
    print("torn down")
""" % signum)
    out, err = _signalled_once_ready(command, signum)
    assert (command.returncode, err.strip(), out) == (code, line, "torn down\n")


@pytest.mark.parametrize("signum, code, line", SIGNALS, ids=["ctrl-c", "sigterm"])
def test_what_the_unwinding_raises_is_said_as_the_signal_not_as_a_traceback(signum, code, line):
    """Seen: a SIGTERM during numpy's import, then its half-imported module's AttributeError: a traceback, exit 1."""
    command = _command(WAITING_FOR_A_SIGNAL + """
    raise AttributeError("module 'numpy' has no attribute 'subtract'")
""")
    _, err = _signalled_once_ready(command, signum)
    assert (command.returncode, err.strip()) == (code, line)


@pytest.mark.parametrize("signum, code, line", SIGNALS, ids=["ctrl-c", "sigterm"])
def test_a_signal_between_its_ray_s_folder_and_its_session_leaves_no_folder(tmp_path, signum, code, line):
    """The signal lands while the ports are chosen: after the folder is made, before the session that removes it
    exists. The command ends once that session runs, and the session removes the folder."""
    prefix = f"ray-held-{tmp_path.name}-"
    fake = tmp_path / "ray"
    fake.write_text("#!/bin/sh\nexec sleep 600\n")
    fake.chmod(0o755)
    command = _command(f"""
from cluster import own_ray
port = own_ray.free_port
def signalled_port():
    os.kill(os.getpid(), signal.Signals({signum:d}))
    return port()
own_ray.program, own_ray.free_port = (lambda: {str(fake)!r}), signalled_port
own_ray.OwnRay(prefix={prefix!r})
print("not reached")
""")
    try:
        out, err = command.communicate(timeout=60)
        assert (command.returncode, err.strip(), out) == (code, line, "")
        deadline = time.monotonic() + 10  # its session's leader removes the folder once the command's pipe has closed
        while glob.glob(f"/tmp/{prefix}*"):
            assert time.monotonic() < deadline, "the folder outlived the command by 10 s"
            time.sleep(0.05)
    finally:
        if command.poll() is None:
            command.kill()
        for left in glob.glob(f"/tmp/{prefix}*"):
            shutil.rmtree(left)


@pytest.mark.parametrize("signum, code, line", SIGNALS, ids=["ctrl-c", "sigterm"])
def test_a_signal_inside_a_held_step_ends_the_command_once_the_step_is_done(signum, code, line):
    command = _command("""
from runtime import signals
with signals.held():
    os.kill(os.getpid(), signal.Signals(%d))
    time.sleep(0.2)
    print("step done")
print("not reached")
""" % signum)
    out, err = command.communicate(timeout=60)
    assert (command.returncode, err.strip(), out) == (code, line, "step done\n")


@pytest.mark.parametrize("signum, code, line", SIGNALS, ids=["ctrl-c", "sigterm"])
def test_a_signal_inside_a_held_step_that_fails_ends_the_command_as_the_signal(signum, code, line):
    command = _command("""
from runtime import signals
try:
    with signals.held():
        os.kill(os.getpid(), signal.Signals(%d))
        raise OSError("the step failed")
except OSError:
    print("not reached")
""" % signum)
    out, err = command.communicate(timeout=60)
    assert (command.returncode, err.strip(), out) == (code, line, "")


@pytest.mark.parametrize("signum, code, name", [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")],
                         ids=["ctrl-c", "sigterm"])
def test_a_signal_during_the_teardown_lets_it_finish_and_is_said(signum, code, name):
    """The teardown (a private Ray's stop) runs at exit: a signal raised there was Python's "Exception ignored in
    atexit callback" traceback, the teardown cut short, and exit 0."""
    command = _command("""
def teardown():
    os.kill(os.getpid(), signal.Signals(%d))
    time.sleep(0.2)
    print("torn down")
atexit.register(teardown)
""" % signum)
    out, err = command.communicate(timeout=60)
    assert (command.returncode, out) == (code, "torn down\n"), err
    assert err == f"error: {name} arrived while the command was stopping, its work done; what it wrote stands\n"


def test_stopping_a_private_ray_ends_every_process_of_its_session_and_no_other(tmp_path, monkeypatch):
    """Ray's workers make process groups of their own, and Ray rewrites its agents' command lines
    (`ray::DashboardAgent`): a stop by process group or by command line left two agents with parent 1 for about 60 s,
    5 tries of 5. The session they all share is what the stop ends."""
    from cluster import own_ray

    fake = tmp_path / "ray"  # a `ray start` whose "worker" leaves its process group, as Ray's do
    worker = "import os, time; os.setpgrp(); print(os.getpid(), flush=True); time.sleep(600)"
    fake.write_text(f"#!/bin/sh\npython3 -c '{worker}' >{tmp_path}/worker &\necho '{own_ray.STARTED}'\nwait\n")
    fake.chmod(0o755)
    monkeypatch.setattr(own_ray, "program", lambda: str(fake))
    bystander = subprocess.Popen(["sleep", "600"])
    own = own_ray.OwnRay(prefix="ray-test-")
    try:
        own.wait_started()
        deadline = time.monotonic() + 30
        while not ((tmp_path / "worker").exists() and (tmp_path / "worker").read_text().strip()):  # an event
            assert time.monotonic() < deadline, "no worker within 30 s"
            time.sleep(0.05)
        worker = int((tmp_path / "worker").read_text())
        assert os.getpgid(worker) == worker and os.getsid(worker) == own.session.pid
        own.stop()
        deadline = time.monotonic() + 10  # killed with SIGKILL by the session's leader: gone once scheduled
        while not _gone(worker):
            assert time.monotonic() < deadline, "the worker outlived the stop"
            time.sleep(0.05)
        assert bystander.poll() is None and not own.folder.exists()
    finally:
        bystander.kill()
        own.stop()


@pytest.mark.parametrize("signum, code, line", SIGNALS, ids=["ctrl-c", "sigterm"])
def test_a_signal_while_ray_init_waits_in_c_ends_the_command_and_its_ray(tmp_path, signum, code, line):
    """ray.init waits in C++ on its GCS, where no Python handler runs: ~30 s when the signal had ended that GCS too
    (`timeout` and Ctrl-C signal the whole process group). Here ray.init waits in C (a sleep, its thread deaf to
    both signals) beside the command's own Ray (a `ray start` whose agent is a sleep in that Ray's session)."""
    fake = tmp_path / "ray"
    fake.write_text(f"#!/bin/sh\nsleep 600 &\necho $! >{tmp_path}/agent\necho 'Ray runtime started'\nwait\n")
    fake.chmod(0o755)
    command = _command(f"""
import atexit, types
from cluster import own_ray, ray_cluster
own_ray.program = lambda: {str(fake)!r}
own = own_ray.OwnRay()
atexit.register(ray_cluster._stop_own, own)
own.wait_started()
print(own.folder)

def init(*args, **kwargs):
    signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGTERM, signal.SIGINT}})
    time.sleep(600)

ray_cluster._init(types.SimpleNamespace(init=init), None, {{}})
""")
    agent, folder = 0, None
    try:
        assert select.select([command.stdout], [], [], 60)[0], "not ready within 60 s"
        folder = command.stdout.readline().strip()
        agent = int((tmp_path / "agent").read_text())
        time.sleep(0.5)  # in ray.init's wait
        command.send_signal(signum)
        _, err = command.communicate(timeout=60)  # without the thread: 600 s
    finally:
        command.kill()
        if agent:
            with contextlib.suppress(ProcessLookupError):
                os.kill(agent, signal.SIGKILL)
    assert (command.returncode, err.strip()) == (code, line)
    assert folder and not os.path.exists(folder)
    assert not psutil.pid_exists(agent) or psutil.Process(agent).status() == psutil.STATUS_ZOMBIE


@pytest.mark.parametrize("signum, code, line", SIGNALS, ids=["ctrl-c", "sigterm"])
def test_a_signal_that_python_swallows_in_a_finalizer_still_ends_the_command(signum, code, line):
    """Seen: a SIGTERM while compare wrote its report, raised inside a weakref callback: Python's "Exception ignored in"
    traceback, no line, and the command still running 10 s later."""
    command = _command("""
class Slow:
    def __del__(self):
        print("ready", flush=True)
        time.sleep(1)

Slow()
time.sleep(30)
""")
    out, err = _signalled_once_ready(command, signum)
    assert (command.returncode, err.strip()) == (code, line), err


@pytest.mark.faults
def test_its_own_ray_node_killed_under_a_run_is_one_line_naming_the_node(base_cfg, tmp_path):
    """The raylet of the command's own Ray, killed mid-training: one line naming the node, not a worker, and none of
    the driver's C++ lines (they go to ray.log); nothing of that Ray left."""
    before = _private_rays()
    run = _training_on_its_own_ray(base_cfg, tmp_path)
    raylets = [p for p in psutil.Process(run.pid).children(recursive=True) if p.name() == "raylet"]
    assert raylets, [p.name() for p in psutil.Process(run.pid).children(recursive=True)]
    raylets[0].kill()
    try:
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    ours = [line for line in err.splitlines() if line.startswith("error: ")]
    assert run.returncode not in (0, 2) and len(ours) == 1, err[-3000:]
    assert "the Ray node this run used went away" in ours[0], ours
    assert "core_worker" not in err and "Traceback" not in err, err[-3000:]
    deadline = time.monotonic() + 60
    while not _private_rays() <= before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _private_rays() <= before


TIED = """import sys
from runtime import tied
sys.exit(tied.run(["sh", "-c", "sleep 300 & sleep 301; exit 3"]))
"""


def test_a_tied_command_and_all_it_started_end_with_a_sigkilled_parent_and_keep_their_exit_code(tmp_path):
    # A killed build's pip, cmake and nvcc: the command's own children, however deep, end with the process it serves.
    parent = subprocess.Popen([sys.executable, "-c", TIED], cwd=REPO, start_new_session=True)
    sleeps: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 60
        while len(sleeps := _sleeps(parent.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(sleeps) == 2, sleeps
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        # its own wait: a busy machine may have spent the first on the start
        _, alive = psutil.wait_procs(sleeps, timeout=30)
        assert not alive, alive
    finally:
        parent.kill()
        for sleep in sleeps:
            with contextlib.suppress(psutil.Error):
                sleep.kill()
    from runtime import tied

    assert tied.run(["sh", "-c", "exit 7"]) == 7


TIED_FOLDER = """import sys, time
from runtime import tied
with tied.folder("tied-test-", sys.argv[1]) as made:
    (made / "data").mkdir()
    print(made, flush=True)
    time.sleep(300)
"""


def test_a_tied_folder_goes_with_the_block_and_with_a_sigkilled_process(tmp_path):
    """Seen: a SIGKILLed add_references or first_step_gradients left its scratch folder in the system's temp folder."""
    parent = subprocess.Popen([sys.executable, "-c", TIED_FOLDER, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    made = Path(parent.stdout.readline().strip())
    assert made.parent == tmp_path and (made / "data").is_dir()
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 30
    while made.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(tmp_path.iterdir())
    from runtime import tied

    with tied.folder("tied-test-", tmp_path) as made:
        (made / "file").write_text("x")
    assert not any(tmp_path.iterdir())


@pytest.mark.cluster
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_first_step_gradients_ends_with_a_signal_and_leaves_no_rank_and_no_folder(sig, tmp_path):
    """Seen: SIGTERM 300 s in did not end it, and SIGKILL left torchrun and its ranks running and its temporary folder
    in the system's."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    tool = subprocess.Popen([sys.executable, "tools/first_step_gradients.py", "--workers", "2", "--model", "convnet",
                             "--output", str(tmp_path / "out")], cwd=REPO, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(REPO)}, start_new_session=True)
    deadline = time.monotonic() + 240
    while not _ranks():
        assert tool.poll() is None and time.monotonic() < deadline, tool.stderr.read()
        time.sleep(0.2)
    os.kill(tool.pid, sig)
    err = tool.communicate(timeout=60)[1]
    if sig == signal.SIGTERM:
        assert tool.returncode == 143 and [line for line in err.splitlines() if line.strip()] == [
            "error: ended by SIGTERM before the command finished; a run that had not finished wrote no result"], err
    deadline = time.monotonic() + 60
    while (_ranks() or any(temp.iterdir())) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _ranks() and not any(temp.iterdir()) and not (tmp_path / "out").exists()


def _ranks() -> list[str]:
    return subprocess.run(["pgrep", "-f", "first_step_gradients_rank.py"], capture_output=True, text=True).stdout.split()


def _sleeps(parent: int) -> list[psutil.Process]:
    """TIED's two sleeps, found among `parent`'s own descendants: a `sleep 300` elsewhere on the host is not ours."""
    with contextlib.suppress(psutil.Error):
        return [p for p in psutil.Process(parent).children(recursive=True)
                if p.cmdline() in (["sleep", "300"], ["sleep", "301"])]
    return []

"""The newcomer's path: what a first run leaves on the machine, and docs/running.md's cluster block as pasted."""

import glob
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from contract import results
from tests.helpers import BIN, REPO, data_flags
from tests.helpers import assert_trained


def _footprint() -> set[str]:
    """What Ray leaves outside a run's output folder: its session folders, its processes' multiprocessing folders
    and Ray Train's run folders."""
    return {*glob.glob(os.path.join(tempfile.gettempdir(), "ray", "session_*")), *glob.glob("/tmp/ray-ddp-vs-horovod-*"),
            *glob.glob(os.path.join(tempfile.gettempdir(), "pymp-*")),
            *glob.glob(str(Path.home() / "ray_results" / "ray_train_run-*"))}


PROJECT_LINES = (
    r"dataset: .+",
    r"Ray's own lines: .+/ray\.log",
    r"Epoch \[\d+/\d+\], Step \[\d+/\d+\], Loss: [\d.]+",
    r"Epoch \[\d+/\d+\] done: .+ samples/s",
    r"native via ray: .+",  # the summary (contract/summary.py)
    r"epoch +train loss .+",
    r" +\d+ +[\d.]+ .+",
    r"final test accuracy .+",
    r"results: .+/results\.json",
)
RAY_LINES_ALLOWED: tuple[str, ...] = ()
"""Ray's lines a default run may still print: none."""


def _foreign(output: str) -> list[str]:
    """The lines of `output` that are neither the project's nor allowed Ray lines."""
    return [line for line in output.splitlines()
            if not any(re.fullmatch(pattern, line) for pattern in (*PROJECT_LINES, *RAY_LINES_ALLOWED))]


@pytest.mark.cluster
def test_a_default_run_on_its_own_local_ray_prints_our_lines_and_leaves_nothing_behind(ray_cluster, base_cfg,
                                                                                       tmp_path):
    # ray_cluster: another Ray on the machine, as on a shared workstation; this run starts one of its own.
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # no cluster to join: it starts its own
    env.update(PATH=f"{BIN}{os.pathsep}{env['PATH']}", RAY_USAGE_STATS_ENABLED="0")
    before = _footprint()
    done = subprocess.run([sys.executable, "-m", "ray_jobs.train", "--backend", "native", "--workers", "1",
                           "--epochs", "1", *data_flags(base_cfg), "--output-dir", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: os.umask(0o027))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # Our lines only, in order, without colour codes; Ray's, Ray Train's and gloo's went to the file it names.
    output = done.stdout + done.stderr
    assert "\x1b[" not in output and "Traceback" not in output, output[-3000:]
    assert _foreign(output) == [], output[-3000:]
    lines = output.splitlines()
    assert lines[0].startswith("dataset: ") and lines[-1].startswith("results: "), output
    last_epoch = max(i for i, line in enumerate(lines) if line.startswith("Epoch [1/1] done"))
    assert last_epoch < next(i for i, line in enumerate(lines) if line.startswith("native via ray")), output
    ray_log = (out / "ray.log").read_text()
    assert "RayTrainWorker pid=" in ray_log and "\x1b[" not in ray_log, ray_log[-3000:]
    assert "multiple active Ray instances" not in ray_log, ray_log[-3000:]  # Ray Train's cleaner found its Ray
    assert _footprint() - before == set()
    # Ray Train's folder for this run lived in the output folder while it ran, and went with the run.
    assert not (out / ".ray-train").exists()
    # Written as the umask says (0640 under 027), not with tempfile's private 0600.
    assert stat.S_IMODE((out / results.FILENAME).stat().st_mode) == 0o640
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.glob("events.out.tfevents.*")} == {0o640}


BLOCK_MARKER = "<!-- tests/test_newcomer.py runs the next block as pasted -->"


def cluster_block() -> str:
    """docs/running.md's cluster block, exactly as a user would paste it."""
    text = (REPO / "docs" / "running.md").read_text()
    after = text.split(BLOCK_MARKER, 1)[1]
    assert after.lstrip().startswith("```sh\n"), "the marker must sit right above a ```sh block"
    return after.split("```sh\n", 1)[1].split("```", 1)[0]


def _sandbox(home: Path, ray_tmp: Path) -> tuple[list[str], dict[str, str]]:
    """A throwaway machine for the block: its own network (loopback only), processes (so its `ray stop` stops only
    its Ray), home (~/.ray), temp root and Ray's; the venv first on PATH, as after `source .venv/bin/activate`."""
    env = {"PATH": f"{BIN}{os.pathsep}/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(home), "TMPDIR": str(ray_tmp),
           "RAY_TMPDIR": str(ray_tmp), "RAY_USAGE_STATS_ENABLED": "0", "LANG": "C.UTF-8"}
    return ["unshare", "--net", "--pid", "--fork", "--mount-proc"], env


@pytest.mark.cluster
@pytest.mark.parametrize("before", ["fresh machine", "after a local ray.init"])
def test_the_cluster_block_of_running_md_works_as_pasted(tmp_path, before):
    """After its first two lines the block stands where it would on either machine (a token in ~/.ray, token auth
    asked for): the whole block runs after a local ray.init, which wrote the token, and on a fresh machine its
    first two lines run, which must write one."""
    repo = tmp_path / "repo"  # the block writes results/ under the folder it runs in: a copy, not this checkout
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes((REPO / name).read_bytes())
    home, ray_tmp = tmp_path / "home", Path(tempfile.mkdtemp(prefix="rb-", dir="/tmp"))  # Ray's sockets: short
    home.mkdir()
    prefix, env = _sandbox(home, ray_tmp)
    script = "ip link set lo up\n"
    if before == "after a local ray.init":
        # What `make compare` leaves: a local Ray start writes ~/.ray/auth_token. And another Ray cluster runs on the
        # machine, recorded where Ray records clusters: the block must name its own.
        script += f"{sys.executable} -c 'import ray; ray.init(num_cpus=1); ray.shutdown()' >/dev/null 2>&1\n"
        script += "test -s ~/.ray/auth_token\n"
        script += (f"RAY_AUTH_MODE=token ray start --head --port 6400 --dashboard-port 8300 --num-cpus 0 "
                   f"--ray-client-server-port 9201 --dashboard-agent-listen-port 52400 --metrics-export-port 8400 "
                   f"--temp-dir {ray_tmp / 'other'} >/dev/null 2>&1\n")
    block = cluster_block()
    if before == "fresh machine":
        block = "".join(block.splitlines(keepends=True)[:2]) + "test -s ~/.ray/auth_token\n"
    try:
        done = subprocess.run([*prefix, "bash", "-e", "-c", script + block], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=400)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "AuthenticationError" not in output and "Traceback" not in output, output[-4000:]
    assert "multiple active Ray instances" not in output, output[-4000:]
    if before == "fresh machine":
        assert block.splitlines()[1].startswith("ray get-auth-token --generate"), block
        return
    # `ray job submit` of the user command: it waited for the job, printed the driver's lines, and the job trained.
    assert "dataset: synthetic digits" in output and "final test accuracy" in output, output[-4000:]
    assert_trained(results.read(repo / "results" / "ray-job" / results.FILENAME), 2, "ray")


HEAVY = ("torch", "ray", "horovod", "matplotlib")
HELP_PROBE = """
import runpy, sys
sys.argv = [sys.argv[1], "--help"]
try:
    runpy.run_module(sys.argv[0], run_name="__main__")
except SystemExit:
    pass
print("IMPORTED", *sorted(name for name in {heavy} if name in sys.modules))
"""


@pytest.mark.parametrize("entry", ["ray_jobs.train", "ray_jobs.compare", "native_ddp.train", "native_ddp.spawn",
                                   "horovod_ddp.train", "ray_jobs.bench", "ray_jobs.fault_trials"])
def test_help_imports_no_framework(entry):
    # What makes --help slow is importing torch, Ray, Horovod or matplotlib (2-4 s here); asserted on the imports,
    # not on a time, which on a loaded machine would measure the machine.
    done = subprocess.run([sys.executable, "-c", HELP_PROBE.format(heavy=HEAVY), entry], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "IMPORTED", done.stdout.splitlines()[-1]
    assert "`" not in done.stdout  # plain text, not Markdown
    assert "--dataset" not in done.stdout or "{auto,mnist,synthetic}" in done.stdout  # choices shown as choices


@pytest.mark.cluster
@pytest.mark.parametrize("how", ["| head -1", ">&-"], ids=["piped-into-head", "stdout-closed"])
def test_a_reader_that_goes_away_costs_no_traceback_and_no_result(base_cfg, tmp_path, how):
    """Seen: 84 (piped into head) and 109 (stdout closed) lines of logging's "--- Logging error ---" tracebacks."""
    out = tmp_path / "out"
    command = (f"{BIN / 'torchrun'} --standalone --nproc-per-node 1 -m native_ddp.train {' '.join(data_flags(base_cfg))} "
               f"--epochs 1 --max-steps-per-epoch 10 --output-dir {out} 2>{tmp_path / 'err'} {how}")
    done = subprocess.run(["bash", "-c", f"set -o pipefail; {command}"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    err = (tmp_path / "err").read_text()
    assert done.returncode == 0 and "Traceback" not in err and "Logging error" not in err, err[-3000:]
    assert (out / results.FILENAME).exists()


REFUSAL_PROBE = """
import runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_module(sys.argv[0], run_name="__main__")
except SystemExit:
    pass
print("IMPORTED", *sorted(name for name in {heavy} if name in sys.modules))
"""


@pytest.mark.parametrize("entry, argv, needle", [
    ("ray_jobs.train", ["--checkpoint-dir", "{tmp}"], "is not a readable checkpoint"),
    ("experiments.gpu_model.schedule_check", ["{tmp}"], "holds no comparison.json"),
], ids=["a-damaged-checkpoint", "a-folder-that-is-no-comparison"])
def test_a_refusal_that_reads_a_file_imports_no_framework(entry, argv, needle, tmp_path):
    """A refusal answers at once: torch, Ray and matplotlib are imported by the work, not by its checks."""
    (tmp_path / "checkpoint.pt").write_bytes(b"\x80 not a zip archive, as torch.save writes")
    done = subprocess.run([sys.executable, "-c", REFUSAL_PROBE.format(heavy=HEAVY), entry,
                           *[a.replace("{tmp}", str(tmp_path)) for a in argv]],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert needle in done.stderr and done.stderr.count("\n") == 1, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "IMPORTED", done.stdout[-2000:]

"""What the tests share that is not a fixture: running a command as a user types it, the project's data flags, the
one-line refusal they all check, a run's results, stopping a Ray of a test's own, and what a trained run looks like.
Fixtures live in conftest.py; no test module imports another."""

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import horovod_ddp.train
import native_ddp.spawn
import native_ddp.train
import ray_jobs.compare
import ray_jobs.gpu_check
import ray_jobs.train
import tools.first_step_gradients
from contract.config import TrainConfig
from runtime.launch import free_port

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# Small but not trivial: one epoch on 2 workers is 30 steps of 100 digits each.
TRAIN_SIZE, TEST_SIZE = 6000, 1000
__all__ = ["free_port"]


def run_command(command: list[str], env: dict[str, str] | None = None, timeout: float = 300,
                cwd: Path = REPO) -> subprocess.CompletedProcess:
    """Run `command` from the repository root (or `cwd`) with this venv first on PATH, as a user would type it."""
    full_env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run(command, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)


def run_module(module: str, *args: str, launcher: tuple[str, ...] = (), env: dict[str, str] | None = None,
               timeout: float = 300, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """`[launcher] python -m module args`."""
    return run_command([*launcher, sys.executable, "-m", module, *args], env=env, timeout=timeout, cwd=cwd)


def data_flags(cfg: TrainConfig) -> list[str]:
    return ["--dataset", "synthetic", "--data-dir", cfg.data_dir, "--synthetic-train-size", str(cfg.synthetic_train_size),
            "--synthetic-test-size", str(cfg.synthetic_test_size)]


def read_results(output_dir: Path) -> dict:
    from contract import results

    return results.read(output_dir / results.FILENAME)


def stop_ray(temp_dir: Path) -> None:
    """Stop a Ray that `ray start --temp-dir temp_dir` (or ray.init) started, by PID: `ray stop` stops every Ray on the
    host. Its daemons name the folder on their command lines; its workers and agents are their children."""
    import psutil

    own = [p for p in psutil.process_iter(["cmdline"]) if any(f"{temp_dir}" in arg for arg in p.info["cmdline"] or [])]
    family = {p.pid: p for p in own}
    for process in own:
        with contextlib.suppress(psutil.Error):
            family.update({child.pid: child for child in process.children(recursive=True)})
    for process in family.values():
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(list(family.values()), timeout=10)


def assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    """The contract for bad input: exit code 2, one line on stderr that names the fix, no traceback.

    Ray may log its own lines (connecting, authentication) before ours; ours is the only `error:` line, last."""
    assert result.returncode == 2, (result.returncode, result.stdout[-2000:], result.stderr[-2000:])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert errors == lines[-1:], result.stderr[-2000:]
    assert "Traceback" not in result.stderr + result.stdout
    for needle in needles:
        assert needle in errors[0], errors[0]


def dump(doc: dict) -> str:
    return json.dumps({k: v for k, v in doc.items() if k != "step_losses"}, indent=1)[:3000]


def assert_trained(doc: dict, workers: int, launcher: str, backend: str = "native") -> None:
    assert (doc["backend"], doc["launcher"], doc["workers"], doc["dataset"]) == (backend, launcher, workers, "synthetic")
    losses = doc["step_losses"]
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5, dump(doc)
    assert doc["final"]["test_accuracy"] > 0.90, dump(doc)
    assert doc["parameters_identical_across_ranks"] is True
    assert len(doc["peak_rss_mb_per_worker"]) == workers


ENTRY_POINTS = {
    "ray_jobs.train": ray_jobs.train.main,
    "ray_jobs.compare": ray_jobs.compare.main,
    "horovod_ddp.train": horovod_ddp.train.main,
    "native_ddp.train": native_ddp.train.main,  # as torchrun starts it (LOCAL_RANK set)
    "native_ddp.spawn": native_ddp.spawn.main,
    "ray_jobs.gpu_check": ray_jobs.gpu_check.main,
    "tools/first_step_gradients.py": tools.first_step_gradients.main,
}
SYNTHETIC = ["--dataset", "synthetic"]


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}

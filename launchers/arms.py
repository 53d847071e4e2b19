"""The launchers, in one layer: each arm is one backend under one launcher, started the way a user starts it.

- `ray`: native DDP through Ray Train's TorchTrainer, Horovod through horovod.ray.RayExecutor, from this driver
  (already joined to the cluster, as a long-lived driver or notebook is).
- `torchrun`: `torchrun --standalone --nproc-per-node N -m native_ddp.train`, the whole command, with
  TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (the setting under which torchrun's restarts work, see TORCHRUN_ENV).
- `mp.spawn`: `python -m native_ddp.spawn --workers N`, the classic DDP tutorials' torch.multiprocessing.spawn, the
  whole command.
- `horovodrun`: `horovodrun -np N --gloo python -m horovod_ddp.train`, the whole command.
- `local`: the single-process references (workload/reference.py).

Every arm returns its results.json with `phases` and `end_to_end_s` measured from the moment the launch began.
"""

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract import options, results
from contract.config import AA_SUFFIX, CEILING, OWN_LAUNCHERS, ConfigError, TrainConfig
from contract.errors import RunFailed
from launchers import on_ray
from launchers.ray_failures import RayRunOptions
from runtime import flags, launch, tied

log = logging.getLogger(__name__)
LOG = "launcher.log"
TORCHRUN_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
"""torchrun's shared rendezvous store outlives a restart and its keys carry no attempt number, so restarted ranks
can read the dead ranks' gloo addresses (Connection refused, or a hang in connectFullMesh; pytorch#135712). With
this, each attempt's ranks make a fresh store. native_ddp.train refuses --max-restarts without it."""
BACKEND_OF = {launcher: backend for backend, names in OWN_LAUNCHERS.items() for launcher in names}


@dataclass(frozen=True, slots=True)
class Arm:
    backend: str
    launcher: str
    twin: bool = False
    """The A/A twin: the same command as its arm, under a label of its own (compare --aa)."""
    ceiling: bool = False
    """The ceiling: this backend's ranks under this launcher, each training alone (--no-averaging)."""

    @property
    def label(self) -> str:
        """`native`, `horovod` (on Ray), `native/torchrun`, `native/mp.spawn`, `horovod/horovodrun`, `ceiling`,
        `ceiling/<launcher>`, or a reference's name; an A/A twin's ends in -aa."""
        name = CEILING if self.ceiling else self.backend
        label = name if self.launcher in ("ray", "local") else f"{name}/{self.launcher}"
        return label + (AA_SUFFIX if self.twin else "")


def for_backends(backends: list[str], launchers: list[str], aa: bool = False) -> list[Arm]:
    """Every backend on Ray, and each backend under its own launcher where that launcher was asked for; with `aa`,
    each of those arms' A/A twin after them."""
    compared = [Arm(backend, launcher) for launcher in launchers for backend in backends
                if launcher == "ray" or launcher in OWN_LAUNCHERS[backend]]
    return compared + ([Arm(arm.backend, arm.launcher, twin=True) for arm in compared] if aa else [])


def ceilings(backends: list[str], launchers: list[str]) -> list[Arm]:
    """One ceiling per launcher that runs a compared arm, launched as that launcher's arms are: on Ray through Ray
    Train's TorchTrainer (RayExecutor where only Horovod is compared), under torchrun and mp.spawn as native's ranks,
    under horovodrun as Horovod's."""
    out = []
    for launcher in launchers:
        if launcher == "ray":
            out.append(Arm("native" if "native" in backends else backends[0], launcher, ceiling=True))
        elif BACKEND_OF[launcher] in backends:
            out.append(Arm(BACKEND_OF[launcher], launcher, ceiling=True))
    return out


def check_available(launchers: list[str], backends: list[str]) -> None:
    """Refuse, before anything starts, a launcher that cannot run here or has no backend to run."""
    for launcher in launchers:
        if launcher == "ray":
            continue
        if BACKEND_OF[launcher] not in backends:
            raise ConfigError(f"--launchers {launcher} runs {BACKEND_OF[launcher]}, which --backends leaves out; add "
                              f"it or drop {launcher}")
        if shutil.which("setpriv") is None:
            raise ConfigError(f"--launchers {launcher}: `setpriv` (util-linux) is not on PATH here, which ends a "
                              f"launcher with the comparison; install util-linux, or leave {launcher} out")
        if launcher != "mp.spawn" and launch.executable(launcher) is None:  # mp.spawn is this Python's
            raise ConfigError(f"--launchers {launcher}: `{launcher}` is not on PATH here; run `make install` and "
                              f"activate .venv, or leave {launcher} out")


def run(arm: Arm, cfg: TrainConfig) -> dict[str, Any]:
    """Run one arm into cfg.output_dir; its results.json, with phases from this call's start."""
    start = time.time()
    if arm.launcher == "local":
        from workload import reference  # torch: imported when a reference runs, not by compare's --help

        reference.train(cfg, mode=arm.backend)
    elif arm.launcher == "ray":
        on_ray.launch(arm.backend, cfg, RayRunOptions())
    else:  # the command a user would type, its output kept in <output-dir>/launcher.log rather than mixed into ours
        Path(cfg.output_dir).mkdir(parents=True, exist_ok=True)
        run_launcher(command(arm, cfg), environment(arm), Path(cfg.output_dir) / LOG, arm.launcher)
    try:
        return launch.finish(cfg.output_dir, start)
    except RunFailed:  # a disk full as the phases went in: a run that failed leaves no results.json
        (Path(cfg.output_dir) / results.FILENAME).unlink(missing_ok=True)
        raise


def command(arm: Arm, cfg: TrainConfig, *, restarts: int = 0, ray_options: RayRunOptions | None = None) -> list[str]:
    """The command a user types for `arm`: torchrun, mp.spawn's entry point or horovodrun, or `python -m
    ray_jobs.train` for Ray.

    `restarts`: torchrun's --max-restarts. `ray_options`: --name, --storage-path and --max-failures for Ray.
    """
    if arm.launcher == "ray":
        ray_opts = ray_options or RayRunOptions()
        extra = [*(["--name", ray_opts.name] if ray_opts.name else []),
                 *(["--storage-path", ray_opts.storage_path] if ray_opts.storage_path else []),
                 *(["--max-failures", str(ray_opts.max_failures)] if ray_opts.max_failures else [])]
        return [sys.executable, "-m", "ray_jobs.train", "--backend", arm.backend, *flags.to_args(cfg), *extra]
    # Each entry point offers only the options its framework has (compare hands each backend only those).
    given = flags.to_args(cfg, exclude=("workers", *options.RAY_ONLY, *(options.HOROVOD_ONLY if arm.backend == "native"
                                                                         else options.DDP_ONLY)))
    if arm.launcher == "mp.spawn":
        return [sys.executable, "-m", "native_ddp.spawn", "--workers", str(cfg.workers), *given]
    if arm.launcher == "torchrun":
        return [*launcher_head("torchrun", cfg.workers), *(["--max-restarts", str(restarts)] if restarts else []),
                "-m", "native_ddp.train", *given]
    return [*launcher_head("horovodrun", cfg.workers), "-m", "horovod_ddp.train", *given]


def launcher_head(launcher: str, workers: int) -> list[str]:
    """`workers` ranks under torchrun or horovodrun, as a user starts them, up to what each rank runs. torchrun's
    --standalone: a private rendezvous on a free port, so runs never collide on torchrun's default 29500."""
    program = launch.executable(launcher) or launcher
    if launcher == "torchrun":
        return [program, "--standalone", "--nproc-per-node", str(workers)]
    return [program, "-np", str(workers), "--gloo", sys.executable]


def environment(arm: Arm) -> dict[str, str]:
    """What the launcher's own environment needs on top of the user's."""
    return {**os.environ, "PYTHONUNBUFFERED": "1", **(TORCHRUN_ENV if arm.launcher == "torchrun" else {})}


def wait(launcher: subprocess.Popen, timeout: float | None = None) -> int:
    """Wait for a launcher started in a session of its own; on Ctrl-C or SIGTERM (KeyboardInterrupt here) send its
    session SIGTERM first, so that the launcher ends its ranks, then raise. subprocess.run would SIGKILL it, and
    torchrun's ranks, in sessions of their own, would train on after the command had exited."""
    try:
        return launcher.wait(timeout=timeout)
    except KeyboardInterrupt:
        os.killpg(launcher.pid, signal.SIGTERM)
        try:
            launcher.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
        raise


def run_launcher(launched: list[str], env: dict[str, str], log_path: Path, name: str) -> None:
    """A launcher's command (`name`: which), its output into `log_path`; RunFailed naming its error line where it
    fails. In a session of its own, sent SIGTERM when this command is interrupted (see wait), and by the kernel when
    this command dies without a word (SIGKILL): its parent-death signal."""
    # torchrun leaves a /tmp/torchelastic_<random>/ of its logs behind every run: it goes into a folder removed after.
    with log_path.open("w") as out, tied.folder("compare-launcher-") as scratch:
        done = subprocess.Popen(["setpriv", "--pdeathsig", "SIGTERM", *launched], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**env, "TMPDIR": str(scratch)}, start_new_session=True)
        wait(done)
    if done.returncode:
        said = log_path.read_text(errors="replace").splitlines()
        # a rank's own `error:` line first: a traceback's frames mention errors too
        lines = [line for line in said if "error: " in line] or [line for line in said if "error" in line.lower()]
        raise RunFailed(f"{name} exited with {done.returncode}: {(lines or ['no error line'])[0].strip()[:300]} "
                        f"(see {log_path})")

"""Kill a worker and see the run survive: N trials per launcher, and the survival table (a benchmark, not a test).

    python -m ray_jobs.fault_trials --trials 5
    python -m ray_jobs.fault_trials --trials 5 --kill sigkill --launchers ray-native,ray-horovod

Every trial runs the command a user would type, with the launcher's way to recover turned on:

- ray-native, ray-horovod: python -m ray_jobs.train --backend B --max-failures 1 --name … --storage-path …;
- torchrun: torchrun --standalone --max-restarts 1 … --checkpoint-dir …, with
  TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1;
- horovodrun: horovodrun -np 2 … --checkpoint-dir …, and when it fails, the same command again (horovodrun
  has no restart of its own; Horovod elastic needs a discovery script and hvd.elastic state, see README);
- mp.spawn: python -m native_ddp.spawn --workers 2 … --checkpoint-dir …, and when it fails, the same command again
  (mp.spawn ends every rank when one dies, and restarts none).

Rank 1 dies by SIGKILL in epoch 2: --kill fault (default) from inside, after step 10, through the test-only
WORKLOAD_FAULT variable (workload/faults.py); --kill sigkill from this script, half a second after epoch 1's
checkpoint, as an operator or the OOM killer would. Each trial is compared with one uninterrupted run of the same
command: the step losses and the final weights must be bit-identical. Arms are interleaved, trial by trial.
"""

import argparse
import logging
import os
import signal
import statistics
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from analysis import text
from contract import results
from contract.config import ConfigError, TrainConfig
from launchers import arms
from launchers.arms import Arm
from launchers.ray_failures import RayRunOptions
from runtime import cli, preflight, space
from workload import data, faults

log = logging.getLogger(__name__)
ARMS = {"ray-native": Arm("native", "ray"), "ray-horovod": Arm("horovod", "ray"),
        "torchrun": Arm("native", "torchrun"), "mp.spawn": Arm("native", "mp.spawn"),
        "horovodrun": Arm("horovod", "horovodrun")}
RERUN = ("horovodrun", "mp.spawn")
"""Launchers that end the job when a rank dies and have no restart of their own: recovering is the same command
again."""
KILLED_RANK, KILLED_EPOCH, KILLED_STEP = 1, 2, 10
TIMEOUT_S = 600


@dataclass(slots=True)
class Trial:
    arm: str
    index: int
    completed: bool = False
    starts: int = 0
    """Commands run (horovodrun, mp.spawn: 2 when the first failed and the rerun resumed); 1 for the launchers that
    restart."""
    restarts: int | None = None
    resumed_from_epoch: int | None = None
    finished_before_kill: int | None = None
    epochs: list[int] = field(default_factory=list)
    identical: bool = False
    end_to_end_s: float = 0.0
    recovery_s: float | None = None
    """From the kill to the resumed run's first finished step."""
    note: str = ""


def parser() -> cli.Parser:
    out = cli.Parser(description=__doc__, prog="python -m ray_jobs.fault_trials",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    out.add_argument("--trials", type=int, default=5, help="trials per launcher (default: 5)")
    out.add_argument("--launchers", default=",".join(ARMS), help=f"comma-separated, from {', '.join(ARMS)}")
    out.add_argument("--kill", choices=("fault", "sigkill"), default="fault",
                     help="fault: rank 1 kills itself after step 10 of epoch 2; sigkill: this script kills it "
                          "0.5 s after epoch 1's checkpoint (default: fault)")
    out.add_argument("--epochs", type=int, default=3, help="epochs per run (default: 3)")
    out.add_argument("--output-dir", default="results/fault-trials",
                     help="runs and the table go into <output-dir>/<run-id>/")
    return out


def main() -> int:
    args = parser().parse_args()
    names = [n.strip() for n in args.launchers.split(",") if n.strip()]
    if not names or any(n not in ARMS for n in names) or len(set(names)) != len(names):
        raise ConfigError(f"--launchers takes distinct names from {', '.join(ARMS)}, got {args.launchers!r}")
    if args.trials < 1 or args.epochs < KILLED_EPOCH + 1:
        raise ConfigError(f"--trials must be >= 1 and --epochs >= {KILLED_EPOCH + 1} (the kill is in epoch "
                          f"{KILLED_EPOCH}), got {args.trials} and {args.epochs}")
    root = Path(args.output_dir).expanduser().resolve()
    preflight.writable_dir(str(root), "--output-dir")
    arms.check_available(sorted({ARMS[n].launcher for n in names} - {"ray"}),
                              sorted({ARMS[n].backend for n in names}))
    base = TrainConfig(workers=2, epochs=args.epochs, dataset="synthetic", data_dir=str(root / "data"),
                       synthetic_train_size=6000, synthetic_test_size=1000, log_every=10, stall_timeout_s=60)
    base = data.resolve(base)  # the digits are a cache every invocation shares
    # Every invocation in a folder of its own: an earlier one's checkpoints would otherwise be resumed from.
    root = root / datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    root.mkdir(parents=True)
    references = {name: run_reference(name, base, root / name / "uninterrupted") for name in names}
    trials = []
    for index in range(1, args.trials + 1):
        for name in names:  # interleaved: a slow moment of the machine falls on every launcher alike
            trial = run_trial(name, index, base, root / name / f"trial-{index}", references[name], args.kill)
            log.info("%s trial %d: %s", name, index, "survived" if survived(trial) else f"FAILED ({trial.note})")
            trials.append(trial)
    table = survival_table(trials, names, args.kill)
    space.write_json(root / "fault_trials.json", {"kill": args.kill, "trials": [asdict(t) for t in trials]})
    log.info("%s\n\ntrials: %s", table, root / "fault_trials.json")
    return 0 if all(survived(t) for t in trials) else 1


def _config(base: TrainConfig, folder: Path) -> TrainConfig:
    return replace(base, output_dir=str(folder / "out"), checkpoint_dir=str(folder / "checkpoints"))


def _command(name: str, cfg: TrainConfig, folder: Path) -> list[str]:
    arm = ARMS[name]
    if arm.launcher == "ray":
        # Ray keeps its checkpoints under --storage-path/--name; --checkpoint-dir would be a second copy.
        return arms.command(arm, replace(cfg, checkpoint_dir=""), ray_options=RayRunOptions(
            name="run", storage_path=str(folder / "ray"), max_failures=1))
    return arms.command(arm, cfg, restarts=1)


def _launch(name: str, cfg: TrainConfig, folder: Path, fault: str, attempt: int) -> subprocess.Popen:
    env = arms.environment(ARMS[name])
    env.pop(faults.ENV, None)
    if fault:
        env[faults.ENV] = fault
    folder.mkdir(parents=True, exist_ok=True)
    out = (folder / f"launcher-{attempt}.log").open("w")
    return subprocess.Popen(_command(name, cfg, folder), stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=env, start_new_session=True)


def _wait(process: subprocess.Popen) -> int:
    try:
        return arms.wait(process, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the whole session: the launcher and every worker it started
        process.wait()
        return -1


def run_reference(name: str, base: TrainConfig, folder: Path) -> dict[str, Any]:
    cfg = _config(base, folder)
    code = _wait(_launch(name, cfg, folder, "", 1))
    if code:
        raise RuntimeError(f"{name}: the uninterrupted run exited with {code}; see {folder}/launcher-1.log")
    return results.read(Path(cfg.output_dir) / results.FILENAME)


def run_trial(name: str, index: int, base: TrainConfig, folder: Path, reference: dict[str, Any],
              kill: str, where: str = "") -> Trial:
    """One run with rank 1 killed (see the module's docstring); `where` replaces the fault's default place, as
    WORKLOAD_FAULT's rank, epoch, at and step (--kill fault only)."""
    cfg = _config(base, folder)
    trial = Trial(arm=name, index=index)
    pids = folder / "pids"
    pids.mkdir(parents=True, exist_ok=True)
    fired = folder / "killed"
    if kill == "fault":
        where = where or f"rank={KILLED_RANK},epoch={KILLED_EPOCH},step={KILLED_STEP}"
        fault = f"{where},once={fired},pids={pids}"
    else:
        fault = f"pids={pids}"
    start = time.time()
    killed_at: list[float] = []
    process = _launch(name, cfg, folder, fault, 1)
    if kill == "sigkill":
        threading.Thread(target=_kill_later, args=(pids, killed_at), daemon=True).start()
    code = _wait(process)
    trial.starts = 1
    if code and ARMS[name].launcher in RERUN:
        trial.starts = 2
        code = _wait(_launch(name, cfg, folder, fault, 2))
    trial.end_to_end_s = time.time() - start
    if kill == "fault" and fired.exists():
        killed_at.append(fired.stat().st_mtime)
    done = sorted(int(p.stem.removeprefix("epoch")) for p in pids.glob("epoch*.done")
                  if not killed_at or p.stat().st_mtime <= killed_at[0])
    trial.finished_before_kill = done[-1] if done else 0
    path = Path(cfg.output_dir) / results.FILENAME
    if code or not path.exists():
        trial.note = f"exit {code}" + ("" if killed_at else ", no kill happened")
        return trial
    doc = results.read(path)
    trial.completed = True
    trial.restarts = doc.get("restarts")
    trial.resumed_from_epoch = doc["resumed_from_epoch"]
    trial.epochs = [e["epoch"] for e in doc["epochs"]]
    trial.identical = (doc["step_losses"] == reference["step_losses"]
                       and doc["parameters_sha256"] == reference["parameters_sha256"])
    trained_s = sum(e["epoch_time_s"] + e["eval_time_s"] for e in doc["epochs"])
    if killed_at:
        trial.recovery_s = doc["timestamps"]["first_step_done"] - killed_at[0]
    else:
        trial.note = "no kill happened"
    if doc["final"]["wall_time_s"] < trained_s:  # it must cover every epoch it reports, not the last attempt's
        trial.note = f"final.wall_time_s {doc['final']['wall_time_s']:.1f} s < its epochs' {trained_s:.1f} s"
    return trial


def _kill_later(pids: Path, killed_at: list[float]) -> None:
    """SIGKILL rank 1 half a second after epoch 1 is checkpointed, from outside, once."""
    deadline = time.time() + TIMEOUT_S
    while time.time() < deadline and not (pids / "epoch1.done").exists():
        time.sleep(0.05)
    time.sleep(0.5)
    try:
        pid = int((pids / f"rank{KILLED_RANK}.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        killed_at.append(time.time())
    except (OSError, ValueError):
        pass


def survived(trial: Trial) -> bool:
    """Completed, bit-identical to the uninterrupted run, every epoch once, and no finished epoch trained again."""
    return (trial.completed and trial.identical and not trial.note
            and trial.epochs == list(range(1, len(trial.epochs) + 1))
            and (trial.resumed_from_epoch or 0) >= (trial.finished_before_kill or 0) > 0)


def survival_table(trials: list[Trial], names: list[str], kill: str) -> str:
    """One Markdown row per launcher: completed, resumed, epochs redone, bit-identical, seconds to recover."""
    how = ("rank 1 kills itself after step 10 of epoch 2" if kill == "fault"
           else "rank 1 killed from outside 0.5 s after epoch 1's checkpoint")
    lines = []
    for name in names:
        rows = [t for t in trials if t.arm == name]
        done = [t for t in rows if t.completed]
        resumed = sorted({t.resumed_from_epoch for t in done if t.resumed_from_epoch is not None})
        redone = sum(max(0, (t.finished_before_kill or 0) - (t.resumed_from_epoch or 0)) for t in done)
        recover = [t.recovery_s for t in done if t.recovery_s is not None]
        spread = (f"{statistics.median(recover):.1f} ({min(recover):.1f}–{max(recover):.1f})" if recover else "–")
        way = "reruns" if ARMS[name].launcher in RERUN else "automatic"
        restarts = sorted({t.starts - 1 if way == "reruns" else t.restarts for t in done} - {None})
        lines.append([name, len(rows), f"{len(done)}/{len(rows)}", ", ".join(map(str, resumed)) or "–", redone,
                      f"{', '.join(map(str, restarts)) or '–'} ({way})",
                      f"{sum(t.identical for t in done)}/{len(rows)}", spread])
    return (f"Survival: {how} (SIGKILL), one uninterrupted run per launcher for comparison.\n\n" + text.md_table(
        ["launcher", "trials", "completed", "resumed after epoch", "finished epochs redone", "restarts (how)",
         "bit-identical", "s from kill to resumed step, median (range)"], lines))


if __name__ == "__main__":
    cli.run(main)

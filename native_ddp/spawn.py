"""Native DDP started as the classic DDP tutorials start it: torch.multiprocessing.spawn, one process per rank.

    python -m native_ddp.spawn --workers 2 --epochs 2

This process checks the flags (and a checkpoint to resume), resolves the dataset (making synthetic digits where
MNIST is absent), picks a free loopback port for the group's rendezvous (MASTER_ADDR, MASTER_PORT) and spawns
--workers ranks; each rank forms the group from that environment as a torchrun rank does, and lives the same life
(native_ddp/worker.py). Ctrl-C or SIGTERM here reaches every rank as SIGTERM, as torchrun passes it on; a rank that
fails ends the others (mp.spawn's own rule), and this command exits with the failed rank's code. For more than one
machine, use torchrun or Ray (python -m ray_jobs.train).
"""

import argparse
import logging
import os
import signal
from typing import Any

from contract import options
from contract.errors import SPAWNED_ENV
from runtime import cli, flags, gpus, launch, preflight, run_folder, signals, tied
from workload import data

LAUNCHER = "mp.spawn"
STOP_WAIT_S = 30.0
"""How long the ranks get to end after the SIGTERM passed on to them (each says its line) before they are killed."""
JOIN_GRACE_S = 3.0
"""Once a rank has failed, how long the others get to end on their own, then after mp.spawn's SIGTERM, before it
kills them (a stopped rank, which SIGTERM cannot end, would otherwise hold the command for mp.spawn's 30 s)."""

# torch is imported once the flags are good: --help and a refused flag answer at once.


def parser() -> cli.Parser:
    out = cli.Parser(description=__doc__, prog="python -m native_ddp.spawn",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    flags.add(out, exclude=(*options.HOROVOD_ONLY, *options.RAY_ONLY), defaults={"output_dir": run_folder.DEFAULT})
    return out


def main() -> int:
    args = parser().parse_args()
    output_dir = run_folder.resolve(args.output_dir, "native", LAUNCHER)
    cfg = flags.from_args(args, output_dir=output_dir).with_absolute_paths()
    preflight.check_config(cfg, horovod=False)
    gpus.check(cfg.use_gpu, cfg.workers, horovod=False)
    if cfg.checkpoint_dir:  # a checkpoint of another run is refused before any data is made, as torchrun's ranks do
        from workload.run import resume_state

        resume_state(cfg, "native", LAUNCHER)
    cfg = data.resolve(cfg)  # once, here, as Ray's driver does: every rank then loads the same files
    run_folder.announce(args.output_dir, output_dir)
    import torch.multiprocessing as mp

    # Its "Terminating process N via signal SIGTERM", after a rank that failed has said why in its own line.
    logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)
    # DDP: the tutorials' env:// rendezvous on this host, on a port free now rather than their fixed 12355.
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(launch.free_port()))
    ranks = None
    try:
        with _ranks_start_deaf_to_ctrl_c():
            ranks = mp.start_processes(spawned_rank, args=(cfg.to_dict(), cfg.workers), nprocs=cfg.workers,
                                       join=False, start_method="spawn")
        while not ranks.join(grace_period=JOIN_GRACE_S):
            pass
    except mp.ProcessExitedException as failed:
        # The failed rank, or the peer it left, said why in its one line; torchrun, too, exits 1 with no line of ours.
        return failed.exit_code if failed.exit_code > 0 else 1
    except KeyboardInterrupt:
        codes = _pass_on_and_wait(ranks) if ranks else []
        if not any(code > 0 for code in codes):  # every rank ended before its handler existed: none said a line
            cli.say(cli.interrupted_line(signals.exit_code() == 143))
        signals.exit_now(signals.exit_code())
    return 0


def spawned_rank(index: int, config: dict[str, Any], world_size: int) -> None:
    """Rank `index` as torch.multiprocessing.spawn calls it (native_ddp/spawn.py): the environment torchrun would
    give it, then the same rank's life. Ctrl-C is the launcher's to pass on, as SIGTERM, as torchrun does."""
    os.environ.update(RANK=str(index), LOCAL_RANK=str(index), WORLD_SIZE=str(world_size), **{SPAWNED_ENV: "1"})
    # torch's wrapper asks for SIGINT when the launcher dies, which these ranks ignore: SIGTERM, which they answer.
    tied.die_with_parent(signal.SIGTERM)

    def rank() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # again: cli.run has just set its own handler for it
        from contract.config import TrainConfig
        from native_ddp.worker import run_launched  # torch: in the rank, not in the command that reads the flags

        run_launched(TrainConfig.from_dict(config), LAUNCHER)

    cli.run(rank)


class _ranks_start_deaf_to_ctrl_c:
    """Ctrl-C ignored while the ranks are spawned, so that they inherit the ignoring (Python keeps an inherited
    SIG_IGN), and a SIGTERM held until they exist: a signal then reaches every rank as this process's SIGTERM,
    never as a KeyboardInterrupt traceback in a rank still importing torch."""

    def __enter__(self) -> None:
        self.held: list[int] = []
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, lambda signum, frame: self.held.append(signum))

    def __exit__(self, *exc: object) -> None:
        signals.install()
        if self.held:
            os.kill(os.getpid(), signal.SIGTERM)  # raised now, where the ranks can be ended


def _pass_on_and_wait(ranks) -> list[int]:
    """SIGTERM to every rank still running, at once (each then says what it says under torchrun); killed if one
    outlives STOP_WAIT_S. The ranks' exit codes: 143 where a rank ended itself, negative where the signal did."""
    for signum in (signal.SIGINT, signal.SIGTERM):  # a second signal must not cut the wait short
        signal.signal(signum, signal.SIG_IGN)
    alive = [process for process in ranks.processes if process.is_alive()]
    for process in alive:
        os.kill(process.pid, signal.SIGTERM)
    for process in alive:
        process.join(STOP_WAIT_S)
        if process.is_alive():
            process.kill()
            process.join()
    return [process.exitcode or 0 for process in ranks.processes]


if __name__ == "__main__":
    cli.run(main)

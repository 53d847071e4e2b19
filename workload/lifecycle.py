"""The life of one rank, written once for every worker entry point (Ray Train, RayExecutor, torchrun, mp.spawn,
horovodrun): a watchdog from before the process group exists, the group, logging, training, a lost peer as one line,
shutdown.

Each backend supplies a `Framework`: only what its framework forces (how the group forms and ends, and what a
collective raises when a peer has gone).
"""

import contextlib
import dataclasses
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from contract import summary
from contract.config import TrainConfig
from contract.errors import PeerLost, launcher_rank
from runtime import cli, logs, memory, signals, worker_end
from workload import cores, faults, threads
from workload.distributed import DistContext, leave, peer_lost, resume_hint
from workload.watchdog import Watchdog


@dataclass(frozen=True, slots=True)
class Framework:
    """What one backend's framework forces on a rank's life, under one launcher."""

    init: Callable[[TrainConfig], DistContext]
    """Forms the process group (or takes the one the launcher formed); this rank's context."""
    lost_peer: Callable[[BaseException], bool]
    """Whether an error raised by a collective means another rank died or left."""
    shutdown: Callable[[], None]
    """Ends this rank's part in the group (nothing where the launcher owns the group)."""


def run_rank(framework: Framework, launcher: str, cfg: TrainConfig,
             train: Callable[[DistContext, Watchdog], dict[str, Any] | None]) -> dict[str, Any] | None:
    """Run `train(ctx, watchdog)` on this rank, inside the rank's whole life; rank 0's result, None elsewhere.

    Under torchrun, mp.spawn and horovodrun rank 0 prints the summary, and a lost peer ends the rank with its one line
    and exit code 1 (printed before the group shuts down, which may take a while); in a Ray worker the lost peer ends
    the process with that line (the driver says how to resume), and the output router is told that this worker has
    nothing more to print."""
    on_ray = launcher == "ray"
    began, oom_before = time.time(), memory.oom_kills()
    # From before the group exists: a peer that dies while it forms must not leave this rank waiting for gloo's
    # 30-minute default.
    with contextlib.ExitStack() as stack, Watchdog(cfg.stall_timeout_s, cfg.output_dir, report=on_ray) as watchdog:
        if not on_ray:
            stack.enter_context(say_when_ended(launcher, cfg, watchdog, oom_before))
            faults.point("init", launcher_rank())
        threads.mark(threads.BEFORE)
        ctx = dataclasses.replace(framework.init(cfg), began_at=began)
        threads.mark(threads.READY)  # the threads that appeared meanwhile are the framework's
        watchdog.joined(ctx.rank, ctx.world_size)
        cores.pin(ctx, cfg.cpu_affinity, cfg.threads_per_worker)  # after init: the framework's threads exist by now
        watchdog.kick("starting")
        logs.setup(ctx.rank)
        try:
            doc = train(ctx, watchdog)
            if doc and not on_ray:
                summary.announce(doc)
        except Exception as error:
            if not framework.lost_peer(error):
                raise
            oom = memory.killed_since(oom_before)
            if not on_ray and not oom and watchdog.left_on_a_signal():
                passed_on(signal.SIGTERM, launcher, cfg)
            lost = peer_lost(error, ctx.rank, launcher, cfg.checkpoint_dir, oom)
            if stalled := watchdog.named_stall():  # not lost: a peer stopped, and the group's timeout ran out
                lost = PeerLost(f"{stalled}; ending this rank")
            if on_ray:
                leave(lost)
            # The line first, then the group's shutdown: torchrun and horovodrun end this rank soon after its peer.
            cli.fail(str(lost), cli.EXIT_CODES[PeerLost], every_rank=True)
        finally:
            framework.shutdown()
            if on_ray:
                worker_end.end()
    return doc


def say_when_ended(launcher: str, cfg: TrainConfig, watchdog: Watchdog,
                   oom_before: int | None = None) -> contextlib.AbstractContextManager:
    """torchrun, mp.spawn and horovodrun end the other ranks with SIGTERM once one has exited, sometimes before they
    notice the lost peer themselves: such a rank says so in the lost-peer line and leaves
    at once, without a shutdown that would wait on the dead peer. They also pass on a SIGTERM sent to them (`timeout`, a
    scheduler): every rank gets it at once, none has died, and rank 0 says so, once. Where the kernel's out-of-memory
    killer ended a rank since `oom_before`, each survivor says that instead. Off the main thread too: a rank
    waiting in C++ for its group to form ran the handler only when torchrun killed it, 30 s later."""
    hint = resume_hint(launcher, cfg.checkpoint_dir)

    def ended(signum: int) -> NoReturn:
        name = signal.Signals(signum).name
        if oom := memory.killed_since(oom_before):  # the launcher ends the survivors of a rank the kernel killed
            cli.say(f"ended by {name} from {launcher} after {oom}; {hint}", every_rank=True, unless_said=True)
        elif (with_peers := watchdog.signalled_with_peers()) is None:
            # No heartbeats to tell the two apart yet: neither claimed (both ranks claimed a peer).
            cli.say(f"ended by {name} from {launcher} during the ranks' start-up, before the run finished (the "
                    f"user's signal passed on, or a rank that failed first, whose own lines say why); {hint}",
                    unless_said=True)
        elif with_peers:
            passed_on(signum, launcher, cfg)
        else:
            stopped = RuntimeError(f"{launcher} ended this rank with {name}")
            cli.say(str(peer_lost(stopped, launcher_rank(), launcher, cfg.checkpoint_dir)), every_rank=True,
                    unless_said=True)
        signals.exit_now(128 + signum)

    return signals.ending_on((signal.SIGTERM,), ended)


def passed_on(signum: int, launcher: str, cfg: TrainConfig) -> NoReturn:
    """A signal the launcher passed on to every rank, which ends this one: rank 0 says so, once."""
    cli.say(f"ended by {signal.Signals(signum).name}, which {launcher} passed on to every rank, before the run "
            f"finished; {resume_hint(launcher, cfg.checkpoint_dir)}", unless_said=True)
    signals.exit_now(128 + signum)


def leave_without_teardown() -> NoReturn:
    """A finished torchrun, mp.spawn or horovodrun rank, its results written and its group left, ends without the
    interpreter's teardown: C++ threads still joinable then abort a rank that had finished ("terminate called without an
    active exception", exit -6)."""
    signals.exit_now(0)

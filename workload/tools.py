"""The optional tools the training loop tells of its progress: the stall watchdog (workload/watchdog.py), the tracer
(workload/tracing.py) and the test-only fault points (workload/faults.py). Each does nothing unless it overrides a
moment, so the loop reads the same with every tool or none."""

from workload import faults


class Tool:
    """A moment of the training loop; every method does nothing unless a tool overrides it."""

    def fit_start(self) -> None:
        """Training is about to start (after the model, data and any resumed state are in place)."""

    def timed_after(self, warmup: int) -> None:
        """Each epoch's first `warmup` steps warm up and the rest are timed (fewer than configured in a short epoch)."""

    def before_step(self, epoch: int, step: int) -> None:
        """Step `step` of `epoch` is about to load its batch."""

    def after_step(self, epoch: int, step: int, steps: int) -> None:
        """Step `step` of `steps` is done, the optimizer step included."""

    def before_eval(self, epoch: int) -> None:
        """The epoch's steps are done; evaluation starts."""

    def before_checkpoint(self, epoch: int) -> None:
        """Evaluation is done; the epoch's checkpoint (if the launcher keeps one) is written next."""

    def epoch_done(self, epoch: int) -> None:
        """The epoch is over, its checkpoint written."""

    def fit_done(self) -> None:
        """The last epoch is over: what follows is the run's final checks and its results."""


class Tools(Tool):
    """Several tools told of each moment in the order given; `None`s (a tool that is off) are left out."""

    def __init__(self, *tools: Tool | None) -> None:
        self.tools = [tool for tool in tools if tool is not None]

    def fit_start(self) -> None:
        for tool in self.tools:
            tool.fit_start()

    def timed_after(self, warmup: int) -> None:
        for tool in self.tools:
            tool.timed_after(warmup)

    def before_step(self, epoch: int, step: int) -> None:
        for tool in self.tools:
            tool.before_step(epoch, step)

    def after_step(self, epoch: int, step: int, steps: int) -> None:
        for tool in self.tools:
            tool.after_step(epoch, step, steps)

    def before_eval(self, epoch: int) -> None:
        for tool in self.tools:
            tool.before_eval(epoch)

    def before_checkpoint(self, epoch: int) -> None:
        for tool in self.tools:
            tool.before_checkpoint(epoch)

    def epoch_done(self, epoch: int) -> None:
        for tool in self.tools:
            tool.epoch_done(epoch)

    def fit_done(self) -> None:
        for tool in self.tools:
            tool.fit_done()


class FaultPoints(Tool):
    """Where a test-only fault (WORKLOAD_FAULT) may end this rank; each point is one attribute test when unset."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def fit_start(self) -> None:
        faults.announce(self.rank)

    def after_step(self, epoch: int, step: int, steps: int) -> None:
        faults.point("step", self.rank, epoch, step)

    def before_eval(self, epoch: int) -> None:
        faults.point("eval", self.rank, epoch)

    def epoch_done(self, epoch: int) -> None:
        faults.epoch_done(self.rank, epoch)


def for_rank(rank: int, *tools: Tool | None) -> Tools:
    """A distributed rank's tools: those given (the watchdog, the tracer when --trace is on), then the fault points."""
    return Tools(*tools, FaultPoints(rank))

"""compare's terminal: a line per reference and per round as it ends, with each run's figure (or why it failed) and
the time left, estimated from the runs of the same arm so far. As with Ray Train's and Horovod's own progress lines,
the detail stays in each run's folder (output.log, launcher.log, ray.log)."""

import statistics
import time
from typing import Any

from analysis import text


class Progress:
    """The runs of one list, in order: `done` after each."""

    def __init__(self, todo: list[tuple[int, str, int, bool]], rounds: int, deadline: float | None = None,
                 took: dict[tuple[str, int], list[float]] | None = None) -> None:
        """`todo`: (round, arm, workers, whether it is a single-process reference), in order; `deadline`
        (time.monotonic()): where --budget-min stops starting rounds, which the time left never passes; `took`: each
        run's seconds by (arm, workers), which `done` adds to (the orchestrator prices rounds from them)."""
        self.todo, self.rounds, self.deadline = todo, rounds, deadline
        self.took = {} if took is None else took
        self.began = time.monotonic()
        self.round: list[str] = []

    def start(self) -> None:
        self.began = time.monotonic()

    def done(self, i: int, record: dict[str, Any]) -> str | None:
        """Run `i` (1-based) has ended with `record`: the line to print when it ends a reference or a round."""
        round_, label, n, _ = self.todo[i - 1]
        self.took.setdefault((label, n), []).append(time.monotonic() - self.began)
        if record["launcher"] == "local":
            return f"[{i}/{len(self.todo)}] {label} · {n} worker(s): {outcome(record)} · {self.left(i)}"
        self.round.append(f"{label} {outcome(record)}")
        following = self.todo[i] if i < len(self.todo) else None
        if following and following[0] == round_ and following[2] == n and not following[3]:
            return None
        line = (f"[{i}/{len(self.todo)}] round {round_ + 1}/{self.rounds} · {n} worker(s): {'; '.join(self.round)} "
                f"· {self.left(i)}")
        self.round = []
        return line

    def left(self, i: int) -> str:
        """The time the runs after `i` should take: each at its arm's median so far, else at the median of the runs of
        its kind (references, distributed runs) so far; unknown while a kind has none, never guessed from the other."""
        rest = self.todo[i:]
        if not rest:
            return "done"
        kinds = {local: [s for (label, n), spans in self.took.items() for s in spans
                         if any(t[1] == label and t[2] == n and t[3] == local for t in self.todo)]
                 for local in (True, False)}
        spans = [self.took.get((label, n)) or kinds[local] for _, label, n, local in rest]
        if not all(spans):
            return "the time left is known after the first round"
        left = sum(statistics.median(s) for s in spans)
        if self.deadline is not None and left > (budget := max(0.0, self.deadline - time.monotonic())):
            return f"about {text.duration(budget)} left: --budget-min starts no round that would end past it"
        return f"about {text.duration(left)} left at the pace so far"


def outcome(record: dict[str, Any]) -> str:
    """What a finished run measured, or why it failed, in a few words."""
    if record["status"] != "ok":
        return f"FAILED: {record['error']}"
    accuracy = 100 * record["final"]["test_accuracy"]
    if record["launcher"] == "local":
        return f"test accuracy {accuracy:.2f}%"
    return f"{record['steady_samples_per_s']:,.0f} samples/s steady, {text.seconds(record['end_to_end_s'])} end to end"

"""compare's terminal, one line per run as it ends: its place in the plan, the arm, what it measured, and the time
left, estimated from the runs of the same arm so far (as Ray Train's and Horovod's own progress lines do, the detail
stays in the run's folder)."""

import statistics
import time
from typing import Any

from analysis import text


class Progress:
    """The runs of one list, in order; `line` after each."""

    def __init__(self, todo: list[tuple[int, str, int]], rounds: int) -> None:
        self.todo, self.rounds = todo, rounds
        self.took: dict[tuple[str, int], list[float]] = {}
        self.began = time.monotonic()

    def start(self) -> None:
        self.began = time.monotonic()

    def line(self, i: int, record: dict[str, Any]) -> str:
        """Run `i` (1-based) of the list has ended with `record`: the line that says so."""
        round_, label, n = self.todo[i - 1]
        self.took.setdefault((label, n), []).append(time.monotonic() - self.began)
        where = f"round {round_ + 1}/{self.rounds} · " if record["launcher"] != "local" else ""
        what = f"[{i}/{len(self.todo)}] {where}{label} · {n} worker(s)"
        return f"{what}: {outcome(record)} · {self.left(i)}"

    def left(self, i: int) -> str:
        """The time the runs after `i` should take: each at its arm's median so far, else every run's median."""
        rest = self.todo[i:]
        if not rest:
            return "done"
        every = [s for spans in self.took.values() for s in spans]
        guess = sum(statistics.median(self.took.get((label, n)) or every) for _, label, n in rest)
        return f"about {text.duration(guess)} left"


def outcome(record: dict[str, Any]) -> str:
    """What a finished run measured, or why it failed, in a few words."""
    if record["status"] != "ok":
        return f"FAILED: {record['error']}"
    accuracy = 100 * record["final"]["test_accuracy"]
    if record["launcher"] == "local":
        return f"test accuracy {accuracy:.2f}%"
    return (f"{record['steady_samples_per_s']:,.0f} samples/s steady, {text.seconds(record['end_to_end_s'])} end to "
            f"end, test accuracy {accuracy:.2f}%")

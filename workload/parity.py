"""Do DDP and Horovod train the same model? Step losses compared with each other and with the reference.

With identical initial weights, sharding and hyper-parameters, both backends average the same per-worker
gradients, so their step losses may differ only by floating-point summation order, which grows over steps.
"""

from collections.abc import Sequence
from itertools import combinations
from typing import Any

BACKENDS = ("native", "horovod")
REFERENCE = "reference"
INFORMATIONAL = "global-batch"


def max_step_difference(a: list[float], b: list[float], steps: int) -> float | None:
    """The largest |a - b| over the first `steps` steps; None when either has no step (JSON has no NaN)."""
    n = min(steps, len(a), len(b))
    return max((abs(x - y) for x, y in zip(a[:n], b[:n])), default=None)


def verdict(losses: dict[str, list[float]], steps: int, tolerance: float,
            backends: Sequence[str] = BACKENDS) -> dict[str, Any]:
    """Parity for one worker count, from the step losses of each run that finished.

    PASS needs every requested backend and the reference, each pair within `tolerance` over the first `steps`.
    """
    compared_runs = [*backends, REFERENCE]
    pairs = {}
    for a, b in combinations(compared_runs, 2):
        if a in losses and b in losses:
            pairs[f"{a} vs {b}"] = max_step_difference(losses[a], losses[b], steps)
    info = {}
    for run in compared_runs:
        if run in losses and INFORMATIONAL in losses:
            info[f"{run} vs {INFORMATIONAL}"] = max_step_difference(losses[run], losses[INFORMATIONAL], steps)
    missing = [run for run in compared_runs if run not in losses]
    passed = not missing and all(d is not None and d <= tolerance for d in pairs.values())
    compared = min((len(losses[run]) for run in compared_runs if run in losses), default=0)
    return {
        "steps": min(steps, compared),
        "tolerance": tolerance,
        "max_abs_step_loss_difference": pairs,
        "informational": info,
        "verdict": "PASS" if passed else "FAIL",
        "why": None if passed else (f"{', '.join(missing)} did not finish" if missing else
                                    "a step-loss difference exceeds the tolerance"),
    }

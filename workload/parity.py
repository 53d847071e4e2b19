"""Do DDP and Horovod train the same model? Step losses compared with each other and with the reference.

With identical initial weights, sharding and hyper-parameters, both backends average the same per-worker
gradients, so their step losses may differ only by floating-point summation order, which grows over steps.
"""

from typing import Any

BACKENDS = ("native", "horovod")
REFERENCE = "reference"
INFORMATIONAL = "global-batch"


def max_step_difference(a: list[float], b: list[float], steps: int) -> float:
    n = min(steps, len(a), len(b))
    return max((abs(x - y) for x, y in zip(a[:n], b[:n])), default=float("nan"))


def verdict(losses: dict[str, list[float]], steps: int, tolerance: float) -> dict[str, Any]:
    """Parity for one worker count, from the step losses of each backend that finished.

    PASS needs both backends, each within `tolerance` of the other and of the reference over the first `steps`.
    """
    pairs = {}
    for a, b in (BACKENDS, (BACKENDS[0], REFERENCE), (BACKENDS[1], REFERENCE)):
        if a in losses and b in losses:
            pairs[f"{a} vs {b}"] = max_step_difference(losses[a], losses[b], steps)
    info = {}
    for backend in (*BACKENDS, REFERENCE):
        if backend in losses and INFORMATIONAL in losses:
            info[f"{backend} vs {INFORMATIONAL}"] = max_step_difference(losses[backend], losses[INFORMATIONAL], steps)
    complete = all(b in losses for b in (*BACKENDS, REFERENCE))
    passed = complete and all(d <= tolerance for d in pairs.values())
    compared = min((len(losses[b]) for b in losses), default=0)
    return {
        "steps": min(steps, compared),
        "tolerance": tolerance,
        "max_abs_step_loss_difference": pairs,
        "informational": info,
        "verdict": "PASS" if passed else "FAIL",
        "why": None if passed else ("a backend or the reference did not finish" if not complete else
                                    "a step-loss difference exceeds the tolerance"),
    }

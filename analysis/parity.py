"""Do DDP and Horovod train the same model? Step losses compared with each other and with the reference.

With identical initial weights, sharding and hyper-parameters, both backends average the same per-worker
gradients, so their step losses may differ only by floating-point summation order, which grows over steps.
"""

from collections.abc import Sequence
from itertools import combinations
from typing import Any

from analysis import text
from contract.config import BACKENDS

REFERENCE = "reference"
REFERENCE_HOROVOD = "reference-horovod"
INFORMATIONAL = "global-batch"
EMULATION = {"horovod": REFERENCE_HOROVOD}
"""The reference that rounds as a backend does, when it differs from `reference` (DDP's order) and ran: with
--compression, DDP and Horovod round, divide and sum in a different order (workload/compression.py)."""


def max_step_difference(a: list[float], b: list[float], steps: int) -> float | None:
    """The largest |a - b| over the first `steps` steps; None when either has no step (JSON has no NaN)."""
    n = min(steps, len(a), len(b))
    return max((abs(x - y) for x, y in zip(a[:n], b[:n])), default=None)


def reference_for(arm: str, losses: dict[str, list[float]]) -> str:
    """The reference `arm` (`native`, `horovod/horovodrun`, …) is compared with: the one computing as it does."""
    emulation = EMULATION.get(arm.split("/")[0])
    return emulation if emulation in losses else REFERENCE


def verdict(losses: dict[str, list[float]], steps: int, tolerance: float,
            backends: Sequence[str] = BACKENDS) -> dict[str, Any]:
    """Parity for one worker count, from the step losses of each run that finished.

    PASS needs every requested backend and the reference(s), each backend within `tolerance` of the reference that
    computes as it does, and the backends within `tolerance` of each other, unless their difference is explained:
    each matches its own reference, and those references differ only in the rounding order they emulate.
    """
    refs = {arm: reference_for(arm, losses) for arm in backends}
    compared_runs = [*backends, REFERENCE, *sorted({r for r in refs.values() if r != REFERENCE})]
    pairs, explained = {}, {}

    def diff(a: str, b: str) -> float | None:
        return max_step_difference(losses[a], losses[b], steps) if a in losses and b in losses else None

    def within(pair: str) -> bool:
        return pairs.get(pair) is not None and pairs[pair] <= tolerance

    for a, b in [*combinations(backends, 2), *refs.items()]:
        if a in losses and b in losses:
            pairs[f"{a} vs {b}"] = diff(a, b)
    info = {f"{run} vs {INFORMATIONAL}": diff(run, INFORMATIONAL) for run in compared_runs
            if run in losses and INFORMATIONAL in losses}
    if REFERENCE_HOROVOD in losses and REFERENCE in losses:
        info[f"{REFERENCE} vs {REFERENCE_HOROVOD}"] = diff(REFERENCE, REFERENCE_HOROVOD)
    for a, b in combinations(backends, 2):
        pair = f"{a} vs {b}"
        if not within(pair) and refs[a] != refs[b] and within(f"{a} vs {refs[a]}") and within(f"{b} vs {refs[b]}"):
            explained[pair] = (f"rounding order: each matches the reference that rounds as it does, and those "
                               f"references differ by {text.number(diff(refs[a], refs[b]))}")
    missing = [run for run in compared_runs if run not in losses]
    passed = not missing and all(within(pair) or pair in explained for pair in pairs)
    compared = min((len(losses[run]) for run in compared_runs if run in losses), default=0)
    return {
        "steps": min(steps, compared),
        "tolerance": tolerance,
        "max_abs_step_loss_difference": pairs,
        "explained": explained,
        "informational": info,
        "verdict": "PASS" if passed else "FAIL",
        "why": None if passed else (f"{', '.join(missing)} did not finish" if missing else
                                    "a step-loss difference exceeds the tolerance"),
    }


"""Do DDP and Horovod train the same model? Step losses compared with each other and with the reference.

With identical initial weights, sharding and hyper-parameters, both backends average the same per-worker
gradients, so their step losses may differ only by floating-point summation order, which grows over steps.
"""

from collections.abc import Sequence
from itertools import accumulate, combinations
from typing import Any

from analysis import text
from contract.config import BACKENDS

REFERENCE = "reference"
REFERENCE_HOROVOD = "reference-horovod"
REORDERED = "reference-reordered"
AGAIN = "reference-again"
"""`reference` run again beside a reordered one added later (ray_jobs/add_references.py) where the recorded one is not
reproduced bit for bit: the floor is then that pair's, measured where both ran."""
INFORMATIONAL = "global-batch"
MARGIN, LAG = 10.0, 2
"""What passes at step t: up to MARGIN x the floor LAG steps later. Runs that differ only in rounding part at one last
bit and drift apart ~10-100x a step until the losses' own spread; when the drift starts varies by a step or two.
Measured (resnet18, 3 and 4 ranks, 6 rounding orders each): any such pair within 7.2x (3 ranks) and 3.3x (4 ranks)
of any other's floor two steps later, docs/measuring.md."""
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


def floor_base(losses: dict[str, list[float]]) -> str:
    """The run the reordered reference is set against: `reference`, or where it was run again later, that run."""
    return AGAIN if AGAIN in losses else REFERENCE


def floor_per_step(losses: dict[str, list[float]], steps: int) -> list[float] | None:
    """The parity floor at each step: the largest drift, at that step or any before it, between the two references
    that differ only in the order they sum the workers' gradients; None where the reordered one did not run."""
    base = floor_base(losses)
    if base not in losses or REORDERED not in losses:
        return None
    return list(accumulate((abs(x - y) for x, y in zip(losses[base][:steps], losses[REORDERED][:steps])), max))


def beyond(a: list[float], b: list[float], steps: int, tolerance: float, floor: list[float] | None) -> float | None:
    """How far |a - b| goes past what passes, at its worst step: the largest difference over the step's allowance
    (the tolerance, or MARGIN x the floor LAG steps later), so that 1 or less passes; None when either has no step."""
    n = min(steps, len(a), len(b))
    if not n:
        return None
    allowed = [max(tolerance, MARGIN * floor[min(t + LAG, len(floor) - 1)]) if floor else tolerance for t in range(n)]
    return max(abs(x - y) / limit for x, y, limit in zip(a[:n], b[:n], allowed))


def verdict(losses: dict[str, list[float]], steps: int, tolerance: float,
            backends: Sequence[str] = BACKENDS, diverged: Sequence[str] = ()) -> dict[str, Any]:
    """Parity for one worker count, from the step losses of each run that finished; DIVERGED, judging nothing, where a
    run `diverged` (contract/errors.py): its losses, and a floor measured on them, say nothing of summation order.

    PASS needs every requested backend and the reference(s), each backend within what passes of the reference that
    computes as it does, and the backends within it of each other, unless their difference is explained: each
    matches its own reference, and those references differ only in the rounding order they emulate. What passes is
    the tolerance, or past two workers, at each step, MARGIN x the floor LAG steps later (`floor_per_step`), when
    larger.
    """
    if diverged:
        return {"steps": 0, "tolerance": tolerance, "max_abs_step_loss_difference": {}, "floor": None,
                "explained": {}, "informational": {}, "verdict": "DIVERGED",
                "why": f"{', '.join(diverged)} diverged, so parity is not judged; lower --lr"}
    refs = {arm: reference_for(arm, losses) for arm in backends}
    floor = floor_per_step(losses, steps)
    compared_runs = [*backends, REFERENCE, *sorted({r for r in refs.values() if r != REFERENCE}),
                     *([REORDERED] if floor is not None else [])]
    pairs, over, explained = {}, {}, {}

    def diff(a: str, b: str) -> float | None:
        return max_step_difference(losses[a], losses[b], steps) if a in losses and b in losses else None

    def within(pair: str) -> bool:
        return over.get(pair) is not None and over[pair] <= 1

    for a, b in [*combinations(backends, 2), *refs.items()]:
        if a in losses and b in losses:
            pairs[f"{a} vs {b}"] = diff(a, b)
            over[f"{a} vs {b}"] = beyond(losses[a], losses[b], steps, tolerance, floor)
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
        "floor": None if floor is None else {
            "pair": f"{floor_base(losses)} vs {REORDERED}", "margin": MARGIN, "lag_steps": LAG,
            "largest": max(floor, default=None),
            "per_step": floor, "worst_over_allowance": over},
        "explained": explained,
        "informational": info,
        "verdict": "PASS" if passed else "FAIL",
        "why": None if passed else (f"{', '.join(missing)} did not finish" if missing else
                                    "a step-loss difference exceeds the " +
                                    ("floor" if floor is not None else "tolerance")),
    }


def largest(verdict: dict[str, Any]) -> float | None:
    """The largest step-loss difference of the verdict's pairs, None where no pair had a step."""
    return max((d for d in verdict["max_abs_step_loss_difference"].values() if d is not None), default=None)


def floor_words(verdict: dict[str, Any]) -> str:
    """The floor, to print beside the difference: empty at two workers or fewer, where none is measured."""
    floor = verdict.get("floor")
    if not floor:
        return ""
    return (f"summation-order floor {text.number(floor['largest'])} ({floor['pair']}; a step passes within "
            f"{floor['margin']:g}x the floor {floor['lag_steps']} steps later"
            + (f"; {floor['measured']}" if floor.get("measured") else "") + ")")


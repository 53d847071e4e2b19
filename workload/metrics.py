"""Timing statistics, computed the same way for every backend (after the cross-rank gather)."""

import torch
from torch import Tensor

from contract.phases import BLOCK_STEPS, STEP_PHASES, THREAD_GROUPS


def percentile(values: Tensor, q: float) -> float:
    return float(torch.quantile(values.double(), q / 100))


def mean_ci95(values: Tensor) -> tuple[float, float]:
    """Mean and 1.96 standard deviations, as Horovod's synthetic benchmark reports throughput."""
    values = values.double()
    std = float(values.std()) if values.numel() > 1 else 0.0
    return float(values.mean()), 1.96 * std


def median_rate(samples: Tensor, step: Tensor) -> float:
    """All workers' samples/s at the median step of `step` [world, steps], with the median samples a step."""
    return step.shape[0] * percentile(samples.flatten(), 50) / max(percentile(step.flatten(), 50), 1e-12)


def blocks(samples: Tensor, step: Tensor) -> list[float]:
    """`median_rate` of each whole block of BLOCK_STEPS consecutive steps; a shorter rest is left out."""
    return [median_rate(samples[:, i : i + BLOCK_STEPS], step[:, i : i + BLOCK_STEPS])
            for i in range(0, step.shape[1] - BLOCK_STEPS + 1, BLOCK_STEPS)]


PHASE_COLUMNS = {"data": 0, "wait": 2, "forward": 5, "backward": 6, "optimizer": 7}
"""Where each of contract/phases.py's STEP_PHASES is in a step's row of `times` (trainer._steps)."""


def phases(measured: Tensor, step: Tensor) -> dict[str, float]:
    """Each phase's mean over the middle half of the measured steps of every rank (by step time, the quickest and
    slowest quarter left out), the same steps' mean step, and what each step leaves outside the phases (zeroing the
    gradients, the reference's emulated averaging, bookkeeping): the parts add up to the step. Medians taken phase by
    phase do not (Horovod's wait is heavy-tailed), and a mean over every step carries the odd stalled one."""
    flat = step.flatten()
    quarter = flat.numel() // 4  # by rank, not by value: a few steps still leave one in the middle
    middle = flat.argsort()[quarter:flat.numel() - quarter]
    chosen = {name: measured[..., column].flatten()[middle] for name, column in PHASE_COLUMNS.items()}
    out = {name: float(chosen[name].double().mean()) for name in STEP_PHASES}
    mean_step = float(flat[middle].double().mean())
    return {**out, "step": mean_step, "remainder": mean_step - sum(out.values())}


def epoch_timing(times: Tensor, warmup_steps: int) -> dict[str, float]:
    """Statistics of one epoch from `times` [world, steps, 4, 5 or 8] holding (data, compute, sync) seconds, the
    samples each step processed and, in a fifth column, the CPU seconds the rank's process spent in it (every thread:
    the framework's communication threads too), then forward, backward and optimizer seconds, per rank and step. The
    first `warmup_steps` steps of the epoch are left out; the launchers refuse epochs that would leave none
    (runtime/preflight.py).
    """
    assert times.shape[1] > warmup_steps, "preflight.check_epoch_length lets no such epoch through"
    measured = times[:, warmup_steps:]
    step = measured[..., :3].sum(-1)  # [world, steps]
    samples = measured[..., 3]
    per_worker = samples / step.clamp_min(1e-12)
    rate, rate_ci = mean_ci95(per_worker.flatten())
    total = float(step.sum())
    median_step = percentile(step.flatten(), 50)
    return {
        "samples_per_s": rate * times.shape[0],
        "samples_per_s_per_worker": rate,
        "samples_per_s_per_worker_ci95": rate_ci,
        # The steady-state figure for comparing runs: the median ignores the odd stalled step that a mean
        # (and so samples_per_s) carries in full on a busy machine.
        "samples_per_s_median": median_rate(samples, step),
        "block_samples_per_s": blocks(samples, step),
        "step_time_p50_s": median_step,
        "step_time_p95_s": percentile(step.flatten(), 95),
        "data_share": float(measured[..., 0].sum()) / total,
        "comm_share": float(measured[..., 2].sum()) / total,
        "measured_steps": int(measured.shape[1]),
        # The wait after backward for the averaged gradients, per step, over every rank: what overlap leaves exposed.
        "comm_exposed_s": float(measured[..., 2].mean()),
        # Each rank's median wait: the rank that waits least is the one the others wait for.
        "wait_s_median_per_rank": measured[..., 2].median(1).values.tolist(),
        **({"cpu_s_per_1k_samples": 1000 * float(measured[..., 4].sum()) / max(float(samples.sum()), 1e-12)}
           if times.shape[-1] > 4 else {}),
        **({"phases_s": phases(measured, step)} if times.shape[-1] > 7 else {}),
    }


def cpu_by_thread(by_thread: Tensor, samples: Tensor) -> dict[str, dict[str, object]]:
    """CPU-seconds per 1,000 samples of each thread group (workload/threads.py) from `by_thread` [world, groups] and
    the samples each rank measured: over all ranks, and per rank; nothing where a rank had no per-thread times."""
    if bool(torch.isnan(by_thread).any()):
        return {}
    per_rank = 1000 * by_thread / samples.clamp_min(1e-12)[:, None]
    return {"cpu_s_per_1k_by_thread": {"groups": list(THREAD_GROUPS),
                                       "all_ranks": (1000 * by_thread.sum(0) / samples.sum().clamp_min(1e-12)).tolist(),
                                       "per_rank": per_rank.tolist()}}

"""Timing statistics, computed the same way for every backend (after the cross-rank gather)."""

import torch
from torch import Tensor

from contract.phases import STEP_PHASES


def percentile(values: Tensor, q: float) -> float:
    return float(torch.quantile(values.double(), q / 100))


def mean_ci95(values: Tensor) -> tuple[float, float]:
    """Mean and 1.96 standard deviations, as Horovod's synthetic benchmark reports throughput."""
    values = values.double()
    std = float(values.std()) if values.numel() > 1 else 0.0
    return float(values.mean()), 1.96 * std


PHASE_COLUMNS = {"data": 0, "wait": 2, "forward": 5, "backward": 6, "optimizer": 7}
"""Where each of contract/phases.py's STEP_PHASES is in a step's row of `times` (trainer._steps)."""


def phases(measured: Tensor, step: Tensor) -> dict[str, float]:
    """Each phase's median over the measured steps of every rank, the median step, and the median of what each step
    leaves outside the phases (zeroing the gradients, the reference's emulated averaging, bookkeeping)."""
    columns = [measured[..., column] for column in PHASE_COLUMNS.values()]
    left = step - torch.stack(columns).sum(0)
    return {**{name: percentile(measured[..., PHASE_COLUMNS[name]].flatten(), 50) for name in STEP_PHASES},
            "step": percentile(step.flatten(), 50), "remainder": percentile(left.flatten(), 50)}


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
        "samples_per_s_median": times.shape[0] * percentile(samples.flatten(), 50) / max(median_step, 1e-12),
        "step_time_p50_s": median_step,
        "step_time_p95_s": percentile(step.flatten(), 95),
        "data_share": float(measured[..., 0].sum()) / total,
        "comm_share": float(measured[..., 2].sum()) / total,
        "measured_steps": int(measured.shape[1]),
        # The wait after backward for the averaged gradients, per step, over every rank: what overlap leaves exposed.
        "comm_exposed_s": float(measured[..., 2].mean()),
        **({"cpu_s_per_1k_samples": 1000 * float(measured[..., 4].sum()) / max(float(samples.sum()), 1e-12)}
           if times.shape[-1] > 4 else {}),
        **({"phases_s": phases(measured, step)} if times.shape[-1] > 7 else {}),
    }

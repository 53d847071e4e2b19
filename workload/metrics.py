"""Timing statistics, computed the same way for every backend (after the cross-rank gather)."""

import math

import torch
from torch import Tensor


def percentile(values: Tensor, q: float) -> float:
    return float(torch.quantile(values.double(), q / 100))


def mean_ci95(values: Tensor) -> tuple[float, float]:
    """Mean and 1.96 standard deviations, as Horovod's synthetic benchmark reports throughput."""
    values = values.double()
    std = float(values.std()) if values.numel() > 1 else 0.0
    return float(values.mean()), 1.96 * std


def epoch_timing(times: Tensor, batch_size: int, warmup_steps: int) -> dict[str, float]:
    """Statistics of one epoch from `times` [world, steps, 3] holding (data, compute, sync) seconds per step.

    The first `warmup_steps` steps of the epoch are left out, unless that would leave none.
    """
    measured = times[:, warmup_steps:] if times.shape[1] > warmup_steps else times
    step = measured.sum(-1)  # [world, steps]
    per_worker = batch_size / step.clamp_min(1e-12)
    rate, rate_ci = mean_ci95(per_worker.flatten())
    total = float(step.sum())
    return {
        "samples_per_s": rate * times.shape[0],
        "samples_per_s_per_worker": rate,
        "samples_per_s_per_worker_ci95": rate_ci,
        "step_time_p50_s": percentile(step.flatten(), 50),
        "step_time_p95_s": percentile(step.flatten(), 95),
        "data_share": float(measured[..., 0].sum()) / total if total else math.nan,
        "comm_share": float(measured[..., 2].sum()) / total if total else math.nan,
        "measured_steps": int(measured.shape[1]),
    }

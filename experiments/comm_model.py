"""A model of one training step per backend, fitted to link sweeps, and what it predicts past this machine.

A step is the worker's compute C plus the part of the gradient allreduce it waits for. Both backends average with
Gloo's ring on this CPU build, so an allreduce of b bytes over N nodes costs 2(N−1) messages and 2(N−1)/N · b bytes
on each node's link; per message α, per byte 8/rate on the link (1/η of it: the share of the link the ring gets)
plus the host's own cost per byte (copies, the CPU's reduction, the veth: what an unshaped link still costs):

    total = messages · 2(N−1) · α + 2(N−1)/N · bytes · (8 / (η · rate) + h)
    waited = max(0, total − ω · C)      # ω: the share of compute that communication overlaps

The backends differ in the messages: DDP sends one per bucket (`--bucket-mb`, its first bucket capped at 1 MiB),
plus the forward pass's broadcast of the BatchNorm buffers; Horovod fuses every gradient ready in one cycle into one
message (up to its fusion threshold). Where the runs measured their averaging alone and the wait after backward
(results.json's `overlap`, every run since the model registry), α, η and h are fitted to the averaging alone and ω
to what backward hid of it, (alone − wait) ÷ C; older sweeps fit α, η and h to the waits, ω fixed at 0. Either way
per backend, on 2-node sweeps, resampled (bootstrap over runs) to carry their range into every prediction.

A run's model is the ConvNet at a width (an int) or a model of the registry by name (contract/models.py).
"""

import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from analysis import runs, speed
from contract.config import BACKENDS, ConfigError
from contract.options import DDP_DEFAULT_BUCKET_MB, HOROVOD_DEFAULT_FUSION_MB
from experiments import regime

MIB = 1024 * 1024
DDP_FIRST_BUCKET_BYTES = MIB  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
OVERLAPS = (0.0,)
"""ω tried by the fit. Searched over 0 to 0.5, it traded against h on the 2-node sweeps (compute grows with the
gradient, as the bytes do): h came out anywhere in 0–100 ns/B and a 100 MB gradient's prediction anywhere in
0.01–50. Fixed at 0, the overlap each backend gets shows in its effective η and h instead (docs/cluster.md)."""
BOOTSTRAP = 200
SEED = 0


@dataclass(frozen=True)
class Gradient:
    """What one step's allreduce moves: the bytes in each DDP bucket, and the buffers DDP broadcasts each forward."""

    name: str
    buckets: tuple[int, ...]
    buffer_bytes: int = 0

    @property
    def bytes(self) -> int:
        return sum(self.buckets)


def gradient_of_mb(megabytes: float, bucket_mb: float = 0.0) -> Gradient:
    """A model known only by its gradient's size: DDP's buckets as DDP cuts them when no tensor exceeds a bucket
    (with its default cap, the first bucket holds 1 MiB)."""
    total = round(megabytes * 1e6)
    cap = round((bucket_mb or DDP_DEFAULT_BUCKET_MB) * MIB)
    first = min(total, cap if bucket_mb else DDP_FIRST_BUCKET_BYTES)
    rest = total - first
    buckets = [first] + [cap] * (rest // cap) + ([rest % cap] if rest % cap else [])
    return Gradient(f"{megabytes:g} MB", tuple(buckets))


def messages(backend: str, gradient: Gradient, bucket_mb: float) -> int:
    """Allreduces (or broadcasts) per step: DDP's buckets and its buffer broadcast; Horovod's fused messages, at least
    one per step (more when backward spans several cycles, which the fitted α then absorbs)."""
    if backend == "native":
        return len(gradient.buckets) + (1 if gradient.buffer_bytes else 0)
    fusion = (bucket_mb or HOROVOD_DEFAULT_FUSION_MB) * MIB
    return max(1, math.ceil(gradient.bytes / fusion))


def features(backend: str, gradient: Gradient, bucket_mb: float, nodes: int, bits_per_s: float | None,
             burst: int = 0) -> np.ndarray:
    """What α, 1/η and h multiply: messages, seconds at the link's rate, bytes. `burst`: the bytes a simulated
    link's token bucket lets through unlimited each step (it refills while the rank computes); a real link has none."""
    ring = 2 * (nodes - 1)
    moved = ring / nodes * gradient.bytes
    return np.array([messages(backend, gradient, bucket_mb) * ring,
                     max(0.0, moved - burst) * 8 / bits_per_s if bits_per_s else 0.0, moved])


@dataclass(frozen=True)
class Point:
    """One measured run: where it ran, and what its step cost."""

    backend: str
    nodes: int
    bits_per_s: float | None
    rate: str
    width: int | str
    """The ConvNet's width, or a registry model's name."""
    bucket_mb: float
    step_s: float
    compute_s: float
    waited_s: float
    sweep: str
    burst: int = 0
    alone_s: float | None = None
    """The run's gradient averaging alone, after training (results.json's overlap.comm_alone_s)."""
    exposed_s: float | None = None
    """Its wait after backward, per step (overlap.comm_exposed_s)."""


def points(sweep_dirs: list[str], gradient: Callable[[int, float], Gradient],
           burst: Callable[[float], int] = lambda bits: 0) -> tuple[list[Point], list[str]]:
    """Every finished Ray run of either backend in the sweeps, and a line for each comparison left out (and why).
    `burst(bits)`: the simulated link's token bucket in bytes at that rate (experiments/netsim.py sets it)."""
    out, skipped = [], []
    for sweep_dir in sweep_dirs:
        network, cells = regime.load(sweep_dir)
        for cell in cells:
            comparison = cell["comparison"]
            config = comparison["settings"]["config"]
            where = f"{sweep_dir}: {cell['rate']}, width {cell['width']}"
            if config.get("compression", "none") != "none" or config.get("grad_accumulation", 1) != 1:
                skipped.append(f"{where}: compression or gradient accumulation changes the bytes per step")
                continue
            for workers in comparison["settings"]["workers"]:
                for backend, arm_runs in runs.finished(comparison, workers).items():
                    if backend not in BACKENDS:
                        continue
                    for run in arm_runs:
                        out.append(_point(run, backend, network, cell, config, sweep_dir, burst))
    return out, skipped


def _point(run: dict[str, Any], backend: str, network: dict[str, Any], cell: dict[str, Any], config: dict[str, Any],
           sweep_dir: str, burst: Callable[[float], int]) -> Point:
    nodes = len({p["node_id"] for p in run.get("placement") or []}) or network.get("nodes", 0)
    rate, share = run.get(speed.METRIC), (run.get("epochs") or [{}])[-1].get("comm_share")
    if not (_finite_number(rate) and rate > 0 and _finite_number(share) and 0 <= share <= 1 and nodes):
        raise ConfigError(f"{sweep_dir}: {backend}'s run of round {run.get('round', '?')} at {cell['rate']} has "
                          f"{speed.METRIC} {rate!r} and comm share {share!r}, not a rate and a share: the sweep is "
                          "damaged; rerun it, or leave it out")
    step = config["batch_size"] * run["workers"] / rate
    overlap = run.get("overlap") or {}
    return Point(backend=backend, nodes=nodes, bits_per_s=cell["bits"], rate=cell["rate"], width=cell["width"],
                 bucket_mb=config.get("bucket_mb", 0.0), step_s=step, compute_s=step * (1 - share),
                 waited_s=step * share, sweep=str(sweep_dir), burst=burst(cell["bits"]) if cell["bits"] else 0,
                 alone_s=overlap.get("comm_alone_s"), exposed_s=overlap.get("comm_exposed_s"))


@dataclass(frozen=True)
class Constants:
    alpha_s: float
    """Seconds per message per ring step (with what each step costs whatever its size: a cycle's wait, a call)."""
    link_efficiency: float
    """η: the share of the link's rate the ring achieves (inf when no shaped link was measured)."""
    host_s_per_byte: float
    """h: what a byte costs with the link unshaped."""
    overlap: float
    """ω: the share of compute that communication overlaps."""

    def theta(self) -> np.ndarray:
        return np.array([self.alpha_s, 1 / self.link_efficiency if self.link_efficiency else 0.0,
                         self.host_s_per_byte])


def waited(constants: Constants, x: np.ndarray, compute_s: float) -> float:
    return max(0.0, float(x @ constants.theta()) - constants.overlap * compute_s)


def _least_squares(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares over the three terms: the best fit among the subsets whose solution is >= 0."""
    best, best_error = np.zeros(x.shape[1]), float(np.sum(y**2))
    for mask in range(1, 2 ** x.shape[1]):
        columns = [i for i in range(x.shape[1]) if mask >> i & 1]
        solution, *_ = np.linalg.lstsq(x[:, columns], y, rcond=None)
        if np.any(solution < 0):
            continue
        theta = np.zeros(x.shape[1])
        theta[columns] = solution
        error = float(np.sum((x @ theta - y) ** 2))
        if error < best_error:
            best, best_error = theta, error
    return best


def _waits(y: np.ndarray) -> np.ndarray:
    """The runs a fit from the waits uses: one that waited for nothing says only that ω·C covered its comm."""
    return y > 0


def _constants(theta: np.ndarray, overlap: float) -> Constants:
    """The constants from the least-squares coefficients of (messages, link seconds, bytes)."""
    return Constants(alpha_s=float(theta[0]), link_efficiency=1 / theta[1] if theta[1] > 0 else math.inf,
                     host_s_per_byte=float(theta[2]), overlap=overlap)


def fit_arrays(x: np.ndarray, compute: np.ndarray, y: np.ndarray,
               overlaps: tuple[float, ...] = OVERLAPS) -> Constants:
    """The constants that best explain the waits `y`: for each ω, a linear fit of y + ω·C, kept where the predicted
    waits (floored at 0) come closest to all of them."""
    best, best_error = None, math.inf
    waits = _waits(y)
    for overlap in overlaps:
        theta = _least_squares(x[waits], (y + overlap * compute)[waits])
        predicted = np.maximum(0.0, x @ theta - overlap * compute)
        error = float(np.sum((predicted - y) ** 2))
        if error < best_error - 1e-15:
            best, best_error = (theta, overlap), error
    theta, overlap = best
    return _constants(theta, overlap)


@dataclass
class Fit:
    backend: str
    constants: Constants
    samples: list[Constants]
    points: list[Point]
    residuals: list[float]
    """Per point: (predicted − measured) ÷ measured step time."""
    rank: int
    """How many of α, 1/η and h the runs tell apart: below 3, some trade against each other and the fit's choice
    among them is arbitrary (one gradient in one bucket count cannot part a message's cost from a byte's)."""

    def summary(self) -> dict[str, Any]:
        def span(values: list[float]) -> list[float]:
            finite = [v for v in values if math.isfinite(v)]
            return [float(np.percentile(finite, 2.5)), float(np.percentile(finite, 97.5))] if finite else [math.inf] * 2

        return {"backend": self.backend, "points": len(self.points),
                **{name: _finite(value) for name, value in asdict(self.constants).items()},
                "ci95": {name: [_finite(v) for v in span([getattr(s, name) for s in self.samples])]
                         for name in asdict(self.constants)},
                "residual_rms": math.sqrt(statistics.fmean(r * r for r in self.residuals)),
                "residual_max": max(map(abs, self.residuals)), "rank": self.rank}


def _finite_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _finite(value: float) -> float | None:
    """JSON has no infinity: an η the fit did not bound (no shaped link measured, or the link term not needed)."""
    return value if math.isfinite(value) else None


def fit_measured(x: np.ndarray, compute: np.ndarray, alone: np.ndarray, exposed: np.ndarray) -> Constants:
    """α, η and h from the averaging alone; ω from what backward hid of it, (alone − wait) ÷ C, the median over the
    runs, within 0-1."""
    theta = _least_squares(x, alone)
    overlap = float(np.clip(np.median((alone - exposed) / np.maximum(compute, 1e-12)), 0.0, 1.0))
    return _constants(theta, overlap)


def fit(backend: str, fitted: list[Point], gradient: Callable[[int | str, float], Gradient]) -> Fit:
    """The constants from `fitted` (one backend's points), and BOOTSTRAP resamples of them: from each run's averaging
    alone and its wait where every run measured both, else from the waits with ω at 0."""
    if len({(p.rate, p.width) for p in fitted}) < 2:
        raise ConfigError(f"{backend}: the fit needs runs at two or more link rates or widths, got "
                          f"{len(fitted)} run(s); pass a sweep made with --link-rates a,b (or --model-width a,b)")
    if len(fitted) <= len(Constants.__dataclass_fields__) - 1:
        raise ConfigError(f"{backend}: the fit of 3 constants needs more runs than that, at least 4, got "
                          f"{len(fitted)}; pass a sweep with more rates or widths, or made with --repeats 2")
    x = np.array([features(backend, gradient(p.width, p.bucket_mb), p.bucket_mb, p.nodes, p.bits_per_s, p.burst)
                  for p in fitted])
    compute = np.array([p.compute_s for p in fitted])
    y = np.array([p.waited_s for p in fitted])
    measured = all(p.alone_s is not None and p.exposed_s is not None for p in fitted)
    if measured:
        alone, exposed = np.array([p.alone_s for p in fitted]), np.array([p.exposed_s for p in fitted])

        def one(pick: np.ndarray) -> Constants:
            return fit_measured(x[pick], compute[pick], alone[pick], exposed[pick])
    else:
        def one(pick: np.ndarray) -> Constants:
            return fit_arrays(x[pick], compute[pick], y[pick])
    constants = one(np.arange(len(fitted)))
    rng = np.random.default_rng(SEED)
    samples = [one(rng.integers(0, len(fitted), len(fitted))) for _ in range(BOOTSTRAP)]
    residuals = [(p.compute_s + waited(constants, row, p.compute_s) - p.step_s) / p.step_s
                 for p, row in zip(fitted, x, strict=True)]
    used = x if measured else x[_waits(y)]  # the rows the fit used
    scaled = used / np.maximum(np.abs(used).max(axis=0), 1e-300)  # each term to 1, so that seconds and bytes compare
    return Fit(backend, constants, samples, fitted, residuals, int(np.linalg.matrix_rank(scaled, tol=1e-6)))


def step(fitted: Fit, gradient: Gradient, bucket_mb: float, nodes: int, bits_per_s: float | None,
         compute_s: float, burst: int = 0) -> tuple[float, float, float]:
    """Predicted step time, and its 95 % range over the resampled constants."""
    x = features(fitted.backend, gradient, bucket_mb, nodes, bits_per_s, burst)
    values = [compute_s + waited(c, x, compute_s) for c in fitted.samples]
    return (compute_s + waited(fitted.constants, x, compute_s), float(np.percentile(values, 2.5)),
            float(np.percentile(values, 97.5)))


def ratio_range(fits: dict[str, Fit], gradient: Gradient, bucket_mb: float, nodes: int, bits_per_s: float | None,
                compute: dict[str, float], burst: int = 0) -> tuple[float, float, float]:
    """native ÷ Horovod in samples/s (Horovod's step time over native's), and its 95 % range: the two backends'
    resampled constants paired sample by sample (each bootstrap draws the two fits' runs independently)."""
    xs = {b: features(b, gradient, bucket_mb, nodes, bits_per_s, burst) for b in BACKENDS}

    def one(n: Constants, h: Constants) -> float:
        native = compute["native"] + waited(n, xs["native"], compute["native"])
        horovod = compute["horovod"] + waited(h, xs["horovod"], compute["horovod"])
        return horovod / native

    values = [one(n, h) for n, h in zip(fits["native"].samples, fits["horovod"].samples, strict=True)]
    return (one(fits["native"].constants, fits["horovod"].constants), float(np.percentile(values, 2.5)),
            float(np.percentile(values, 97.5)))


order = regime.model_order


def compute_by_width(fitted: list[Point]) -> dict[int | str, float]:
    """Median compute per step at each width (or model) measured."""
    widths: dict[int | str, list[float]] = {}
    for p in fitted:
        widths.setdefault(p.width, []).append(p.compute_s)
    return {w: statistics.median(widths[w]) for w in sorted(widths, key=order)}


def compute_at(measured: dict[int | str, float], parameters: dict[int | str, int],
               width: int | str) -> tuple[float, bool] | None:
    """Compute per step at `width`: measured, or for a ConvNet width a straight line through the measured widths'
    (parameters, compute) (one width: proportional to it); the flag says it was extrapolated. None for a model of
    another architecture not measured: its compute cannot be read off the ConvNet's."""
    if width in measured:
        return measured[width], False
    measured = {w: s for w, s in measured.items() if isinstance(w, int)}
    if isinstance(width, str) or not measured:
        return None
    xs = np.array([parameters[w] for w in measured], dtype=float)
    ys = np.array(list(measured.values()))
    if len(xs) == 1:
        return float(ys[0] * parameters[width] / xs[0]), True
    slope, intercept = np.polyfit(xs, ys, 1)
    return float(max(intercept + slope * parameters[width], min(ys))), True

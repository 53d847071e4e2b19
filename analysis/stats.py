"""Statistics for a speed verdict from repeated, paired runs of two arms (native DDP and Horovod).

Pure standard library on purpose: the orchestrator and the report both call it, and its numbers must not depend
on which array library happens to be installed. Throughputs are compared as ratios on a log scale, because a
slow minute on the machine scales both arms of one round alike, and the log makes that scaling cancel.
"""

import functools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

_CF_MAX_ITERATIONS = 100_000  # the continued fraction needs about sqrt(df) terms, so this covers df up to ~1e9
_CF_EPS = 1e-15
_TINY = 1e-300  # keeps Lentz's method away from dividing by zero


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz), converging for x < (a+1)/(a+b+2)."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _CF_MAX_ITERATIONS):
        # Each m contributes one even and one odd term of the fraction.
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1.0) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1.0)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _CF_EPS:
            return h
    raise ArithmeticError(f"incomplete beta did not converge for a={a}, b={b}, x={x}")


def _regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = a * math.log(x) + b * math.log1p(-x) - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))
    front = math.exp(log_front)
    # The fraction converges fast only on one side of the mean; use the symmetry I_x(a,b) = 1 - I_{1-x}(b,a).
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_continued_fraction(a, b, x) / a
    return 1.0 - front * _beta_continued_fraction(b, a, 1.0 - x) / b


def _t_upper_tail(t: float, df: int) -> float:
    """P(T > t) for t >= 0; the tail is computed directly so that p close to 1 loses no precision."""
    return 0.5 * _regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


@functools.cache  # rounds_to_decide asks for up to MAX_ROUNDS of them per estimate, and each is a bisection
def t_quantile(p: float, df: int) -> float:
    """Student-t quantile, computed rather than looked up, so any confidence level and any repeat count work."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must lie strictly between 0 and 1, got {p}")
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    tail = 1.0 - p
    lo, hi = 0.0, 1.0
    while _t_upper_tail(hi, df) > tail:  # the tail falls as t grows: widen until the root is bracketed
        lo, hi = hi, 2.0 * hi
    # Bisection: slower than Newton but cannot diverge, and ~60 halvings reach double precision.
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if _t_upper_tail(mid, df) > tail:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


@dataclass(kw_only=True, slots=True, frozen=True)
class RatioEstimate:
    """How much faster arm a is than arm b, from paired rounds, with its uncertainty."""

    ratio: float
    """Geometric mean of the paired ratios a_i / b_i (the mean log ratio, exponentiated)."""
    ci95: tuple[float, float] | None
    """t interval on the mean log ratio, exponentiated, at `confidence` (0.95 unless asked); None when n == 1."""
    n: int
    """Number of pairs (repeats)."""
    ratios: tuple[float, ...]
    """Each pair's ratio, in round order, so a drifting machine shows up in the report."""
    confidence: float = 0.95
    """Confidence level of `ci95`, kept so a sentence never calls a 90 % interval a 95 % one."""
    pilot: int | None = None
    """Where the count of pairs was chosen from a pilot (two_stage_ratio): the pilot's pairs, whose spread alone
    sets the interval; None for a fixed count."""


def paired_ratio(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> RatioEstimate:
    """Ratio of a to b from pairs run in the same round, so that round-to-round machine noise cancels."""
    if len(a) != len(b):
        raise ValueError(f"paired runs need the same number of values, got {len(a)} and {len(b)}")
    if not a:
        raise ValueError("paired runs need at least one pair")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")
    for value in (*a, *b):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"every value must be finite and > 0, got {value}")
    ratios = tuple(x / y for x, y in zip(a, b))
    if len(ratios) == 1:
        # One pair has no spread to measure; an interval from it would be invented.
        return RatioEstimate(ratio=ratios[0], ci95=None, n=1, ratios=ratios, confidence=confidence)
    return _log_interval(ratios, confidence)


def two_stage_ratio(a: Sequence[float], b: Sequence[float], pilot: int, confidence: float = 0.95) -> RatioEstimate:
    """The ratio of a to b when the number of pairs was chosen from the first `pilot` pairs (Stein's two-stage
    procedure): the mean over every pair, the spread from the pilot's alone, with the pilot's degrees of freedom.

    Its coverage holds exactly for normal log ratios whatever the pilot showed, because the count depended on the
    pilot's spread only (Stein 1945). A t interval recomputed after every round, stopping once it is narrow
    enough, covers less than it claims; this one does not."""
    if not 2 <= pilot <= len(a):
        raise ValueError(f"a two-stage interval needs a pilot of 2 to {len(a)} pairs, got {pilot}")
    return _log_interval(paired_ratio(a, b, confidence).ratios, confidence, pilot)


def _log_interval(ratios: tuple[float, ...], confidence: float, pilot: int | None = None) -> RatioEstimate:
    """The geometric mean of `ratios` and its t interval on the logs, the spread from the pilot's where one ran."""
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    half = _t_half(logs[:pilot] if pilot else logs, len(logs), confidence)
    return RatioEstimate(ratio=math.exp(mean), ci95=(math.exp(mean - half), math.exp(mean + half)), n=len(logs),
                         ratios=ratios, confidence=confidence, pilot=pilot)


def _t_half(spread: Sequence[float], n: int, confidence: float) -> float:
    """The half-width of a t interval on a mean of `n` values, the spread and degrees of freedom from `spread`."""
    return t_quantile((1.0 + confidence) / 2.0, len(spread) - 1) * statistics.stdev(spread) / math.sqrt(n)


def two_stage_rounds(pilot_ratios: Sequence[float], target: float, confidence: float = 0.95) -> int:
    """The pairs in all that Stein's procedure needs for a half-width of `target` (0.03: ±3 %) after this pilot:
    at least the pilot itself."""
    logs = [math.log(r) for r in pilot_ratios]
    if len(logs) < 2:
        raise ValueError("a pilot needs at least 2 pairs to measure its spread")
    return max(len(logs), math.ceil((_t_half(logs, 1, confidence) / math.log1p(target)) ** 2))


WIDE = 0.5
"""An interval wider than ±50 % says nothing a reader can use: with too few rounds for a useful one, the rounds' own
values are shown and how many rounds an interval would need."""


def too_few(ratios: Sequence[float], target: float = 0.1) -> str:
    """The rounds' values, and the rounds in all a ±`target` interval would need at their spread."""
    shown = ", ".join(f"{r:.2f}" for r in ratios)
    if len(ratios) < 2:
        return f"the round's ratio was {shown}"
    return (f"the rounds' ratios were {shown}; at their spread a ±{100 * target:g} % interval needs about "
            f"{two_stage_rounds(ratios, target)} rounds")


def interval_text(estimate: Mapping[str, Any]) -> str:
    """` (lo–hi)` for a stored estimate whose interval is useful; else the rounds' values where they are stored."""
    if not estimate.get("ci95"):
        return ""
    if stored_half_width(estimate) > WIDE and estimate.get("ratios"):
        return f" (rounds {', '.join(f'{r:.2f}' for r in estimate['ratios'])}: too few for an interval)"
    lo, hi = estimate["ci95"]
    return f" ({lo:.2f}–{hi:.2f})"


def stored_half_width(estimate: Mapping[str, object]) -> float:
    """The half-width of an estimate as comparison.json stores it (one with an interval); from the interval's ends
    where it was written before the half-width was stored."""
    return estimate.get("half_width") or _half_width(*estimate["ci95"])


def resolution(floor: Mapping[str, Mapping[str, Any]]) -> float | None:
    """The A/A resolution of stored estimates (each arm against its twin): their widest half-width; None where none
    has an interval."""
    return max((stored_half_width(e) for e in floor.values() if e["ci95"] is not None), default=None)


def half_width(estimate: RatioEstimate) -> float | None:
    """The interval's half-width as a fraction of the ratio (0.03: ±3 %), on the log scale where it is symmetric;
    None without an interval."""
    return None if estimate.ci95 is None else _half_width(*estimate.ci95)


def _half_width(lo: float, hi: float) -> float:
    return math.sqrt(hi / lo) - 1.0


UNDECIDED = "undecided"
"""The verdict where the interval reaches 1: at this resolution the noise could explain the gap."""
MAX_ROUNDS = 200
"""The most rounds `rounds_to_decide` looks ahead: a gap that needs more is within this machine's noise."""


def speed_verdict(estimate: RatioEstimate) -> str:
    """A winner only when the whole interval is on one side of 1; otherwise undecided."""
    if estimate.ci95 is None:
        return UNDECIDED
    lo, hi = estimate.ci95
    if lo > 1.0:
        return "native faster"
    if hi < 1.0:
        return "horovod faster"
    return UNDECIDED


def rounds_to_decide(estimate: RatioEstimate) -> int | None:
    """For an undecided estimate, the rounds in all at which its interval would just clear 1, were the gap and the
    spread measured so far to hold (an even chance of a verdict then, not a promise; and rounds added after a look
    call for --target-ci's two stages). The spread and degrees of freedom are the pilot's where a pilot set them.
    None for a decided estimate, without a spread (one round), or where no count up to MAX_ROUNDS would do."""
    if estimate.n < 2 or speed_verdict(estimate) != UNDECIDED:
        return None
    logs = [math.log(r) for r in estimate.ratios]
    spread_from = logs[:estimate.pilot] if estimate.pilot else logs
    gap, sd = abs(statistics.fmean(logs)), statistics.stdev(spread_from)
    if gap == 0.0:
        return None
    level = (1.0 + estimate.confidence) / 2.0
    for n in range(estimate.n + 1, MAX_ROUNDS + 1):
        if t_quantile(level, (estimate.pilot or n) - 1) * sd / math.sqrt(n) < gap:
            return n
    return None


def _signed_percent(value: float) -> str:
    # A true minus sign, so that "−3.1" and "+4.0" line up in rendered Markdown.
    return f"{value:+.1f}".replace("-", "\u2212")


def speed_sentence(estimate: RatioEstimate, one_round: str | None = None) -> str:
    """The verdict as one sentence, with the gap stated from the winner's side so the percentage reads naturally;
    `one_round`: what to do where one round gave no interval (else: run with --repeats 2 or more)."""
    r = estimate.ratio
    if estimate.ci95 is None:
        return (f"one repeat gives no interval, so no verdict: {one_round or 'run with --repeats 2 or more'} "
                f"(single-run ratio: {_signed_percent(100.0 * (r - 1.0))} %)")
    lo, hi = estimate.ci95
    label, width = f"{100.0 * estimate.confidence:g} % CI", f"±{100.0 * half_width(estimate):.1f} %"
    verdict = speed_verdict(estimate)
    if verdict == UNDECIDED and half_width(estimate) > WIDE:
        return (f"{estimate.n} rounds give no useful interval (±{100.0 * half_width(estimate):.0f} %), so no "
                f"verdict: {too_few(estimate.ratios)}")
    if verdict == "native faster":
        return (f"native is {100.0 * (r - 1.0):.1f} % faster ({label} {100.0 * (lo - 1.0):.1f}–"
                f"{100.0 * (hi - 1.0):.1f} %, {width})")
    if verdict == "horovod faster":
        # Horovod's gain over native is 1/r - 1; inverting swaps the interval's ends.
        return (f"Horovod is {100.0 * (1.0 / r - 1.0):.1f} % faster ({label} {100.0 * (1.0 / hi - 1.0):.1f}–"
                f"{100.0 * (1.0 / lo - 1.0):.1f} %, {width})")
    # Signed, native relative to Horovod, because here neither side is the winner to measure from.
    needed = rounds_to_decide(estimate)
    outlook = (f"about {needed - estimate.n} more round(s) would just clear 1 if the gap and spread held (an even "
               "chance; --target-ci picks the rounds validly)" if needed else
               f"a gap this small would take more than {MAX_ROUNDS} rounds to decide")
    return (f"undecided at this resolution (native vs Horovod: {label} {_signed_percent(100.0 * (lo - 1.0))} – "
            f"{_signed_percent(100.0 * (hi - 1.0))} %, {width}); {outlook}")


def cost_sentence(estimate: RatioEstimate) -> str:
    """native ÷ Horovod as a cost (lower is cheaper) in one sentence: who uses less, by how much, with the interval."""
    r = estimate.ratio
    if estimate.ci95 is None:
        return f"one repeat gives no interval (single-run ratio {r:.3f})"
    lo, hi = estimate.ci95
    width = f"±{100.0 * half_width(estimate):.1f} %"
    if hi < 1.0:
        return (f"native uses {100.0 * (1 - r):.1f} % less (95 % CI {100 * (1 - hi):.1f}–{100 * (1 - lo):.1f} %, "
                f"{width})")
    if lo > 1.0:
        return (f"Horovod uses {100.0 * (1 - 1 / r):.1f} % less (95 % CI {100 * (1 - 1 / lo):.1f}–"
                f"{100 * (1 - 1 / hi):.1f} %, {width})")
    return f"undecided (native ÷ Horovod 95 % CI {lo:.3f}–{hi:.3f}, {width})"


def balanced_order(arms: Sequence[T], repeats: int) -> list[tuple[int, T]]:
    """(round, arm) in a Williams design, so a slow minute on the machine hits every arm alike: over a cycle of rounds
    each arm takes every place in a round equally often and follows every other arm equally often; each round's
    next is its mirror. Two arms: A B, B A, A B, …"""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if not arms:
        return []
    cycle = _williams(len(arms))
    return [(r, arms[i]) for r in range(repeats) for i in cycle[r % len(cycle)]]


def _williams(n: int) -> list[list[int]]:
    """The rounds of a Williams square over n arms (n rounds; 2n, each row beside its mirror, where n is odd)."""
    first, low, high = [0], 1, n - 1
    for place in range(1, n):
        first.append(low if place % 2 else high)
        low, high = (low + 1, high) if place % 2 else (low, high - 1)
    rows = [[(i + k) % n for i in first] for k in range(n)]
    if n % 2:
        return [order for row in rows for order in (row, row[::-1])]
    return [order for k in range(n // 2) for order in (rows[k], rows[k + n // 2])]  # row k + n/2 mirrors row k


def variance_parts(launches: Sequence[Sequence[float]]) -> dict[str, float | int] | None:
    """One arm's spread taken apart, from each launch's block values (one-way random effects): `within`, the
    block-to-block standard deviation inside a launch, pooled over the launches; `between`, the standard deviation of
    the launches' own levels beyond what their blocks' spread explains (0 where it explains all); `launch`, that of the
    launch means as measured. Each relative to the grand mean. None without two launches of two blocks each."""
    kept = [list(blocks) for blocks in launches if len(blocks) >= 2]
    if len(kept) < 2:
        return None
    means = [statistics.fmean(blocks) for blocks in kept]
    grand = statistics.fmean(means)
    within = sum(sum((x - m) ** 2 for x in blocks) for blocks, m in zip(kept, means)) / sum(len(b) - 1 for b in kept)
    per_launch = len(kept) / sum(1 / len(blocks) for blocks in kept)  # the harmonic mean: launches may differ
    between = max(0.0, statistics.variance(means) - within / per_launch)
    return {"launches": len(kept), "blocks": round(per_launch, 2), "within": math.sqrt(within) / grand,
            "between": math.sqrt(between) / grand, "launch": statistics.stdev(means) / grand}


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, tuple[float, float] | None]:
    """The mean and its t interval at `confidence`; no interval from one value, which has no spread to measure.

    For one arm's throughput across repeats: unpaired, so a slow minute on the machine widens it, which the
    paired ratios between arms run side by side do not suffer."""
    if not values:
        raise ValueError("an interval needs at least one value")
    mean = statistics.fmean(values)
    if len(values) == 1:
        return mean, None
    half = _t_half(values, len(values), confidence)
    return mean, (mean - half, mean + half)


def welch_interval(a: Sequence[float], b: Sequence[float], confidence: float = 0.95
                   ) -> tuple[float, tuple[float, float] | None]:
    """mean(a) − mean(b) and its Welch t interval (degrees of freedom rounded down): for samples that share no rounds,
    such as one comparison's per-round differences on two machines. No interval where either has one value."""
    if not a or not b:
        raise ValueError("a difference of means needs at least one value on each side")
    diff = statistics.fmean(a) - statistics.fmean(b)
    if len(a) < 2 or len(b) < 2:
        return diff, None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        return diff, (diff, diff)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = t_quantile((1.0 + confidence) / 2.0, max(1, math.floor(df))) * math.sqrt(va + vb)
    return diff, (diff - half, diff + half)

"""Known input, known interval, known verdict: the statistics behind every speed claim in the report."""

import math
import statistics
from collections import Counter

import pytest

from analysis import stats
from analysis.stats import (MAX_ROUNDS, RatioEstimate, balanced_order, half_width, mean_interval, paired_ratio,
                            rounds_to_decide, speed_sentence, speed_verdict, t_quantile, two_stage_ratio,
                            two_stage_rounds)


@pytest.mark.parametrize(
    ("df", "expected"), [(1, 12.706), (2, 4.303), (4, 2.776), (9, 2.262), (29, 2.045), (10**5, 1.960)],
)
def test_t_quantile_matches_the_printed_tables(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=1e-3)


def test_t_quantile_other_levels_and_symmetry():
    assert t_quantile(0.95, 10) == pytest.approx(1.812, abs=1e-3)
    assert t_quantile(0.9995, 1) == pytest.approx(636.619, abs=1e-3)  # far tail: bracket must widen a lot
    assert t_quantile(0.025, 4) == -t_quantile(0.975, 4)
    assert t_quantile(0.5, 3) == 0.0


@pytest.mark.parametrize(("p", "df"), [(0.0, 3), (1.0, 3), (0.975, 0)])
def test_t_quantile_rejects_bad_arguments(p, df):
    with pytest.raises(ValueError):
        t_quantile(p, df)


def test_identical_ratios_give_a_zero_width_interval_and_a_native_win():
    est = paired_ratio([110, 121, 99], [100, 110, 90])
    assert est.n == 3
    assert est.ratios == pytest.approx((1.1, 1.1, 1.1), abs=1e-15)
    assert est.ratio == pytest.approx(1.1, abs=1e-12)
    assert est.ci95 is not None
    assert est.ci95 == pytest.approx((1.1, 1.1), abs=1e-12)  # sd is 0, so the t factor does not matter
    assert speed_verdict(est) == "native faster"
    assert speed_sentence(est) == "native is 10.0 % faster (95 % CI 10.0–10.0 %, ±0.0 %)"


def test_interval_by_hand_for_three_pairs_contains_one():
    logs = [0.10, -0.05, 0.01]
    est = paired_ratio([100 * math.exp(x) for x in logs], [100, 100, 100])
    # By hand: mean 0.02; deviations 0.08, -0.07, -0.01; sum of squares 0.0114; sd = sqrt(0.0114 / 2).
    half = 4.303 * math.sqrt(0.0057) / math.sqrt(3)  # t_{0.975, 2} = 4.303
    assert est.ratio == pytest.approx(math.exp(0.02), abs=1e-12)
    assert est.ci95 is not None
    assert est.ci95 == pytest.approx((math.exp(0.02 - half), math.exp(0.02 + half)), abs=1e-4)
    assert est.ci95[0] == pytest.approx(0.8457, abs=1e-4) and est.ci95[1] == pytest.approx(1.2307, abs=1e-4)
    assert speed_verdict(est) == "undecided"
    assert speed_sentence(est) == (
        "undecided at this resolution (native vs Horovod: 95 % CI \u221215.4 – +23.1 %, ±20.6 %); about 55 more "
        "round(s) would just clear 1 if the gap and spread held (an even chance; --target-ci picks the rounds validly)"
    )


def test_rounds_to_decide_is_the_fewest_whose_interval_would_clear_one():
    est = paired_ratio([100 * math.exp(x) for x in [0.10, -0.05, 0.01]], [100, 100, 100])
    gap, sd = 0.02, math.sqrt(0.0057)  # by hand, as above
    n = rounds_to_decide(est)
    assert n == 58
    assert t_quantile(0.975, n - 1) * sd / math.sqrt(n) < gap <= t_quantile(0.975, n - 2) * sd / math.sqrt(n - 1)
    # A decided estimate, no gap, or one round gives no count.
    assert rounds_to_decide(paired_ratio([110, 111, 109], [100, 100, 100])) is None
    assert rounds_to_decide(paired_ratio([100.0, 100.0], [100.0, 100.0])) is None
    assert rounds_to_decide(paired_ratio([110.0], [100.0])) is None


def test_a_gap_within_the_noise_says_so():
    est = paired_ratio([101, 99, 100.5], [100, 100, 100])
    assert "about 157 more round(s) would just clear 1 if the gap and spread held" in speed_sentence(est)
    est = paired_ratio([110, 90, 101, 99], [100, 100, 100, 100])
    assert rounds_to_decide(est) is None
    assert speed_sentence(est).endswith(f"a gap this small would take more than {MAX_ROUNDS} rounds to decide")


def test_horovod_win_is_stated_from_horovods_side():
    a, b = [90, 92, 88, 91], [100, 100, 100, 100]
    est = paired_ratio(a, b)
    r = math.exp(sum(math.log(x / 100) for x in a) / 4)
    assert est.ratio == pytest.approx(r, abs=1e-12)
    assert est.ci95 is not None and est.ci95[1] < 1
    assert speed_verdict(est) == "horovod faster"
    assert speed_sentence(est).startswith(f"Horovod is {100 * (1 / r - 1):.1f} % faster (95 % CI ")
    # Round numbers: 1/0.8 = 1.25, and the interval's ends swap when inverted (1/0.9, 1/0.75).
    made = RatioEstimate(ratio=0.8, ci95=(0.75, 0.9), n=3, ratios=(0.8, 0.8, 0.8))
    assert speed_sentence(made) == "Horovod is 25.0 % faster (95 % CI 11.1–33.3 %, ±9.5 %)"


def test_native_win_sentence():
    est = RatioEstimate(ratio=1.1, ci95=(1.05, 1.2), n=3, ratios=(1.1, 1.1, 1.1))
    assert speed_sentence(est) == "native is 10.0 % faster (95 % CI 5.0–20.0 %, ±6.9 %)"


def test_interval_touching_one_is_no_verdict():
    est = RatioEstimate(ratio=1.02, ci95=(1.0, 1.04), n=2, ratios=(1.0, 1.04))
    assert speed_verdict(est) == "undecided"


def test_single_repeat_gives_no_interval_and_asks_for_more():
    est = paired_ratio([111], [100])
    assert est.ci95 is None and est.n == 1
    assert est.ratio == pytest.approx(1.11, abs=1e-12)
    assert speed_verdict(est) == "undecided"
    sentence = speed_sentence(est)
    assert "--repeats" in sentence and "+11.0 %" in sentence


def test_other_confidence_is_named_in_the_sentence():
    logs = [0.10, -0.05, 0.01]
    est = paired_ratio([100 * math.exp(x) for x in logs], [100, 100, 100], confidence=0.9)
    half = 2.920 * math.sqrt(0.0057) / math.sqrt(3)  # t_{0.95, 2} = 2.920
    assert est.ci95 == pytest.approx((math.exp(0.02 - half), math.exp(0.02 + half)), abs=1e-4)
    assert "90 % CI" in speed_sentence(est)


@pytest.mark.parametrize(("a", "b"), [
    ([1.0, 2.0], [1.0]),  # mismatched lengths
    ([], []),  # empty
    ([1.0, math.nan], [1.0, 1.0]),
    ([1.0, 1.0], [math.inf, 1.0]),
    ([0.0, 1.0], [1.0, 1.0]),
    ([1.0, 1.0], [1.0, -2.0]),
])
def test_paired_ratio_rejects_bad_input(a, b):
    with pytest.raises(ValueError):
        paired_ratio(a, b)


def test_balanced_order_alternates_direction_each_round():
    assert balanced_order(["a", "b"], 3) == [(0, "a"), (0, "b"), (1, "b"), (1, "a"), (2, "a"), (2, "b")]
    assert balanced_order(("x",), 2) == [(0, "x"), (1, "x")]
    with pytest.raises(ValueError):
        balanced_order(["a", "b"], 0)


@pytest.mark.parametrize("n", [3, 4, 5, 6])
def test_balanced_order_gives_every_arm_every_place_and_every_predecessor_alike(n):
    arms = list(range(n))
    cycle = n if n % 2 == 0 else 2 * n
    order = balanced_order(arms, 2 * cycle)
    rounds = [[arm for r, arm in order if r == k] for k in range(2 * cycle)]
    assert all(sorted(one) == arms for one in rounds)
    first_two = rounds[0] + rounds[1]
    assert rounds[1] == rounds[0][::-1] and first_two == [arm for _, arm in order[:2 * n]]
    places = Counter((place, arm) for one in rounds[:cycle] for place, arm in enumerate(one))
    assert set(places.values()) == {cycle // n} and len(places) == n * n
    follows = Counter((a, b) for one in rounds[:cycle] for a, b in zip(one, one[1:]))
    assert len(follows) == n * (n - 1) and set(follows.values()) == {cycle // n}


def test_mean_interval_is_the_t_interval_and_none_for_one_value():
    mean, (lo, hi) = mean_interval([10.0, 12.0, 14.0])
    # t(0.975, 2) = 4.3027; sd 2; half-width 4.3027 * 2 / sqrt(3) = 4.968
    assert mean == 12.0 and lo == pytest.approx(12.0 - 4.968, abs=1e-3) and hi == pytest.approx(12.0 + 4.968, abs=1e-3)
    assert mean_interval([5.0]) == (5.0, None)


def test_half_width_is_the_interval_half_on_the_log_scale():
    estimate = paired_ratio([110.0, 100.0, 105.0], [100.0, 100.0, 100.0])
    lo, hi = estimate.ci95
    assert half_width(estimate) == pytest.approx(math.sqrt(hi / lo) - 1)
    assert lo * (1 + half_width(estimate)) == pytest.approx(estimate.ratio)  # symmetric about the ratio in logs
    assert half_width(paired_ratio([100.0], [90.0])) is None


def test_the_two_stage_interval_takes_its_spread_from_the_pilot_alone():
    logs = [0.10, -0.05, 0.01, 0.02, 0.00]
    est = two_stage_ratio([100 * math.exp(x) for x in logs], [100] * 5, pilot=3)
    half = 4.303 * math.sqrt(0.0057) / math.sqrt(5)  # the pilot's sd (as above), its t, and all five pairs
    assert est.ratio == pytest.approx(math.exp(sum(logs) / 5), abs=1e-12)
    assert est.ci95 == pytest.approx((math.exp(0.016 - half), math.exp(0.016 + half)), abs=1e-4)
    assert est.n == 5 and est.pilot == 3
    with pytest.raises(ValueError, match="pilot of 2 to 5"):
        two_stage_ratio([1.0] * 5, [1.0] * 5, pilot=6)


def test_two_stage_rounds_are_what_the_pilot_spread_needs_for_the_target():
    pilot = [math.exp(x) for x in (0.10, -0.05, 0.01)]
    needed = two_stage_rounds(pilot, 0.03)
    assert needed == math.ceil((4.303 * math.sqrt(0.0057) / math.log(1.03)) ** 2)
    assert two_stage_rounds([1.0, 1.0, 1.0], 0.03) == 3  # no spread: the pilot is enough


def test_two_stage_keeps_its_coverage_where_a_t_interval_recomputed_every_round_does_not():
    """Simulated A/A comparisons (true ratio 1, log-normal noise of 7 %), each stopping for a ±3 % target: Stein's
    two-stage interval covers 1 about 95 % of the time; stopping as soon as a recomputed t interval is narrow enough
    covers less. Deterministic: a fixed seed."""
    import random

    rng, trials, sd, target, pilot, most = random.Random(7), 1500, 0.07, 0.03, 4, 80
    t = {df: t_quantile(0.975, df) for df in range(1, most)}
    stein = naive = 0
    for _ in range(trials):
        logs = [rng.gauss(0.0, sd) for _ in range(pilot)]
        s0 = statistics.stdev(logs)
        n = min(most, max(pilot, math.ceil((t[pilot - 1] * s0 / math.log1p(target)) ** 2)))
        logs += [rng.gauss(0.0, sd) for _ in range(n - pilot)]
        stein += abs(statistics.fmean(logs)) <= t[pilot - 1] * s0 / math.sqrt(n)
        seq = [rng.gauss(0.0, sd) for _ in range(2)]
        while len(seq) < most and t[len(seq) - 1] * statistics.stdev(seq) / math.sqrt(len(seq)) > math.log1p(target):
            seq.append(rng.gauss(0.0, sd))
        naive += abs(statistics.fmean(seq)) <= t[len(seq) - 1] * statistics.stdev(seq) / math.sqrt(len(seq))
    assert 0.935 <= stein / trials <= 0.975
    assert naive / trials < 0.9


def test_the_second_stage_adds_what_the_pilot_asks_for_within_the_budget():
    from analysis import speed
    from ray_jobs.orchestrator import second_stage

    ratios = [1.10, 1.02, 1.15]
    records = [{"arm": arm, "workers": 2, "round": r, "status": "ok", speed.METRIC: value}
               for r, ratio in enumerate(ratios) for arm, value in (("native", 100 * ratio), ("horovod", 100.0))]
    needed = two_stage_rounds(ratios, 0.03)
    stage = second_stage(records, 2, ["ray"], 3, 0.03, left_s=3600.0, round_s=30.0)
    assert stage["needed"] == needed and stage["extra"] == needed - 3 and not stage["budget_limited"]
    tight = second_stage(records, 2, ["ray"], 3, 0.03, left_s=95.0, round_s=30.0)
    assert tight["extra"] == 3 and tight["budget_limited"] and "the budget allows 3" in tight["why"]
    assert second_stage(records[:2], 2, ["ray"], 3, 0.03, left_s=95.0, round_s=30.0)["extra"] == 0
    # Afterwards the verdict's interval is Stein's: the pilot's spread over every round.
    more = records + [{"arm": arm, "workers": 2, "round": 3, "status": "ok", speed.METRIC: value}
                      for arm, value in (("native", 108.0), ("horovod", 100.0))]
    answer = speed.speed(more, 2, ["ray"], pilot=3)
    expected = two_stage_ratio([110.0, 102.0, 115.0, 108.0], [100.0] * 4, pilot=3)
    assert answer["pilot"] == 3 and answer["ci95"] == pytest.approx(list(expected.ci95))
    assert speed.speed(more, 2, ["ray"])["pilot"] is None


def test_after_two_stages_the_rounds_to_decide_go_by_the_pilots_spread():
    pilot, rest = [0.05, -0.03, 0.02], [0.02] * 7
    est = two_stage_ratio([100 * math.exp(x) for x in pilot + rest], [100.0] * 10, pilot=3)
    assert speed_verdict(est) == "undecided"
    needed = rounds_to_decide(est)
    sd, gap = statistics.stdev(pilot), statistics.fmean(pilot + rest)
    assert needed > 10 and t_quantile(0.975, 2) * sd / math.sqrt(needed) < gap
    assert t_quantile(0.975, 2) * sd / math.sqrt(needed - 1) >= gap


def test_too_few_rounds_for_a_useful_interval_show_their_values_and_the_rounds_an_interval_needs():
    wide = stats.paired_ratio([100.0, 180.0], [120.0, 60.0])  # two rounds that disagree: t(1) makes it ±3400 %
    said = stats.speed_sentence(wide)
    assert said.startswith("2 rounds give no useful interval (±") and "CI" not in said
    assert said.endswith("the rounds' ratios were 0.83, 3.00; at their spread a ±10 % interval needs about 14581 "
                         "rounds")
    efficiency = {"ratio": 1.22, "ci95": [0.017, 85.8], "ratios": [0.87, 1.70]}
    assert stats.interval_text(efficiency) == " (rounds 0.87, 1.70: too few for an interval)"
    assert stats.interval_text({"ratio": 0.9, "ci95": [0.85, 0.95]}) == " (0.85–0.95)"


def planted_comparison(rng, native_gap: float, horovod_levels: tuple[float, ...], sd: float = 0.03,
                       pilot: int = 6, target: float = 0.03, affordable: int = 8) -> dict:
    """One comparison on planted data through compare's own path: a pilot of `pilot` rounds, the rounds Stein's
    second stage adds (at most `affordable`), then the speed verdict. Each launch's level: log-normal noise of `sd`;
    native's times `native_gap`, Horovod's one of `horovod_levels` at random (two: a bimodal arm)."""
    from analysis import speed
    from ray_jobs.orchestrator import second_stage

    def round_(r: int) -> list[dict]:
        levels = {"native": native_gap, "horovod": rng.choice(horovod_levels)}
        return [{"arm": arm, "workers": 2, "round": r, "status": "ok",
                 speed.METRIC: 1000 * level * math.exp(rng.gauss(0.0, sd))} for arm, level in levels.items()]

    records = [run for r in range(pilot) for run in round_(r)]
    stage = second_stage(records, 2, ["ray"], pilot, target, left_s=affordable * 30.0, round_s=30.0)
    records += [run for r in range(pilot, pilot + stage["extra"]) for run in round_(r)]
    return speed.speed(records, 2, ["ray"], pilot=pilot)


def test_on_planted_data_the_interval_keeps_its_stated_rate():
    """make compare's procedure (a pilot of 6, ±3 %, the budget's rounds) on 2,000 planted comparisons each, with a
    launch-to-launch spread of 3 % an arm: an A/A with no gap is called decided about 5 % of the time; a 5 % gap is
    found; an arm whose launches fall in two levels 30 % apart, as Horovod's did unpinned, gets intervals that cover
    the true ratio (the geometric mean over its levels) at the stated 95 %. Deterministic: a fixed seed; the bounds are
    the rates ± about 3 standard errors of 2,000 trials."""
    import random

    rng, trials = random.Random(11), 2000
    aa = [planted_comparison(rng, 1.0, (1.0,)) for _ in range(trials)]
    assert sum(a["verdict"] != stats.UNDECIDED for a in aa) / trials <= 0.065
    gap = [planted_comparison(rng, 1.05, (1.0,)) for _ in range(trials)]
    assert sum(a["verdict"] == "native faster" for a in gap) / trials >= 0.85
    assert not any(a["verdict"] == "horovod faster" for a in gap)
    truth = 1 / math.sqrt(1.3)
    bimodal = [planted_comparison(rng, 1.0, (1.0, 1.3)) for _ in range(trials)]
    assert 0.935 <= sum(a["ci95"][0] <= truth <= a["ci95"][1] for a in bimodal) / trials <= 0.965


def test_an_arm_s_spread_is_taken_apart_within_and_between_launches():
    # two launches of three blocks: within, the pooled variance of (9, 10, 11) and (19, 20, 21), 1; between, the means
    # 10 and 20 differ by a variance of 50, less the 1/3 their blocks' spread explains
    parts = stats.variance_parts([[9.0, 10.0, 11.0], [19.0, 20.0, 21.0]])
    assert parts["launches"] == 2 and parts["blocks"] == 3
    assert parts["within"] == pytest.approx(1 / 15) and parts["launch"] == pytest.approx(math.sqrt(50) / 15)
    assert parts["between"] == pytest.approx(math.sqrt(50 - 1 / 3) / 15)
    same_level = stats.variance_parts([[9.0, 11.0], [11.0, 9.0], [10.0, 10.0]])
    assert same_level["between"] == 0.0 and same_level["within"] > 0  # the launch means agree: all spread is within
    assert stats.variance_parts([[1.0, 2.0]]) is None and stats.variance_parts([[1.0], [2.0]]) is None


def test_planted_within_and_between_launch_spreads_are_recovered():
    import random

    rng = random.Random(3)
    launches = [[level * math.exp(rng.gauss(0, 0.04)) for _ in range(3)]
                for level in (math.exp(rng.gauss(0, 0.02)) for _ in range(400))]
    parts = stats.variance_parts(launches)
    assert parts["within"] == pytest.approx(0.04, rel=0.05) and parts["between"] == pytest.approx(0.02, rel=0.15)

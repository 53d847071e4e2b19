"""The speed answer from a comparison's runs: native ÷ Horovod per worker count, and Ray ÷ each backend's own
launcher, each a paired ratio over the rounds with its 95 % interval (analysis/stats.py does the statistics).

Runs pair by round: round r of one arm ran beside round r of the other, in a balanced order, so a slow minute on
the machine touches both. A round where either run failed drops out of the pairing.
"""

import statistics
from typing import Any

from analysis import stats
from contract.config import AA_SUFFIX, BACKENDS, CEILING, OWN_LAUNCHERS

METRIC = "steady_samples_per_s"
CPU_METRIC = "cpu_s_per_1k_samples"
END_TO_END = "end_to_end_s"
CPU_TEXT = ("CPU cost: CPU-seconds per 1,000 samples over every thread of every rank (the frameworks' communication "
            "threads included), the last epoch's measured steps")
OWN_LAUNCHER_ARMS = {f"{backend}/{launcher}": backend for backend, launchers in OWN_LAUNCHERS.items()
                     for launcher in launchers}
"""Each backend's arms under its own launchers, by label: the backend each trains."""
DISTRIBUTED_ARMS = (*BACKENDS, *OWN_LAUNCHER_ARMS)
"""The arms that train on more than one process: each backend on Ray, then under its own launcher."""
CEILINGS = (CEILING, *(f"{CEILING}/{launcher}" for launchers in OWN_LAUNCHERS.values() for launcher in launchers))
"""The ceiling arms' labels: on Ray, then under each backend's own launcher."""
BUSY_SHARE = 0.25
"""Share of the cores other processes may take while a run measures before its verdict says so."""


def paired(runs: list[dict[str, Any]], workers: int, a: str, b: str,
           key: str) -> tuple[list[int], list[float], list[float]]:
    """The rounds where arm `a` and arm `b` both finished at `workers`, and `key` of each, round by round."""
    by_round: dict[str, dict[int, float]] = {a: {}, b: {}}
    for run in runs:
        if (run["workers"] == workers and run["status"] == "ok" and run["arm"] in by_round
                and run.get(key) is not None):
            by_round[run["arm"]][run["round"]] = run[key]
    rounds = sorted(set(by_round[a]) & set(by_round[b]))
    return rounds, [by_round[a][r] for r in rounds], [by_round[b][r] for r in rounds]


def estimate_dict(estimate: stats.RatioEstimate) -> dict[str, Any]:
    return {"ratio": estimate.ratio, "ci95": list(estimate.ci95) if estimate.ci95 else None, "repeats": estimate.n,
            "half_width": stats.half_width(estimate), "rounds_to_decide": stats.rounds_to_decide(estimate),
            "pilot": estimate.pilot, "ratios": list(estimate.ratios)}


def compared_arms(launchers: list[str]) -> tuple[str, str]:
    """The arms native ÷ Horovod compares: on Ray when Ray ran, else each under its own launcher (native's first
    in --launchers' order)."""
    if "ray" in launchers:
        return BACKENDS
    return tuple(f"{backend}/{next((n for n in launchers if n in OWN_LAUNCHERS[backend]), OWN_LAUNCHERS[backend][0])}"
                 for backend in BACKENDS)


def estimate(runs: list[dict[str, Any]], workers: int, a: str, b: str, pilot: int | None,
             key: str = METRIC, per_second: bool = False) -> stats.RatioEstimate | None:
    """`key` of a ÷ b paired by round: a t interval, or with `pilot` (the rounds before a second stage) Stein's;
    None when no round has both. `per_second`: `key` is a time, and the ratio is of its inverse (a rate)."""
    rounds, x, y = paired(runs, workers, a, b, key)
    if not rounds:
        return None
    if per_second:
        x, y = [1 / v for v in x], [1 / v for v in y]
    first = sum(1 for r in rounds if r < pilot) if pilot else 0
    return stats.two_stage_ratio(x, y, first) if first >= 2 else stats.paired_ratio(x, y)


def speed(runs: list[dict[str, Any]], workers: int, launchers: list[str], pilot: int | None = None,
          one_round: str | None = None, key: str = METRIC) -> dict[str, Any] | None:
    """native ÷ Horovod in `key` at `workers`, paired by round, on Ray when Ray ran, else under their own launchers;
    None when no round has both. METRIC: steady samples/s, with the machine's load; END_TO_END: runs per second from
    launch to return (start-up, training, evaluation, teardown: what a team's job pays); CPU_METRIC: CPU-seconds per
    1,000 samples, a cost (below 1: native uses less), with no verdict. `pilot`: the rounds that were a two-stage
    pilot (compare --target-ci); `one_round`: what stopped the rounds at one and what helps, where it was not
    --repeats."""
    a, b = compared_arms(launchers)
    found = estimate(runs, workers, a, b, pilot, key, per_second=key == END_TO_END)
    if found is None:
        return None
    _, native, horovod = paired(runs, workers, a, b, key)
    out = {"metric": key, **estimate_dict(found), "native": native, "horovod": horovod}
    if key == CPU_METRIC:
        return {**out, "sentence": stats.cost_sentence(found)}
    out.update(verdict=stats.speed_verdict(found), sentence=stats.speed_sentence(found, one_round=one_round))
    if key == METRIC:
        load = machine_load(runs, workers, (a, b))
        out.update(launcher="ray" if "ray" in launchers else "own launchers", machine_load=load,
                   sentence=out["sentence"] + (f" — {load['caveat']}" if load else ""))
    return out


def machine_load(runs: list[dict[str, Any]], workers: int, arms: tuple[str, str]) -> dict[str, Any] | None:
    """Where other processes took more than BUSY_SHARE of the cores while an arm's runs at `workers` measured: the
    worst share, each arm's median, and a caveat saying whether the disturbance fell unevenly on the arms (the
    interleaving spreads a steady load across both, not a burst); None on a quiet machine."""
    shares = {arm: [r["machine_load"]["others_share"] for r in runs if r["arm"] == arm and r["workers"] == workers
                    and r["status"] == "ok" and r.get("machine_load")] for arm in arms}
    worst = max((max(v) for v in shares.values() if v), default=0.0)
    if worst <= BUSY_SHARE:
        return None
    medians = {arm: statistics.median(v) for arm, v in shares.items() if v}
    uneven = max(medians.values()) - min(medians.values()) > BUSY_SHARE / 2
    by_arm = ", ".join(f"{arm} {100 * m:.0f} %" for arm, m in medians.items())
    caveat = (f"measured while other processes used up to {100 * worst:.0f} % of the cores (median {by_arm}): not a "
              "quiet-machine result" + ("; the load fell unevenly on the arms, so this ratio carries it" if uneven
                                        else ""))
    return {"worst_others_share": worst, "median_others_share": medians, "uneven": uneven, "caveat": caveat}


def noise_floor(runs: list[dict[str, Any]], workers: int, arms: list[str],
                pilot: int | None = None, key: str = METRIC) -> dict[str, Any]:
    """Each arm ÷ its A/A twin (the same command, interleaved beside it) at `workers`: a ratio whose interval must
    contain 1, and whose half-width is the smallest difference this machine and design can resolve."""
    out = {}
    for arm in arms:
        if found := estimate(runs, workers, arm, arm + AA_SUFFIX, pilot, key):
            out[arm] = estimate_dict(found)
    return out


def spread(runs: list[dict[str, Any]], workers: int, arms: list[str]) -> dict[str, Any]:
    """Each arm's steady samples/s taken apart (stats.variance_parts): block to block within a launch, from the last
    epoch's blocks every run recorded, and launch to launch; arms with fewer than two such runs are left out."""
    out = {}
    for arm in arms:
        launches = [r["epochs"][-1].get("block_samples_per_s") or [] for r in runs
                    if r["arm"] == arm and r["workers"] == workers and r["status"] == "ok"]
        if parts := stats.variance_parts(launches):
            out[arm] = parts
    return out


def launcher_overhead(runs: list[dict[str, Any]], workers: int, pilot: int | None = None) -> dict[str, Any]:
    """Ray ÷ each of the backend's own launchers, for steady-state throughput and for end-to-end wall time, by the
    vanilla arm's label."""
    out = {}
    for vanilla, backend in OWN_LAUNCHER_ARMS.items():
        section = {"backend": backend, "vanilla": vanilla.split("/")[1]}
        for name, key in (("steady", METRIC), ("end_to_end", END_TO_END)):
            if found := estimate(runs, workers, backend, vanilla, pilot, key):
                section[name] = estimate_dict(found)
        if len(section) > 2:
            out[vanilla] = section
    return out


def ceiling_of(arm: str) -> str:
    """The ceiling launched as `arm` is: `ceiling` for an arm on Ray, `ceiling/torchrun` for `native/torchrun`."""
    return CEILING if "/" not in arm else f"{CEILING}/{arm.split('/', 1)[1]}"


def efficiency(runs: list[dict[str, Any]], workers: int, arms: list[str],
               pilot: int | None = None) -> dict[str, Any]:
    """Each compared arm's steady samples/s ÷ its ceiling's (the same ranks, launched alike, averaging nothing), paired
    by round, by arm; with the ceiling's median samples/s. Arms whose ceiling did not run are left out."""
    out = {}
    for arm in arms:
        ceiling = ceiling_of(arm)
        if found := estimate(runs, workers, arm, ceiling, pilot):
            _, _, limit = paired(runs, workers, arm, ceiling, METRIC)
            out[arm] = {"ceiling": ceiling, "ceiling_samples_per_s": statistics.median(limit), **estimate_dict(found)}
    return out

"""Render a comparison (report.md, loss.png, throughput.png, overhead.png) from comparison.json alone."""

import statistics
from collections import Counter
from itertools import accumulate
from pathlib import Path
from typing import Any

from analysis import cause, parity, plots, runs, speed, stats, text
from contract import framework_env, models
from contract.config import AA_SUFFIX, BACKENDS, CEILING, ConfigError
from contract.phases import BLOCK_STEPS, STEP_PHASES

OPTION_NAMES = ("compression", "grad_accumulation", "amp", "bucket_mb", "gradient_as_bucket_view", "static_graph",
                "cycle_time_ms", "autotune", "fused_buffers", "trace")
ROUNDING_NOTE = (
    "With `--compression`, DDP and Horovod round the gradients in a different order (DDP: cast, divide by the "
    "workers, sum in the low precision; Horovod: cast, sum, then scale). `reference` emulates DDP's order and "
    "`reference-horovod` Horovod's, so the parity verdict can tell the rounding order from a bug; exact at 2 "
    "workers; beyond, judged against the summation-order floor (docs/measuring.md, \"Past two workers\").")
BN_NOTE = (
    "BatchNorm buffers are not gradients, and neither backend averages them: DDP broadcasts rank 0's at every "
    "forward pass, Horovod once before training, so test loss and accuracy may differ slightly between the backends "
    "while their parameters agree; `buffers identical` says whether the ranks' buffers matched at the end "
    "(docs/measuring.md, \"BatchNorm buffers\").")
DROPOUT_NOTE = (
    "The network has dropout (a layer with p > 0): each process draws its own masks from its own random stream, and "
    "the reference draws every simulated worker's from one, so the arms cannot compute the same step losses and this "
    "verdict measures the masks, not the backends. For parity, build the network with p = 0 (docs/models.md).")

ONE_RANK_NOTE = (
    "With 1 worker each backend runs one rank, so **no gradient averaging was measured**: an allreduce over one rank "
    "moves nothing between processes or GPUs. What this worker count does show is that both paths build, train and "
    "agree with the reference, and each framework's own cost per step around the same computation (DDP's reducer "
    "and hooks; Horovod's hooks and background thread).")
BN_AVERAGED_NOTE = (
    "BatchNorm buffers are not gradients, and neither backend averages them in training: DDP broadcasts rank 0's at "
    "every forward pass, Horovod once before training, and the reference's simulated workers each keep their own. "
    "Before every evaluation each arm averages them across its ranks (the reference across its simulated workers), "
    "as timm's distribute_bn does, so that the same parameters evaluate the same; what DDP's broadcast still leaves "
    "is in each worker count's parity lines (docs/measuring.md, \"BatchNorm buffers\").")


TRACES_NOTE = (
    "`trace-rank<R>.json`: torch.profiler, a few steady-state steps right after the warm-up of the first epoch, on "
    "every rank; `horovod-timeline.json`: Horovod's own timeline of the same steps, written by rank 0; "
    "`horovod-autotune.csv`: Horovod's autotuner, one sample a line. Open a trace in chrome://tracing or "
    "https://ui.perfetto.dev; the profiler slows the traced steps, which the median step barely notices.")
TIMELINE_NOTE = (
    "Horovod ran with its timeline on (`--trace` or `--fused-buffers`): Horovod 0.28.1 can start it only where "
    "HOROVOD_TIMELINE was set at hvd.init, and from then on its rank 0 runs a writer thread that polls for events "
    "(on a GPU its NCCL work is also synchronised with the host), which slows every step, not only those written: "
    "12-17 % of Horovod's steady samples/s on a 2-core VM. **This speed verdict is not like for like** "
    "(docs/options.md).")


def render(run_dir: str | Path) -> str:
    """Write report.md, verdicts.png, loss.png, throughput.png, overhead.png and phases.png into run_dir from its
    comparison.json; return the Markdown."""
    run_dir = Path(run_dir)
    comparison = runs.load(run_dir)
    try:
        markdown = report_markdown(comparison)
        (run_dir / "report.md").write_text(markdown)
        plots.plot_intervals(plots.comparison_intervals(comparison), run_dir / plots.VERDICTS,
                             f"Each verdict: the paired ratio and its 95 % interval\n{runs.hardware(comparison)}")
        plots.plot_losses(comparison, run_dir / "loss.png")
        plots.plot_throughput(comparison, run_dir / "throughput.png")
        plots.plot_overhead(comparison, run_dir / "overhead.png")
        cause.plot_phases(comparison, run_dir / cause.PHASES_PNG)
    except OSError as error:
        raise ConfigError(f"cannot write the report into {run_dir} ({error.strerror or error}); copy comparison.json "
                          "into a writable folder and render that") from None
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as error:
        raise ConfigError(f"{run_dir / runs.COMPARISON} is damaged or from another version ({type(error).__name__}: "
                          f"{error}); rerun python -m ray_jobs.compare") from None
    return markdown


def rows(comparison: dict[str, Any], workers: int) -> list[dict[str, Any]]:
    """One row per arm at `workers`, its cells by column: steady samples/s, end-to-end time, the step's p50 and p95,
    the comm share, overlap and CPU as medians over all its finished runs, the losses and accuracy from its first
    (every repeat trains the same model); `early`: whether it reached the target before its last epoch."""
    target = comparison["settings"]["target_accuracy"]
    single = {arm: statistics.median(r[speed.METRIC] for r in arm_runs)
              for arm, arm_runs in runs.finished(comparison, 1).items()}
    out = []
    for arm, arm_runs in runs.finished(comparison, workers).items():
        first, lasts = arm_runs[0], [r["epochs"][-1] for r in arm_runs]
        p50, p95 = (1000 * statistics.median(e[f"step_time_{p}_s"] for e in lasts) for p in ("p50", "p95"))
        elapsed = list(accumulate(epoch["epoch_time_s"] for epoch in first["epochs"]))
        reached = next((t for t, epoch in zip(elapsed, first["epochs"]) if epoch["test_accuracy"] >= target), None)
        steady = [r[speed.METRIC] for r in arm_runs]
        median, base = statistics.median(steady), single.get(arm)
        scaling = median / (workers * base) if first["backend"] in BACKENDS and base else None
        cpu = [r[speed.CPU_METRIC] for r in arm_runs if r.get(speed.CPU_METRIC) is not None]
        rss = [max(ranks) for ranks in zip(*(r["peak_rss_bytes"] for r in arm_runs if r.get("peak_rss_bytes")))]
        out.append({
            "arm": arm,
            "final train loss": f"{lasts[0]['train_loss']:.4f}",
            "test accuracy": f"{100 * lasts[0]['test_accuracy']:.2f}%",
            "steady samples/s, all workers (median, min–max, runs)": (
                f"{median:.0f} ({min(steady):.0f}–{max(steady):.0f}, n={len(steady)})" if len(steady) > 1
                else f"{median:.0f} (n=1)"),
            "end to end (median)": text.seconds(statistics.median(r["end_to_end_s"] for r in arm_runs)),
            "step p50 / p95 (median of runs)": f"{p50:.1f} / {p95:.1f} ms",
            "comm share (median of runs)": f"{100 * statistics.median(e['comm_share'] for e in lasts):.1f}%",
            "overlap": overlap_text([r.get("overlap") for r in arm_runs]),
            "CPU s per 1k samples": f"{statistics.median(cpu):.2f}" if cpu else "—",
            # Each rank's peak resident memory, the largest over the arm's runs.
            "peak RSS per rank": " / ".join(f"{b / 1e9:.2f}" for b in rss) + " GB" if rss else "—",
            f"time to {100 * target:g}%": "not reached" if reached is None else text.seconds(reached),
            "scaling efficiency": "—" if scaling is None else f"{100 * scaling:.0f}%",
            "buffers identical": "yes" if first["buffers_identical_across_ranks"] else "no",
            "early": reached is not None and reached < elapsed[-1],
        })
    return out


def table(comparison: dict[str, Any], workers: int) -> str:
    """One row per arm at `workers`. One throughput figure, the verdict's; "time to target" only where some arm
    reached the target before its last epoch, scaling efficiency only where 1 worker was measured too."""
    found = rows(comparison, workers)
    left_out = {"early"}
    if not any(r["early"] for r in found):
        left_out.add(f"time to {100 * comparison['settings']['target_accuracy']:g}%")
    if all(r["scaling efficiency"] == "—" for r in found):
        left_out.add("scaling efficiency")
    head = [column for column in found[0] if column not in left_out]
    return text.md_table(head, [[r[column] for column in head] for r in found])


def overlap_text(found: list[dict[str, Any] | None]) -> str:
    """The median over runs of the share of the averaging that backward hid: `62%`, or where the wait after backward
    exceeded the averaging alone, `none (wait 3.1× alone)`."""
    known = [o for o in found if o and o.get("share") is not None]
    if not known:
        return "—"
    if (share := statistics.median(o["share"] for o in known)) < 0:
        return f"none (wait {statistics.median(o['comm_exposed_s'] / o['comm_alone_s'] for o in known):.1f}× alone)"
    return f"{100 * share:.0f}%"


def cost_line(comparison: dict[str, Any], workers: int) -> str | None:
    """native ÷ Horovod CPU-seconds per 1,000 samples, paired by round, with its A/A where measured."""
    cost = comparison.get("cpu_cost", {}).get(str(workers))
    if not cost:
        return None
    cpu = stats.resolution(comparison.get("noise_floor_cpu", {}).get(str(workers), {}))
    steady = stats.resolution(comparison.get("noise_floor", {}).get(str(workers), {}))
    aa = (f" A/A resolution of this figure: ±{100 * cpu:.1f} % (throughput's: ±{100 * steady:.1f} %), so CPU cost "
          f"resolves {'finer' if cpu < steady else 'no finer'} than throughput here."
          if cpu is not None and steady is not None else "")
    return (f"**CPU cost: {cost['sentence']}** — native ÷ Horovod {ratio_text(cost)}; {speed.CPU_TEXT}.{aa}")


def speed_line(comparison: dict[str, Any], workers: int) -> str:
    """The bold speed verdict at `workers` with its ratio and interval, or why there is none."""
    answer = comparison.get("speed", {}).get(str(workers))
    if answer is None:
        return f"**Speed: no verdict** — {_no_speed_reason(comparison, workers)}."
    where = ("both under Ray" if answer["launcher"] == "ray"
             else " and ".join(speed.compared_arms(comparison["settings"]["launchers"])))
    rounds = (f"per round, native {', '.join(f'{v:.0f}' for v in answer['native'])}; Horovod "
              f"{', '.join(f'{v:.0f}' for v in answer['horovod'])} samples/s")
    out = (f"**Speed: {answer['sentence']}**\n\nNative ÷ Horovod steady-state samples/s, {where}: "
           f"{ratio_text(answer)}; {rounds}.{two_stage_text(answer)} This answers how fast a long job trains once "
           "it runs.")
    if whole := comparison.get("end_to_end", {}).get(str(workers)):
        out += (f"\n\n**End to end: {whole['sentence']}** — native ÷ Horovod in runs per second from launch to "
                f"return, {where}: {ratio_text(whole)}. This answers what one job of this length pays, start-up, "
                "evaluation and teardown included; start-up weighs less the longer the job.")
    return out


def two_stage_text(answer: dict[str, Any]) -> str:
    """How a --target-ci comparison chose its rounds, or nothing for a fixed --repeats."""
    stage = answer.get("two_stage")
    if not stage:
        return ""
    asked = (f"its spread asked for {stage['needed']} round(s) in all for ±{100 * stage['target']:g} %"
             if stage["needed"] else "it had too few finished pairs to measure a spread")
    limited = ", as many as the time budget allowed" if stage["budget_limited"] else ""
    pilot = (f"{stage['pilot']} round(s)" if stage["pilot_pairs"] == stage["pilot"] else
             f"{stage['pilot']} round(s), {stage['pilot_pairs']} of them finished on both sides")
    return (f" Rounds chosen in two stages (Stein's procedure, `--target-ci`): a pilot of {pilot}; "
            f"{asked}; rounds added: {stage['extra']}{limited}. The interval takes its spread from the pilot alone, "
            "which keeps its 95 % coverage although the count was chosen from the data.")


def noise_line(comparison: dict[str, Any], workers: int) -> str | None:
    """The A/A noise floor at `workers` (compare --aa), or None where it was not measured: each arm against its
    twin, whose interval must contain 1 and whose half-width is the resolution of this machine and design."""
    floor = comparison.get("noise_floor", {}).get(str(workers))
    if not floor:
        return None
    parts = []
    for arm, estimate in floor.items():
        said = f"{arm} ÷ {arm}{AA_SUFFIX} {ratio_text(estimate)}"
        if estimate["ci95"] is not None and not estimate["ci95"][0] <= 1 <= estimate["ci95"][1]:
            said += " (the interval excludes 1: this design finds a difference where there is none)"
        parts.append(said)
    width = stats.resolution(floor)
    resolution = "unknown (one repeat gives no interval)" if width is None else f"±{100 * width:.1f} %"
    return (f"**Resolution here: {resolution}** — the A/A control, each arm against itself, interleaved as the A/B "
            f"arms are: {'; '.join(parts)}.")


def spread_line(comparison: dict[str, Any], workers: int) -> str | None:
    """Each arm's steady samples/s taken apart: block to block within a launch, and launch to launch (where the
    rounds' spread comes from); None where no arm recorded blocks in two runs."""
    found = comparison.get("spread", {}).get(str(workers))
    if not found:
        return None
    parts = "; ".join(f"{arm} ±{100 * p['within']:.1f} % within a launch, ±{100 * p['between']:.1f} % between "
                      f"launches ({p['launches']} launches)" for arm, p in found.items())
    return (f"**Where the spread is** — each arm's steady samples/s, one standard deviation, in blocks of "
            f"{BLOCK_STEPS} steps: {parts}. Only the spread between launches needs more rounds; the spread within "
            "one is averaged over its blocks.")


def _no_speed_reason(comparison: dict[str, Any], workers: int) -> str:
    s = comparison["settings"]
    if not set(BACKENDS) <= set(s["backends"]):
        return f"it compares native with horovod, and this comparison ran only {', '.join(s['backends'])}"
    a, b = speed.compared_arms(s["launchers"])
    rounds, _, _ = speed.paired(comparison["runs"], workers, a, b, speed.METRIC)
    if rounds:
        raise ConfigError(f"comparison.json holds no speed at {workers} worker(s), yet {a} and {b} both finished "
                          f"round(s) {', '.join(str(r + 1) for r in rounds)}: the file was edited or cut; render a "
                          "whole copy of it, or rerun python -m ray_jobs.compare")
    counts = []
    for arm in (a, b):
        arm_runs = [r for r in comparison["runs"] if r["workers"] == workers and r["arm"] == arm]
        counts.append(f"{arm} finished {sum(r['status'] == 'ok' for r in arm_runs)} of {len(arm_runs)} run(s)")
    failed = any(r["status"] != "ok" for r in comparison["runs"])
    return f"no round in which both {a} and {b} finished ({'; '.join(counts)}{'; see Failed runs' if failed else ''})"


def ratio_text(estimate: dict[str, Any]) -> str:
    """`1.03 (95 % CI 0.97–1.09, ±6.0 %, 3 repeats)`, or the ratio alone with "no interval" when one repeat ran."""
    if estimate["ci95"] is None:
        return f"{estimate['ratio']:.3f}, no interval ({estimate['repeats']} repeat)"
    lo, hi = estimate["ci95"]
    half = stats.stored_half_width(estimate)
    return f"{estimate['ratio']:.3f} (95 % CI {lo:.3f}–{hi:.3f}, ±{100 * half:.1f} %, {estimate['repeats']} repeats)"


def decision(answer: dict[str, Any]) -> str:
    """A cell's verdict with its half-width; where it is undecided, how many more rounds would be expected to
    decide it, were the gap and spread measured so far to hold."""
    if answer["ci95"] is None:
        return "no interval (one round)"
    verdict = answer["verdict"]
    if verdict not in (stats.UNDECIDED, "no detectable difference"):  # the second: comparisons written before
        return f"{verdict} (±{100 * stats.stored_half_width(answer):.1f} %)"
    needed = answer.get("rounds_to_decide")
    outlook = (f"~{needed - answer['repeats']} more round(s) to clear 1 at even odds" if needed else
               f"gap within the noise (> {stats.MAX_ROUNDS} rounds)" if "rounds_to_decide" in answer else "")
    return f"undecided at ±{100 * stats.stored_half_width(answer):.1f} %" + (f"; {outlook}" if outlook else "")


def overhead_table(comparison: dict[str, Any], workers: int) -> str | None:
    """Ray ÷ each backend's own launcher at `workers`, or None when no vanilla launcher ran."""
    overhead = comparison.get("launcher_overhead", {}).get(str(workers))
    if not overhead:
        return None
    # section.get("backend", key): comparisons before mp.spawn keyed the table by backend
    rows = [[section.get("backend", key), section["vanilla"],
             *(ratio_text(section[k]) if k in section else "—" for k in ("steady", "end_to_end"))]
            for key, section in overhead.items()]
    return ("**Ray ÷ vanilla launcher**, paired by round. A steady ratio below 1 means Ray trains slower; an "
            "end-to-end ratio above 1 means Ray takes longer from launch to return.\n\n" + text.md_table(
                ["backend", "vanilla launcher", "steady samples/s, Ray ÷ vanilla", "end-to-end time, Ray ÷ vanilla"],
                rows))


def phases_table(comparison: dict[str, Any], workers: int) -> str:
    names = [label.removeprefix("start → ").removeprefix("→ ") for label in runs.PHASE_LABELS.values()]
    rows = [[arm, len(arm_runs), *map(text.seconds, runs.median_phases(arm_runs).values())]  # the phases, then totals
            for arm, arm_runs in runs.finished(comparison, workers).items()]
    return ("**Where the time goes**: the median over each arm's finished runs, in seconds from the launcher's start "
            "(evaluation and checkpoints: time spent on them over the whole run). \"Ranks running\" is when the "
            "ranks' own code began, the same moment under every launcher: it holds process start and imports "
            "under torchrun, mp.spawn and horovodrun, and the placement of workers on Ray.\n\n"
            + text.md_table(["arm", "runs", *names, "evaluation (total)", "checkpoints (total)"], rows))


def step_table(comparison: dict[str, Any], workers: int) -> str | None:
    """A step taken apart (contract/phases.py's STEP_PHASES): each arm's phases in ms, the median over its runs of
    the last epoch's means over the middle half of its steps, with what they leave of the step; then each pair of
    analysis/cause.py per part, paired by round, with its 95 % interval. None for runs that recorded no phases."""
    found = {arm: values for arm, arm_runs in runs.finished(comparison, workers).items()
             if (values := runs.last_epochs(arm_runs, "phases_s"))}
    if not found:
        return None
    names = (*STEP_PHASES, "remainder", "step")
    rows = [[arm, len(values), *(f"{1000 * statistics.fmean(v[name] for v in values):.1f}" for name in names)]
            for arm, values in found.items()]
    lines = ["**A step taken apart** (ms): each phase's mean over the middle half of the last epoch's measured steps "
             "of every rank (the quickest and slowest quarter left out, so that the parts add up to the step, which "
             "medians taken phase by phase do not), then the mean over the arm's runs, which keeps them adding up; "
             "the remainder is what a step spends outside the phases (zeroing the gradients, bookkeeping; in the "
             "reference, its emulated averaging).", "", text.md_table(["arm", "runs", *names], rows)]
    for a, b in cause.pairs(comparison):
        if found := cause.difference(comparison, workers, a, b):
            lines += ["", cause.difference_line(a, b, found)]
    return "\n".join(lines)


def options_table(comparison: dict[str, Any]) -> str | None:
    """Each option as every arm applied it, from the runs' results.json; None for comparisons without options."""
    by_arm: dict[str, dict[str, Any]] = {}
    for run in comparison["runs"]:
        if run["status"] == "ok" and run.get("options"):
            by_arm.setdefault(run["arm"], run["options"])
    if not by_arm:
        return None
    arms = sorted(by_arm, key=runs.arm_order)
    # An option none of the arms knows is younger than these runs.
    rows = [[f"`{text.flag(name)}`", *(text.option(by_arm[arm].get(name, "—")) for arm in arms)]
            for name in OPTION_NAMES if any(name in by_arm[arm] for arm in arms)]
    return text.md_table(["option", *arms], rows)


def artifacts(comparison: dict[str, Any]) -> list[str]:
    """Links to the traces and autotune logs the runs left beside their results."""
    return [f"- {run['arm']}, {run['workers']} worker(s), round {run['round'] + 1}: [{path}]({path})"
            for run in comparison["runs"] for path in run.get("artifacts", [])]


def report_markdown(comparison: dict[str, Any]) -> str:
    """The report, verdicts first: what ran, each worker count's verdicts and tables, then what went wrong, where the
    ranks ran, and how every figure is measured."""
    setting = f"model {runs.model(comparison)['name']}"
    out = [f"# Native DDP or Horovod? Comparison {comparison['run_id']}", "", model_line(comparison), "",
           verdict_table([(setting, comparison, n) for n in comparison["settings"]["workers"]]), "",
           setup_line(comparison), *chosen_options(comparison)]
    for workers in comparison["settings"]["workers"]:
        out += workers_section(comparison, workers)
    out += [*other_sections(comparison), "", "## How these figures are measured", "", *definitions(comparison)]
    return "\n".join(out)


VERDICT_HEAD = ("setting", "gradient", "workers", "steady samples/s, native ÷ Horovod", "end to end", "CPU per sample",
                "efficiency, native / Horovod", "parity", "rounds")


def verdict_table(cells: list[tuple[str, dict[str, Any], int]]) -> str:
    """The verdicts of each (setting, comparison, workers), one row each, one short figure per cell (docs/findings.md's
    per-model table and a grid's first table), then each row in words beneath."""
    return (text.md_table(VERDICT_HEAD, [verdict_row(*cell) for cell in cells]) + "\n\n"
            + "\n".join(verdict_notes(*cell) for cell in cells))


def short(estimate: dict[str, Any] | None) -> str:
    """A paired ratio as one figure: `1.14 (1.09–1.20)` where its interval decides, `undecided (0.95–1.06)` where it
    holds 1, `—` where it was not measured."""
    if not estimate:
        return "—"
    if not estimate.get("ci95"):
        return f"{estimate['ratio']:.2f} (one round)"
    lo, hi = estimate["ci95"]
    return f"{'undecided ' if lo <= 1 <= hi else ''}{estimate['ratio']:.2f}{stats.interval_text(estimate)}"


def verdict_row(setting: str, comparison: dict[str, Any], workers: int) -> list[str]:
    """`setting`'s verdicts at `workers` in VERDICT_HEAD's columns: native ÷ Horovod for speed, end to end (runs per
    second) and CPU per sample (below 1: native uses less), then each backend's samples/s ÷ the ceiling's."""
    key = str(workers)
    said = {name: short(comparison.get(name, {}).get(key)) for name in ("speed", "end_to_end", "cpu_cost")}
    a, b = speed.compared_arms(comparison["settings"]["launchers"])
    found = comparison.get("efficiency", {}).get(key, {})
    efficiency = f"{short(found.get(a))} / {short(found.get(b))}" if found else "—"
    size = comparison.get("model", {}).get("gradient_bytes")
    return [setting, text.size(size) if size else "—", str(workers), said["speed"], said["end_to_end"],
            said["cpu_cost"], efficiency, comparison["parity"].get(key, {}).get("verdict", "—"),
            str(runs.rounds(comparison))]


def verdict_notes(setting: str, comparison: dict[str, Any], workers: int) -> str:
    """verdict_row's figures in words, for the line beneath the table, with each backend's overlap."""
    key = str(workers)
    said = [f"{label}: {(comparison.get(name, {}).get(key) or {}).get('sentence', 'not measured')}"
            for name, label in (("speed", "speed"), ("end_to_end", "end to end"), ("cpu_cost", "CPU per sample"))]
    overlaps = {r["arm"]: r["overlap"] for r in rows(comparison, workers)}
    a, b = speed.compared_arms(comparison["settings"]["launchers"])
    said.append(f"overlap {a} / {b}: {overlaps.get(a, '—')} / {overlaps.get(b, '—')}")
    return f"- **{setting}, {workers} worker(s)**: " + "; ".join(said) + "."


def setup_line(comparison: dict[str, Any]) -> str:
    s, cfg, env = comparison["settings"], comparison["settings"]["config"], comparison["environment"]
    return (f"Dataset **{cfg['dataset']}**, {cfg['epochs']} epoch(s), batch {cfg['batch_size']} per worker, SGD lr "
            f"{cfg['lr']} momentum {cfg['momentum']}, seed {cfg['seed']}, {cfg['threads_per_worker']} torch "
            f"thread(s) per worker, {placement_words(comparison)}; the same initial weights and DistributedSampler "
            f"shards in every run. Launchers: {', '.join(s['launchers'])}; every arm ran {runs.rounds(comparison)} "
            f"time(s) per worker count{ceiling_text(comparison)}, the references once{cut_text(s)}; "
            f"{comparison['wall_time_s'] / 60:.1f} min in all{kept_text(comparison)}. Python {env['python']}, torch "
            f"{env['torch']}, torchvision {env['torchvision']}, Ray {env['ray']}, Horovod {env['horovod']}; CPU "
            f"{env['cpu']} ({env['cpu_count']} cores); GPU {gpu_text(env)}; host {env['hostname']}."
            + (f" Framework settings exported where the comparison started: "
               f"{framework_env.words(env['framework_settings'])} (each run's results.json lists those its rank 0 "
               "had)." if "framework_settings" in env else "")
            + averaged_by_text(comparison) + gpu_math_text(comparison))


def ceiling_text(comparison: dict[str, Any]) -> str:
    """Where the ceiling ran in fewer rounds than the compared arms (the first few, orchestrator.CEILING_ROUNDS)."""
    rounds = {(r["workers"], r["round"]) for r in comparison["runs"] if r["arm"].startswith(CEILING)}
    ran = Counter(n for n, _ in rounds)
    fewest = min(ran.values(), default=0)
    return f" (the ceiling in the first {fewest})" if ran and fewest < runs.rounds(comparison) else ""


def placement_words(comparison: dict[str, Any]) -> str:
    """How the ranks were placed, as the runs recorded it: each on cores of its own (--cpu-affinity share, where every
    distributed run's ranks on one machine had disjoint cores), or where the scheduler put them."""
    asked = comparison["settings"]["config"].get("cpu_affinity", "none")
    placed = [r["placement"] for r in comparison["runs"] if r["status"] == "ok" and r["launcher"] != "local"
              and r.get("placement")]
    if asked == "share" and placed and all(_own_cores(p) for p in placed):
        return "each rank and all its threads on cores of its own (`--cpu-affinity share`)"
    if asked == "share":
        return ("`--cpu-affinity share` asked, but not every run's ranks had cores of their own (fewer cores than "
                "ranks: see Where the ranks ran)")
    return "each rank where the launcher and the scheduler put it (`--cpu-affinity none`)"


def _own_cores(placement: list[dict[str, Any]]) -> bool:
    """Whether the ranks on each machine ran on disjoint sets of cores (each rank's as spans: "0-2,5")."""
    seen: dict[str, set[int]] = {}
    for p in placement:
        cores = set()
        for span in filter(None, p.get("cores", "").split(",")):
            lo, _, hi = span.partition("-")
            cores.update(range(int(lo), int(hi or lo) + 1))
        taken = seen.setdefault(p.get("host", ""), set())
        if not cores or cores & taken:
            return False
        taken |= cores
    return True


def kept_text(comparison: dict[str, Any]) -> str:
    """Which runs a resumed comparison kept from before it stopped (compare --resume)."""
    kept = [r for r in comparison["runs"] if r.get("kept_on_resume")]
    if not kept:
        return ""
    named = ", ".join(f"{r['arm']} ({r['workers']} worker(s)"
                      + (f", round {r['round'] + 1})" if r["launcher"] != "local" else ")") for r in kept)
    return (f" (resumed with --resume: {len(kept)} of its {len(comparison['runs'])} runs had finished before it "
            f"stopped and were kept, each checked against its results.json: {named}; the time is the resumed part's)")


def cut_text(settings: dict[str, Any]) -> str:
    """Where --budget-min stopped the pilot before its --repeats rounds."""
    cut = settings.get("pilot_cut")
    return (f" (--budget-min stopped the pilot after {cut['rounds']} of {settings['repeats']} rounds at "
            f"{cut['workers']} worker(s))" if cut else "")


def gpu_text(env: dict[str, Any]) -> str:
    """The GPU's model, and where the run recorded them, its count, driver, CUDA and NCCL."""
    if not env["gpu"] or "gpu_count" not in env:
        return env["gpu"] or "none"
    return (f"{env['gpu_count']} × {env['gpu']} (driver {env['gpu_driver'] or 'unknown'}, CUDA {env['cuda']}, NCCL "
            f"{env['nccl'] or 'none'})")


def averaged_by_text(comparison: dict[str, Any]) -> str:
    """Which library averaged each distributed arm's gradients, as its runs recorded it."""
    said = {r["arm"]: r["averaged_by"] for r in comparison["runs"] if r["status"] == "ok" and r.get("averaged_by")}
    return (" Gradients averaged by " + ", ".join(f"{arm}: {library}" for arm, library in sorted(said.items())) + "."
            if said else "")


def warmup_text(comparison: dict[str, Any]) -> str:
    """The warm-up the runs left out of their timing: --warmup-steps, or what the default became in a short epoch."""
    asked = comparison["settings"]["config"]["warmup_steps"]
    used = {r["epochs"][-1].get("warmup_steps", asked) for r in comparison["runs"] if r["status"] == "ok"}
    if used <= {asked}:
        return str(asked)
    return (f"{'/'.join(map(str, sorted(used)))} (an epoch was shorter than the default --warmup-steps {asked}: "
            "its first half warmed up)")


def gpu_math_text(comparison: dict[str, Any]) -> str:
    """How the GPU runs computed, as each recorded it: deterministic kernels and TF32, which parity depends on."""
    said = [r["gpu_math"] for r in comparison["runs"] if r["status"] == "ok" and r.get("gpu_math")]
    if not said:
        return ""
    kernels = ("deterministic algorithms (where torch has one; an op without one warned and ran)"
               if all(m["deterministic_algorithms"] for m in said)
               else "the kernels torch chose, not all deterministic")
    tf32 = ("TF32 on in some run, so its float32 products were not all float32" if any(m["tf32"] for m in said)
            else "TF32 off, so float32 was float32")
    return f" On the GPU every run used {kernels}, and {tf32}."


def chosen_options(comparison: dict[str, Any]) -> list[str]:
    """Each backend's own best setting (a grid's best-of-each), the options table, and what compression and AMP do to
    parity; nothing for a default comparison."""
    s, cfg, out = comparison["settings"], comparison["settings"]["config"], []
    if own := s.get("per_backend"):
        out += ["", "**Each backend at its own best setting** of a tuning grid: " + "; ".join(
            f"{backend}: " + ", ".join(f"{text.flag(k)} {text.option(v)}" for k, v in chosen.items())
            for backend, chosen in own.items()) + ". No reference ran and parity is not judged: the two compute "
            "differently on purpose."]
    if options := options_table(comparison):
        out += ["", "## Options, as each framework applied them", "",
                "One flag sets both frameworks; where a flag leaves the value to the framework, its own default is "
                "shown. A single-process reference takes only the options that change the numbers.", "", options]
    if cfg.get("compression", "none") != "none":
        out += ["", ROUNDING_NOTE]
    if cfg.get("amp", "none") != "none":
        out += ["", f"With `--amp {cfg['amp']}` every run, references included, computes forward and loss under "
                    "torch.autocast with the same dtype, so the same parity rules hold."]
    return out


def timeline_on(comparison: dict[str, Any]) -> bool:
    """Whether a Horovod arm ran with its timeline on (--trace, --fused-buffers), which slows its every step."""
    config = comparison["settings"]["config"]
    return bool(config.get("trace") or config.get("fused_buffers")) and any(
        r["backend"] == "horovod" for r in comparison["runs"])


def workers_section(comparison: dict[str, Any], workers: int) -> list[str]:
    """One worker count: the verdicts (speed, end to end, CPU cost, resolution), the arms' table, Ray's cost, the
    phases, and parity."""
    ran = bool(runs.finished(comparison, workers))
    out = ["", f"## {workers} worker(s)", "", speed_line(comparison, workers), ""]
    for line in (workers == 1 and ONE_RANK_NOTE, timeline_on(comparison) and TIMELINE_NOTE,
                 cost_line(comparison, workers), noise_line(comparison, workers), spread_line(comparison, workers),
                 cause.efficiency_line(comparison, workers), cause.ceilings_line(comparison, workers),
                 cause.paragraph(comparison, workers)):
        out += [line, ""] if line else []
    failed = any(r["status"] != "ok" for r in comparison["runs"])
    out += [table(comparison, workers) if ran else
            "No run finished at this worker count" + ("; see Failed runs." if failed else ".")]
    for part in (overhead_table(comparison, workers), ran and phases_table(comparison, workers),
                 step_table(comparison, workers), cause.thread_table(comparison, workers)):
        out += ["", part] if part else []
    return out + parity_lines(comparison, workers)


def parity_lines(comparison: dict[str, Any], workers: int) -> list[str]:
    verdict = comparison["parity"].get(str(workers))
    if not verdict:
        return []
    if not verdict["max_abs_step_loss_difference"]:  # nothing compared: why (a run diverged, or none finished)
        return ["", f"**Parity: {verdict['verdict']}** — {verdict['why']}."]
    out = ["", f"**Parity: {verdict['verdict']}** — largest |step-loss difference| over the first "
               f"{verdict['steps']} steps, tolerance {verdict['tolerance']:g}"
               + (f", {floor}" if (floor := parity.floor_words(verdict)) else "")
               + (f" ({verdict['why']})" if verdict["why"] else "") + ":", ""]
    if verdict["verdict"] != "PASS" and (comparison.get("model") or {}).get("dropout"):
        out += [DROPOUT_NOTE, ""]
    explained = verdict.get("explained", {})
    out += [f"- {pair}: {text.number(diff)}" + (f" — explained: {explained[pair]}" if pair in explained else "")
            for pair, diff in verdict["max_abs_step_loss_difference"].items()]
    out += identical_parameters(comparison, workers)
    out += [f"- {pair} (information, not part of the verdict): {text.number(diff)}"
            for pair, diff in verdict["informational"].items()]
    return out


def other_sections(comparison: dict[str, Any]) -> list[str]:
    """What could not run here, the traces, the failed runs, and where the ranks ran."""
    out = []
    if comparison["not_applicable"]:
        out += ["", "## Not applicable here", "",
                "`dataparallel` is `torch.nn.DataParallel`: one process driving every GPU of a machine, PyTorch's "
                "older single-process way to use several GPUs, run as a further reference where the GPUs exist.", ""]
        out += [f"- {n['backend']} with {n['workers']} worker(s): {n['reason']}" for n in comparison["not_applicable"]]
    if links := artifacts(comparison):
        out += ["", "## Traces and logs", "", TRACES_NOTE, "", *links]
    if failed := [r for r in comparison["runs"] if r["status"] != "ok"]:
        out += ["", "## Failed runs", ""]
        for r in failed:  # rounds: 0-based in the JSON, 1-based as the terminal said them
            when = f", round {r['round'] + 1} of {runs.rounds(comparison)}" if r["launcher"] != "local" else ""
            out.append(f"- {r['arm']} with {r['workers']} worker(s){when}: {r['error']}")
    if placed := placement_table(comparison):
        net = comparison["settings"].get("network")
        crossed = f"; every run crossed a simulated link of {net['link_rate']} between {net['nodes']} nodes" if net \
            else ""
        out += ["", "## Where the ranks ran", "", "Each run's ranks by node, as the workers reported them (on Ray, "
                f"Ray's node; under torchrun, mp.spawn and horovodrun, the host){crossed}.", "", placed]
        out += ["", named] if (named := interfaces_line(comparison)) else []
    return out


def definitions(comparison: dict[str, Any]) -> list[str]:
    """What every figure of the report means (docs/measuring.md has the why)."""
    s = comparison["settings"]
    return [
        "`reference` is one process running each step's per-worker micro-batches one after another and averaging "
        "their gradients (with 1 worker: the tutorials' single-process baseline); `global-batch` is one forward "
        "pass over the same global batch (BatchNorm over all of it; information only). An arm is a backend under "
        "a launcher: `native` and `horovod` under Ray, `native/torchrun`, `native/mp.spawn` and "
        "`horovod/horovodrun` under their own.", "",
        f"**Speed** (`{s['speed_metric']}`) is steady-state throughput: total samples/s over all workers from the "
        f"median step time of the last epoch, its first {warmup_text(comparison)} steps left out; a median "
        "ignores the odd stalled step. **End to end** is the time from the launcher's start to its return. The "
        "runs are interleaved (A B B A …; more arms in a Williams design), so a slow minute hits every arm alike; "
        "native and Horovod are compared round by round, as a paired t interval on the log ratios, exponentiated; a "
        "winner is named only when the whole 95 % interval lies on one side of 1.", "",
        "Losses, accuracy and the per-step columns are from each arm's first finished run. Comm share: the time "
        "spent waiting for averaged gradients after the local backward pass finished. Overlap: the share of the "
        "averaging that backward hid, 1 − that wait ÷ the same averaging alone (measured after training; below 0 "
        "where the wait was longer). CPU s per 1k samples counts every thread of every rank. Time to target "
        "counts training time up to the end of the first epoch that reached it; scaling efficiency is the median "
        "steady samples/s over workers × the same arm's 1-worker median.", "",
        BN_AVERAGED_NOTE if any(r.get("buffers_averaged") for r in comparison["runs"]) else BN_NOTE, "",
        "Plots: `verdicts.png` (each verdict in words with its 95 % interval, 1.0 marked), `loss.png` (loss per "
        "step, every arm's first run overlaid), `throughput.png` (median steady samples/s by arm and worker count, "
        "each run a dot), `overhead.png` (where each distributed arm's time goes, from launch to return), "
        "`phases.png` (each arm's step as a stacked bar of its phases, the ceiling's beside the backends', with the "
        "95 % interval of the step on each).", ""]


def model_line(comparison: dict[str, Any]) -> str:
    """What the runs trained: the model, its size and its gradient, and what that means for the backends."""
    model = runs.model(comparison)
    name = model["name"]
    spec = models.spec(name)
    size = (f", {model['parameters'] / 1e6:.2f} M parameters, {text.size(model['gradient_bytes'])} of float32 "
            "gradient averaged per step" if model.get("parameters") else "")
    inputs = ("28x28 digits" if spec.inputs == models.DIGITS else
              f"synthetic 3x{model.get('image_size', 32)}x{model.get('image_size', 32)} images")
    return f"Model **{name}** ({spec.what}{size}), on {inputs}."


def interfaces_line(comparison: dict[str, Any]) -> str | None:
    """The network interfaces each arm's rank 0 had named (framework_env.INTERFACES), where any run recorded one."""
    by_arm: dict[str, dict[str, str]] = {}
    for r in comparison["runs"]:
        if r["status"] == "ok" and r["launcher"] != "local" and r.get("interfaces") is not None:
            by_arm.setdefault(r["arm"], r["interfaces"])
    if not any(by_arm.values()):
        return None
    return "Interfaces named in each arm's rank 0: " + "; ".join(
        f"{arm}: " + (", ".join(f"`{k}={v}`" for k, v in named.items()) or "none (each library's own choice)")
        for arm, named in by_arm.items()) + "."


def placement_table(comparison: dict[str, Any]) -> str | None:
    """One row per finished run: how many nodes its ranks used, and which ranks (local rank, cores) ran on each."""
    rows = []
    for r in comparison["runs"]:
        if r["status"] != "ok" or not r.get("placement"):
            continue
        nodes: dict[str, list[str]] = {}
        for p in r["placement"]:
            on = f", cores {p['cores']}" if p.get("cores") else ""  # results written before cores were recorded
            nodes.setdefault(f"{p['node_ip']} ({p['node_id'][:8]})", []).append(
                f"{p['rank']} (local {p['local_rank']}{on})")
        rows.append([f"{r['arm']}, {r['workers']} worker(s)" + (f", round {r['round'] + 1}" if r["launcher"] != "local"
                                                                 else ""), len(nodes),
                     "; ".join(f"{node}: rank {', '.join(ranks)}" for node, ranks in nodes.items())])
    return text.md_table(["run", "nodes", "ranks by node"], rows) if rows else None


def identical_parameters(comparison: dict[str, Any], workers: int) -> list[str]:
    """Whether each backend ended with the same weights as the reference that computes as it does, bit for bit."""
    first = {arm: arm_runs[0] for arm, arm_runs in runs.finished(comparison, workers).items()}
    out = []
    for arm in speed.DISTRIBUTED_ARMS:
        ref = parity.reference_for(arm, first)
        if arm in first and ref in first and first[arm].get("parameters_sha256"):
            same = first[arm]["parameters_sha256"] == first[ref].get("parameters_sha256")
            out.append(f"- final parameters, {arm} vs {ref}: {'bit-identical' if same else 'differ'}")
            if first[arm].get("buffers_averaged"):
                out.append(accuracy_gap(arm, ref, first))
    return out


def accuracy_gap(arm: str, ref: str, first: dict[str, dict[str, Any]]) -> str:
    """The test accuracy `arm` and its reference reached with their BatchNorm buffers averaged, and why they differ."""
    mine, theirs = (100 * first[name]["final"]["test_accuracy"] for name in (arm, ref))
    line = f"- test accuracy, buffers averaged before evaluation, {arm} vs {ref}: {mine:.2f} % vs {theirs:.2f} %"
    if mine == theirs:
        return line + " (the same)"
    cause = ("DDP broadcasts rank 0's buffers before every forward, so its running statistics follow rank 0's "
             "batches, where each simulated worker of the reference keeps its own" if first[arm]["backend"] == "native"
             else "the buffers were averaged in another order than the reference's, or differ as the parameters do")
    return line + f" ({abs(mine - theirs):.2f} points apart: {cause})"




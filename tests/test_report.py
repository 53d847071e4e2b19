"""The report rendered from a comparison.json alone: one row per arm, medians over repeats, the speed verdict, the
launcher and phase tables, failed runs, plots; and one-line errors for damaged input. No cluster: the runs are made
up here, with numbers chosen so that every median below can be checked by hand."""

import json

import pytest

from analysis import report, speed, stats
from analysis.runs import COMPARISON, PHASE_LABELS
from contract.config import ConfigError

ARMS = ("native", "horovod", "native/torchrun", "horovod/horovodrun")
# Steady samples/s per (arm, workers), one value per round.
STEADY = {
    ("native", 1): [1500.0, 1400.0, 1600.0],
    ("horovod", 1): [1450.0, 1500.0, 1550.0],
    ("native/torchrun", 1): [1520.0, 1480.0, 1610.0],
    ("horovod/horovodrun", 1): [1470.0, 1490.0, 1560.0],
    ("native", 2): [2800.0, 2750.0, 2900.0],
    ("horovod", 2): [2700.0, 2790.0, 2810.0],
    ("native/torchrun", 2): [2850.0, 2820.0, 2950.0],
    ("horovod/horovodrun", 2): [2600.0, None, 2700.0],  # round 1 (0-based) failed
}
# Seconds from launcher start to workers started; the later phases follow at fixed gaps.
STARTED = {"native": [9.1, 8.0, 10.0], "horovod": [7.0, 7.5, 6.5]}
GAPS = (4.9, 4.2, 5.8, 7.5)  # -> process group ready, first step done, training done, launcher returned


def phases(started: float) -> dict[str, float]:
    out, at = {"workers_started": started}, started
    for name, gap in zip(list(PHASE_LABELS)[1:], GAPS):
        at = out[name] = round(at + gap, 6)
    return out


def epoch(n: int, accuracy: float, rate: float, workers: int) -> dict:
    return {"epoch": n, "train_loss": 0.5 / n, "test_loss": 0.4 / n, "test_accuracy": accuracy,
            "samples_per_s": rate * 0.95, "samples_per_s_median": rate, "samples_per_s_per_worker": rate / workers,
            "samples_per_s_per_worker_ci95": 12.0, "epoch_time_s": 6.0, "eval_time_s": 0.4,
            "step_time_p50_s": 0.035, "step_time_p95_s": 0.052, "comm_share": 0.21, "data_share": 0.05,
            "measured_steps": 25, "steps": 30, "samples": 6000}


def run(arm: str, workers: int, round_: int, steady: float | None, started: float = 1.0) -> dict:
    """One run record as the orchestrator writes it; `steady` None makes it a failed run."""
    backend, _, launcher = arm.partition("/")
    launcher = launcher or ("local" if backend in ("reference", "global-batch") else "ray")
    record = {"arm": arm, "backend": backend, "launcher": launcher, "workers": workers, "round": round_}
    if steady is None:
        return {**record, "status": "failed", "error": "RuntimeError: horovodrun exited with code 1"}
    ph = phases(started)
    return {
        **record, "status": "ok", "error": None,
        "results": f"{arm.replace('/', '-')}-{workers}w-r{round_}/results.json",
        "epochs": [epoch(1, 0.93, steady, workers), epoch(2, 0.97, steady, workers)],
        "final": {"test_accuracy": 0.97, "test_loss": 0.2, "wall_time_s": 14.0},
        "step_losses": [2.3 / (1 + 0.1 * i) for i in range(60)], "peak_rss_mb_per_worker": [410.0, 432.0][:workers],
        "parameters_identical_across_ranks": True, "buffers_identical_across_ranks": backend != "horovod",
        speed.METRIC: steady, "end_to_end_s": ph["launcher_returned"], "phases": ph,
        "eval_time_s": 0.8, "checkpoint_time_s": 0.3 if launcher == "ray" else 0.0,
    }


def comparison(repeats: int = 3, steady: dict | None = None) -> dict:
    steady = STEADY if steady is None else steady
    runs = []
    for workers in (1, 2):
        runs.append(run("reference", workers, 0, 900.0 * workers))
        if workers > 1:
            runs.append(run("global-batch", workers, 0, 1900.0))
        for round_ in range(repeats):
            for arm in ARMS if round_ % 2 == 0 else reversed(ARMS):  # a round, then its mirror; the figures need no more
                started = STARTED[arm.split("/")[0]][round_] + (0.0 if "/" in arm else 3.0)
                runs.append(run(arm, workers, round_, steady[arm, workers][round_], started))
    launchers = ["ray", "torchrun", "horovodrun"]
    return {
        "schema_version": 2, "run_id": "20261122-053000",
        "settings": {"config": {"epochs": 2, "batch_size": 100, "lr": 0.01, "momentum": 0.5, "seed": 42,
                                "dataset": "synthetic", "threads_per_worker": 1, "warmup_steps": 5},
                     "workers": [1, 2], "backends": ["native", "horovod"], "launchers": launchers,
                     "repeats": repeats, "parity_steps": 50, "tolerance": 1e-4, "target_accuracy": 0.95,
                     "speed_metric": speed.METRIC},
        "environment": {"python": "3.12.3", "torch": "2.15.0", "torchvision": "0.29.2", "ray": "2.60.0",
                        "horovod": "0.28.1", "cpu": "Test CPU", "cpu_count": 2, "gpu": None, "hostname": "box"},
        "wall_time_s": 300.0,
        "runs": runs,
        "not_applicable": [{"backend": "dataparallel", "workers": 2, "reason": "DataParallel needs 2 GPUs"}],
        "parity": {str(n): {"steps": 50, "tolerance": 1e-4, "verdict": "PASS", "why": None,
                            "max_abs_step_loss_difference": {"native vs horovod": 0.0},
                            "informational": {"reference vs global-batch": 0.012}} for n in (1, 2)},
        "speed": {str(n): answer for n in (1, 2) if (answer := speed.speed(runs, n, launchers))},
        "end_to_end": {str(n): answer for n in (1, 2)
                       if (answer := speed.speed(runs, n, launchers, key=speed.END_TO_END))},
        "launcher_overhead": {str(n): speed.launcher_overhead(runs, n) for n in (1, 2)},
    }


def write(tmp_path, doc: dict):
    (tmp_path / COMPARISON).write_text(json.dumps(doc))
    return tmp_path


def section(markdown: str, workers: int) -> str:
    return markdown.split(f"## {workers} worker(s)\n")[1].split("\n## ")[0]


def table_after(text: str, header_start: str) -> list[list[str]]:
    """The cells of each body row of the first table whose header starts with `header_start`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    body = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        body.append([cell.strip() for cell in line.strip("|").split("|")])
    return body


def named_rows(text: str, header_start: str) -> dict[str, dict[str, str]]:
    """The first table whose header starts with `header_start`, as {arm: {column: cell}}."""
    header = next(line for line in text.splitlines() if line.startswith(header_start))
    names = [cell.strip() for cell in header.strip("|").split("|")]
    return {row[0]: dict(zip(names, row)) for row in table_after(text, header_start)}


def test_a_comparison_with_repeats_renders_medians_verdicts_and_plots(tmp_path):
    doc = comparison()
    doc["launcher_overhead"]["2"] = {  # hand-written figures, as in the schema, so the rendering is checked exactly
        "native/torchrun": {"backend": "native", "vanilla": "torchrun",
                            "steady": {"ratio": 0.98, "ci95": [0.9, 1.05], "repeats": 3},
                            "end_to_end": {"ratio": 1.9, "ci95": [1.7, 2.1], "repeats": 3}},
        "horovod/horovodrun": {"backend": "horovod", "vanilla": "horovodrun",
                               "steady": {"ratio": 1.01, "ci95": None, "repeats": 1},
                               "end_to_end": {"ratio": 1.4, "ci95": [1.2, 1.6], "repeats": 2}}}
    markdown = report.render(write(tmp_path, doc))
    assert (tmp_path / "report.md").read_text() == markdown
    two = section(markdown, 2)

    assert f"**Speed: {doc['speed']['2']['sentence']}**" in two
    assert doc["speed"]["2"]["repeats"] == 3 and "3 repeats)" in two.split("**Speed:")[1].split("\n\n")[1]
    assert "steady-state throughput" in markdown and "paired t interval on the log ratios" in markdown
    assert doc["end_to_end"]["2"]["native"] == [34.5, 33.4, 35.4]  # each round's last phase
    assert f"**End to end: {doc['end_to_end']['2']['sentence']}** — native ÷ Horovod in runs per second" in two

    main = table_after(two, "| arm | final train loss")
    assert [r[0] for r in main] == ["reference", "global-batch", "native", "horovod", "native/torchrun",
                                    "horovod/horovodrun"]
    by_arm = named_rows(two, "| arm | final train loss")
    steady = "steady samples/s, all workers (median, min–max, runs)"
    assert by_arm["native"][steady] == "2800 (2750–2900, n=3)"  # median of 2800, 2750, 2900
    assert by_arm["horovod"][steady] == "2790 (2700–2810, n=3)"
    assert by_arm["horovod/horovodrun"][steady] == "2650 (2600–2700, n=2)"  # the failed round is left out
    assert by_arm["reference"][steady] == "1800 (n=1)"
    assert by_arm["native"]["scaling efficiency"] == "93%"  # 2800 / (2 × 1500)
    assert by_arm["reference"]["scaling efficiency"] == "—"
    assert "time to 95%" not in by_arm["native"]  # reached at the end of the last epoch: it says nothing new
    assert by_arm["horovod"]["buffers identical"] == "no" and by_arm["native"]["buffers identical"] == "yes"
    assert not any("±" in cell for cell in by_arm["native"].values())  # one throughput figure: the verdict's

    assert ("| native | torchrun | 0.980 (95 % CI 0.900–1.050, ±8.0 %, 3 repeats) "
            "| 1.900 (95 % CI 1.700–2.100, ±11.1 %, 3 repeats) |") in two
    assert ("| horovod | horovodrun | 1.010, no interval (1 repeat) "
            "| 1.400 (95 % CI 1.200–1.600, ±15.5 %, 2 repeats) |") in two

    ph = {r[0]: r for r in table_after(two, "| arm | runs |")}
    # native under Ray started at 9.1+3, 8.0+3, 10.0+3: median 12.1, then the fixed gaps.
    assert ph["native"] == ["native", "3", "12.1 s", "17.0 s", "21.2 s", "27.0 s", "34.5 s", "0.80 s", "0.30 s"]
    assert ph["horovod/horovodrun"][:3] == ["horovod/horovodrun", "2", "6.8 s"]  # median of 7.0 and 6.5
    assert by_arm["native"]["end to end (median)"] == "34.5 s"  # the median of the last phase

    assert "- horovod/horovodrun with 2 worker(s), round 2 of 3: RuntimeError: horovodrun exited" in markdown
    assert "**Parity: PASS**" in two and "DataParallel needs 2 GPUs" in markdown
    assert "`overhead.png`" in markdown.split("Plots:")[1]
    for png in ("verdicts.png", "loss.png", "throughput.png", "overhead.png"):
        assert (tmp_path / png).read_bytes().startswith(b"\x89PNG")


def test_one_repeat_renders_no_interval_and_a_missing_verdict_says_why(tmp_path):
    steady = {key: values[:1] for key, values in STEADY.items()}
    steady["horovod", 2] = [None]  # Horovod on Ray failed at 2 workers: no pair, no verdict there
    markdown = report.render(write(tmp_path, comparison(repeats=1, steady=steady)))
    one, two = section(markdown, 1), section(markdown, 2)
    assert "**Speed: one repeat gives no interval, so no verdict" in one
    assert "no interval (1 repeat)" in one
    assert "**Speed: no verdict** — no round in which both native and horovod finished (native finished 1 of 1 " \
           "run(s); horovod finished 0 of 1 run(s)" in two
    assert [r[0] for r in table_after(two, "| arm | final train loss")] == [
        "reference", "global-batch", "native", "native/torchrun", "horovod/horovodrun"]
    assert "- horovod with 2 worker(s), round 1 of 1: RuntimeError" in markdown
    for png in ("verdicts.png", "loss.png", "throughput.png", "overhead.png"):
        assert (tmp_path / png).read_bytes().startswith(b"\x89PNG")


def damaged_runs():
    doc = comparison(repeats=1, steady={key: values[:1] for key, values in STEADY.items()})
    del doc["runs"][3]["arm"]
    return doc


def damaged_epochs():
    doc = comparison(repeats=1, steady={key: values[:1] for key, values in STEADY.items()})
    doc["runs"][2]["epochs"] = []
    return doc


@pytest.mark.parametrize("make, needle", [
    (damaged_runs, "is damaged or from another version (KeyError: 'arm')"),
    (damaged_epochs, "is damaged or from another version (IndexError"),
    (lambda: {**damaged_runs(), "schema_version": 1}, "has schema version 1, this renderer reads 2"),
    (lambda: {k: v for k, v in damaged_runs().items() if k != "runs"}, "is not a comparison (it lacks runs)"),
    (lambda: {**comparison(), "speed": {}}, "holds no speed at 1 worker(s), yet native and horovod both finished "
                                            "round(s) 1, 2, 3: the file was edited or cut"),
])
def test_a_damaged_comparison_is_a_one_line_config_error(tmp_path, make, needle):
    with pytest.raises(ConfigError) as caught:
        report.render(write(tmp_path, make()))
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_a_missing_comparison_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        report.render(tmp_path)


def test_a_worker_count_where_every_run_failed_still_renders(tmp_path):
    steady = {key: (values[:1] if key[1] == 1 else [None]) for key, values in STEADY.items()}
    doc = comparison(repeats=1, steady=steady)
    doc["runs"] = [r for r in doc["runs"] if r["workers"] == 1 or r["backend"] in ("native", "horovod")]
    markdown = report.render(write(tmp_path, doc))
    two = section(markdown, 2)
    assert "**Speed: no verdict**" in two and "No run finished at this worker count" in two
    assert "- native/torchrun with 2 worker(s), round 1 of 1: RuntimeError" in markdown
    assert (tmp_path / "overhead.png").read_bytes().startswith(b"\x89PNG")


def test_the_regime_report_names_each_stretch_of_one_verdict_with_its_rates():
    from experiments.simulated_cluster import regime

    verdicts = {1: ("horovod faster", "native faster", "native faster"),
                4: ("horovod faster", "undecided", "native faster"),
                2: ("native faster", "not measured", "native faster")}
    rates = ["20mbit", "100mbit", "unshaped"]
    cells = [{"width": width, "rate": rate,
              "comparison": {"speed": {} if verdict == "not measured" else {"2": {"verdict": verdict}}}}
             for width, row in verdicts.items() for rate, verdict in zip(rates, row)]
    lines = regime.winners(cells, 2, rates)  # one per width, narrowest first
    assert lines[0].endswith("changes with the link: horovod faster (20mbit) → native faster (100mbit, unshaped).")
    assert lines[1].endswith("the verdict is the same at every rate measured (native faster).")
    assert lines[2].endswith("horovod faster (20mbit) → undecided (100mbit) → native faster "
                             "(unshaped).")


def test_the_aa_control_pairs_each_arm_with_its_twin_and_the_report_states_the_resolution(tmp_path):
    doc = comparison()
    twin = {"native": [2810.0, 2700.0, 2880.0], "horovod": [2710.0, 2800.0, 2790.0]}
    doc["runs"] += [run(f"{arm}-aa", 2, round_, value) for arm, values in twin.items()
                    for round_, value in enumerate(values)]
    doc["noise_floor"] = {"2": speed.noise_floor(doc["runs"], 2, ["native", "horovod", "native/torchrun"])}
    floor = doc["noise_floor"]["2"]
    assert list(floor) == ["native", "horovod"]  # native/torchrun ran without a twin: no A/A for it
    expected = stats.paired_ratio(STEADY["native", 2], twin["native"])
    assert floor["native"]["ratio"] == pytest.approx(expected.ratio)
    assert floor["native"]["half_width"] == pytest.approx(stats.half_width(expected))
    lo, hi = floor["native"]["ci95"]
    assert lo <= 1 <= hi and floor["native"]["repeats"] == 3
    two = section(report.render(write(tmp_path, doc)), 2)
    widest = max(floor[arm]["half_width"] for arm in floor)
    assert f"**Resolution here: ±{100 * widest:.1f} %**" in two
    assert f"native ÷ native-aa {report.ratio_text(floor['native'])}" in two
    assert "excludes 1" not in two
    # A twin that is consistently slower: the design would find a difference where there is none, and says so.
    doc["noise_floor"] = {"2": {"native": {"ratio": 1.1, "ci95": [1.05, 1.15], "repeats": 3, "half_width": 0.046}}}
    assert "(the interval excludes 1: this design finds a difference where there is none)" in \
        section(report.render(write(tmp_path, doc)), 2)


def test_without_the_aa_control_the_report_claims_no_resolution(tmp_path):
    assert "Resolution here" not in report.render(write(tmp_path, comparison()))


def test_aa_twins_run_under_their_own_labels_interleaved_with_the_arms_they_copy():
    from launchers.arms import for_backends
    from ray_jobs.orchestrator import runs as plan

    arms = for_backends(["native", "horovod"], ["ray", "torchrun"], aa=True)
    assert [arm.label for arm in arms] == ["native", "horovod", "native/torchrun", "native-aa", "horovod-aa",
                                           "native/torchrun-aa"]
    runs, _ = plan([1], arms, repeats=2)
    distributed = [(round_, arm.label) for round_, arm, _ in runs if arm.launcher != "local"]
    # Six arms in a Williams design: the first round's order, then its mirror.
    first = ["native", "horovod", "native/torchrun-aa", "native/torchrun", "horovod-aa", "native-aa"]
    assert distributed == [(0, label) for label in first] + [(1, label) for label in reversed(first)]
    assert [arm.label for arm in for_backends(["native", "horovod"], ["ray"])] == ["native", "horovod"]


def test_each_cell_states_its_verdict_with_its_half_width_and_what_would_decide_it():
    decided = {"ratio": 1.2, "ci95": [1.1, 1.3], "repeats": 4, "half_width": 0.087, "verdict": "native faster",
               "rounds_to_decide": 4}
    assert report.decision(decided) == "native faster (±8.7 %)"
    undecided = {**decided, "ci95": [0.98, 1.25], "half_width": 0.129, "verdict": "undecided", "rounds_to_decide": 9}
    assert report.decision(undecided) == "undecided at ±12.9 %; ~5 more round(s) to clear 1 at even odds"
    hopeless = {**undecided, "rounds_to_decide": None}
    assert report.decision(hopeless) == "undecided at ±12.9 %; gap within the noise (> 200 rounds)"
    assert report.decision({**decided, "ci95": None}) == "no interval (one round)"
    # A comparison written before these fields: the half-width from the ends, the old verdict's name understood.
    old = {"ratio": 1.0, "ci95": [0.9, 1.1], "repeats": 3, "verdict": "no detectable difference"}
    assert report.decision(old) == "undecided at ±10.6 %"


def test_the_verdict_plot_draws_every_row_and_says_when_there_is_none(tmp_path):
    from analysis import plots

    rows = [("native ÷ Horovod, 2 worker(s)", {"ratio": 1.2, "ci95": [1.1, 1.3]}),
            ("A/A: native ÷ itself, 2 worker(s)", {"ratio": 1.0, "ci95": [0.95, 1.05]}),
            ("one round", {"ratio": 0.9, "ci95": None})]
    plots.plot_intervals(rows, tmp_path / "verdicts.png", "title")
    plots.plot_intervals([], tmp_path / "empty.png", "title")
    for name in ("verdicts.png", "empty.png"):
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG")
    assert plots.in_words({"ratio": 0.65, "ci95": [0.496, 0.851]}) == "Horovod 53.8 % faster (17.5–101.6 %)"
    assert plots.in_words({"ratio": 1.103, "ci95": [1.071, 1.136]}) == "native 10.3 % faster (7.1–13.6 %)"
    assert plots.in_words({"ratio": 0.99, "ci95": [0.949, 1.032]}) == "undecided (−5.1 to +3.2 %)"
    assert plots.in_words(rows[1][1] | {"names": ("native", "its twin")}).startswith("no difference found (−5.0")


def test_without_ray_native_is_compared_under_the_first_of_its_own_launchers_that_ran(tmp_path):
    assert speed.compared_arms(["ray", "mp.spawn", "horovodrun"]) == ("native", "horovod")
    assert speed.compared_arms(["mp.spawn", "torchrun", "horovodrun"]) == ("native/mp.spawn", "horovod/horovodrun")
    assert speed.compared_arms(["torchrun", "mp.spawn"]) == ("native/torchrun", "horovod/horovodrun")
    doc = comparison()
    doc["settings"]["launchers"] = ["mp.spawn", "horovodrun"]
    doc["speed"]["2"]["launcher"] = "own launchers"
    assert "steady-state samples/s, native/mp.spawn and horovod/horovodrun: " in report.speed_line(doc, 2)


def test_a_run_measured_beside_other_work_carries_a_caveat_and_a_quiet_one_none():
    doc = comparison()
    for r in doc["runs"]:
        if r["status"] == "ok":
            busy = 0.6 if r["arm"] == "horovod" and r["workers"] == 2 else 0.05
            r["machine_load"] = {"others_share": busy, "steal_share": 0.0, "busy_share": 1.0, "cores": 2.0,
                                 "wall_s": 5.0}
    quiet = speed.speed(doc["runs"], 1, doc["settings"]["launchers"])
    busy = speed.speed(doc["runs"], 2, doc["settings"]["launchers"])
    assert quiet["machine_load"] is None and "measured while" not in quiet["sentence"]
    assert busy["sentence"].endswith(" — measured while other processes used up to 60 % of the cores (median native "
                                     "5 %, horovod 60 %): not a quiet-machine result; the load fell unevenly on the "
                                     "arms, so this ratio carries it")
    doc["speed"] = {"1": quiet, "2": busy}
    assert busy["sentence"] in report.speed_line(doc, 2)


def test_what_else_used_the_host_is_its_busy_time_less_the_ranks_own_plus_steal():
    from workload import host_load
    start, end = host_load.Sample(busy_s=100.0, steal_s=1.0), host_load.Sample(busy_s=118.0, steal_s=2.0)
    window = host_load.window(start, end, wall_s=10.0)
    load = host_load.others({**window, "cores": 2.0}, ranks_cpu_s=15.0)
    assert load["others_share"] == pytest.approx((18 - 15 + 1) / 20) and load["steal_share"] == pytest.approx(0.05)
    assert host_load.window(None, end, 10.0) is None and host_load.others(None, 1.0) is None
    assert host_load.sample() is not None  # Linux: /proc/stat reads


def test_the_terminal_summary_gives_the_verdicts_first_in_at_most_15_lines(tmp_path):
    from analysis import terminal

    doc = comparison()
    doc["settings"]["workers"] = [2]
    doc["model"] = {"name": "convnet", "parameters": 29_034, "gradient_bytes": 116_136}
    lines = terminal.summary(doc, tmp_path)
    assert len(lines) <= 15, lines
    assert lines[0] == "Native DDP or Horovod? convnet (116.1 kB of gradient), on Ray, 3 round(s), 5 min 0 s:"
    assert lines[2] == f"  speed (steady samples/s): {doc['speed']['2']['sentence']}"
    assert lines[3].startswith("  end to end (launch to return): ")
    assert "  parity: PASS, largest step-loss difference 0 over 50 steps" in lines
    assert lines[-2] == "1 run(s) failed: the report's Failed runs says why"
    assert lines[-1].startswith(f"report: {tmp_path / 'report.md'} (plots beside it: verdicts.png")


def test_a_progress_line_ends_each_reference_and_each_round_with_the_time_left(monkeypatch):
    from ray_jobs import progress

    clock = iter([0.0, 20.0, 20.0, 50.0, 50.0, 60.0])  # the runs take 20 s, 30 s and 10 s
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    todo = [(0, "reference", 2, True), (0, "native", 2, False), (0, "horovod", 2, False), (1, "horovod", 2, False),
            (1, "native", 2, False)]
    shown = progress.Progress(todo, rounds=2)
    # A reference prices no training run: the first estimate waits for one (it said 2 min with 8 to go, busy).
    assert shown.done(1, run("reference", 2, 0, 1800.0)) == ("[1/5] reference · 2 worker(s): test accuracy 97.00% "
                                                             "· the time left is known after the first round")
    shown.start()
    assert shown.done(2, run("native", 2, 0, 2800.0, started=9.1)) is None  # the round goes on
    shown.start()
    line = shown.done(3, run("horovod", 2, 0, None))
    assert line.startswith("[3/5] round 1/2 · 2 worker(s): native 2,800 samples/s steady, 31.5 s end to end; "
                           "horovod FAILED: RuntimeError")
    assert line.endswith(" · about 40 s left at the pace so far")  # each arm at its own median so far: 10 + 30 s


def test_a_refused_render_leaves_every_report_and_picture_as_it_was(tmp_path):
    """Given a parent folder whose second comparison is damaged, --render used to re-render the first, then rewrite
    the damaged one's report before it refused; now nothing under the folder changes."""
    import shutil

    from ray_jobs import compare
    from tests.helpers import REPO

    for name in ("model-convnet", "model-resnet50"):
        shutil.copytree(REPO / "docs" / "results" / "models" / name, tmp_path / name)
    (tmp_path / "model-convnet" / "report.md").write_text("an older report")
    (tmp_path / "model-convnet" / "loss.png").unlink()
    damaged = tmp_path / "model-resnet50" / COMPARISON
    doc = json.loads(damaged.read_text())
    del doc["speed"]
    damaged.write_text(json.dumps(doc))
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(ConfigError, match="damaged or from another version"):
        compare.render(tmp_path)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_a_step_taken_apart_names_only_the_phases_whose_paired_interval_decides():
    """Native − Horovod per phase, paired by round: forward differs by 10 ms in every round, backward by 1 ± 5 ms."""
    from tests.helpers import REPO

    comparison = json.loads((REPO / "docs/results/models-xeon-2026-11-25/model-convnet/comparison.json").read_text())
    for run in comparison["runs"]:
        if run["arm"] in ("native", "horovod") and run["status"] == "ok":
            native, r = run["arm"] == "native", run["round"]
            run["epochs"][-1]["phases_s"] = {
                "data": 0.001, "forward": 0.030 + (0.010 if native else 0.0),
                "backward": 0.050 + (0.001 + (0.005 if r % 2 else -0.005) if native else 0.0), "wait": 0.02,
                "optimizer": 0.005, "remainder": 0.002, "step": 0.108 + (0.011 if native else 0.0)}
    markdown = report.report_markdown(comparison)
    assert "| arm | runs | data | forward | backward | wait | optimizer | remainder | step |" in markdown
    assert "| native | 6 | 1.0 | 40.0 | " in markdown and "| reference |" not in markdown.split("A step taken")[1][:600]
    assert "native − horovod, paired by round over 6 round(s)" in markdown
    assert "Decided: forward +10.0 ms (whole intervals" in markdown  # not backward, nor the step that holds both


@pytest.mark.parametrize("flag", ["trace", "fused_buffers"])
def test_a_horovod_arm_with_its_timeline_on_is_said_not_to_be_like_for_like_and_a_native_only_one_is_not(flag):
    doc = comparison()
    doc["settings"]["config"][flag] = True
    assert report.timeline_on(doc) and report.TIMELINE_NOTE in report.report_markdown(doc)
    doc["runs"] = [r for r in doc["runs"] if r["backend"] != "horovod"]  # --backends native --trace
    assert not report.timeline_on(doc)
    assert not report.timeline_on(comparison())

"""The front door and the reference pages stand as written: every link resolves, the README's figures are the
committed results', and every command a user would paste parses and validates as it stands (flags, values, make
targets, modules and scripts) in the entry point's own parser and typed configs. docs/running.md's Ray block also runs
as pasted (tests/test_newcomer.py); the others train for minutes, and each entry point's run is the suite's own
(tests/test_compare.py's comparison runs every launcher)."""

import importlib
import importlib.util
import json
import re
import shutil
import shlex
import statistics
from pathlib import Path

import pytest

from analysis import stats
from contract.config import ConfigError, TrainConfig
from runtime import flags
from tests.helpers import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL = ("sh", "bash")


def blocks() -> list[tuple[str, str]]:
    """Every shell block of every page: (page, block text)."""
    out = []
    for page in PAGES:
        for lang, body in re.findall(r"```(\w*)\n(.*?)```", page.read_text(), re.S):
            if lang in SHELL:
                out.append((str(page.relative_to(REPO)), body))
    return out


def commands(block: str) -> list[str]:
    """A block's commands: continuations joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    out = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            out.append(" ".join(shlex.quote(w) for w in words))
    return out


EVERY = [(page, command) for page, block in blocks() for command in commands(block)]
OTHER_PROGRAMS = {"export", "source", "ray", "tensorboard", ".venv/bin/tensorboard", "pip"}
"""Commands of other programs, whose flags are theirs: a user's shell, Ray's CLI, TensorBoard, pip."""
PLACEHOLDER = re.compile(r"<[^>]+>|\.\.\.|…")


def entry_point(words: list[str]) -> tuple[str, list[str]] | None:
    """The project's module or script a command runs, and its arguments, through sudo, the venv's python, torchrun,
    horovodrun and `ray job submit … --`; None for a command of another program."""
    if "--" in words and words[0] == "ray":
        words = words[words.index("--") + 1:]
    while words and words[0] in ("sudo",):
        words = words[1:]
    if words[0] == "torchrun":
        return words[words.index("-m") + 1], words[words.index("-m") + 2:]
    if words[0] == "horovodrun":
        words = words[words.index("python"):] if "python" in words else words[3:]
    if Path(words[0]).name.startswith("python"):
        if words[1] == "-m":
            return words[2], words[3:]
        return words[1], words[2:]
    return None


TRAINING = ("ray_jobs.train", "native_ddp.train", "horovod_ddp.train", "native_ddp.spawn")
"""The entry points whose flags are TrainConfig's."""


def parse(module: str, argv: list[str]) -> None:
    """`argv` through `module`'s own parser, then the typed configs its flags build (their checks)."""
    loaded = importlib.import_module(module) if not module.endswith(".py") else _script(REPO / module)
    if module == "ray_jobs.gpu_check":  # its own flags, then compare's
        _, rest = loaded.parser().parse_known_args(argv)
        return parse("ray_jobs.compare", loaded.arguments(1, rest))
    args = loaded.parser().parse_args(argv)
    if module == "ray_jobs.compare":
        loaded.configs(args)
    elif module in TRAINING:
        flags.from_args(args, TrainConfig, **({} if "workers" in vars(args) else {"workers": 1}))
    elif module == "experiments.elastic.trials":
        loaded.check(args)


def _script(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAKE_TARGETS = set(re.findall(r"^([a-z-]+):", (REPO / "Makefile").read_text(), re.M))


@pytest.mark.parametrize("page, command", EVERY, ids=[f"{p}: {c[:60]}" for p, c in EVERY])
def test_every_command_a_user_would_paste_stands_as_written(page, command, monkeypatch):
    words = shlex.split(command)
    while re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # VARIABLE=value before the command: its environment
        words = words[1:]
    if words[0] == "make":
        assert words[1] in MAKE_TARGETS, f"{page}: make {words[1]} is no target of the Makefile"
        given = next((w.split("=", 1)[1] for w in words[2:] if w.startswith("ARGS=")), "")
        if given:
            parse("ray_jobs.gpu_check" if words[1] == "gpu-check" else "ray_jobs.compare", shlex.split(given))
        return
    found = entry_point(words)
    if found is None or found[0] == "pip":  # python3 -m pip: pip's own flags
        assert found or Path(words[0]).name in OTHER_PROGRAMS, \
            f"{page}: {command} runs neither the project nor a known tool"
        return
    module, argv = found
    # `<run-id>`: a path the user fills in; `…`: more of the same. The flags around them still parse.
    argv = [PLACEHOLDER.sub("filled-in", a) for a in argv if a not in ("...", "…")]
    monkeypatch.chdir(REPO)
    try:
        parse(module, argv)
    except SystemExit as exited:
        pytest.fail(f"{page}: `{command}` is refused by its parser (exit {exited.code})")
    except ConfigError as error:
        pytest.fail(f"{page}: `{command}` is refused: {error}")


def test_every_link_of_the_readme_and_the_docs_resolves():
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(REPO)} → {target}")
    assert not broken, broken


RESULTS = REPO / "docs" / "results"


@pytest.mark.docs
def test_make_docs_renders_every_committed_report_and_picture_again_byte_for_byte(tmp_path):
    """`make docs` (compare --render docs/results) from the committed JSON alone gives the committed files."""
    from ray_jobs import compare

    copy = tmp_path / "results"
    shutil.copytree(RESULTS, copy)
    for made in [p for p in copy.rglob("*") if p.suffix in (".md", ".png")]:
        made.unlink()
    compare.render(copy)
    # ray_jobs.replicate's, experiments.gpu_model.schedule_check's, published_check's and predict_gpus --cluster's,
    # tools/host_costs.py's and tools/first_step_gradients.py's: made again in test_replication.py,
    # test_gpu_prediction.py, test_gpu_cluster.py and test_parity.py, from their inputs rather than by --render; a
    # README is written by hand
    committed = sorted(p.relative_to(RESULTS) for p in RESULTS.rglob("*") if p.suffix in (".md", ".png")
                       and p.name not in ("replication.md", "schedule-check.md", "check.md", "host-costs.md",
                                          "first-step-gradients.md", "README.md", "prediction.md"))
    assert committed, "docs/results holds no rendered file"
    differ = [str(name) for name in committed if (copy / name).read_bytes() != (RESULTS / name).read_bytes()]
    assert not differ, differ


def per_model_rows() -> list[str]:
    """docs/findings.md's per-model table: the rows under its marker."""
    page = (REPO / "docs" / "findings.md").read_text()
    answer = page.split(ANSWER_START, 1)[1].split("\n\n", 2)[1]
    return [line for line in answer.splitlines() if line.startswith("| ") and not line.startswith("| setting")]


def test_the_per_model_figures_are_the_committed_results():
    """Each row of docs/findings.md's per-model table stands, cell for cell, in a report rendered from docs/results."""
    rows = per_model_rows()
    assert rows, "docs/findings.md's per-model table has no rows"
    reports = "\n".join(p.read_text() for p in RESULTS.rglob("report.md"))
    missing = [row for row in rows if row not in reports]
    assert not missing, missing
    for page in (REPO / "README.md", REPO / "docs" / "findings.md"):
        for picture in re.findall(r"\]\(((?:docs/)?results/[^)]+\.png)\)", page.read_text()):
            assert (page.parent / picture).is_file(), picture


def _span(values: list[float], digits: int) -> str:
    return f"{min(values):.{digits}f}–{max(values):.{digits}f}"


def test_the_readme_s_rows_by_hardware_are_the_committed_results():
    """The first screen's figures: the CPU row's span is the per-model table's, the efficiency spans its column's,
    the GPU row is the H200's committed host costs and its check's parity, and the clusters' row is the prediction's span and
    its error on the published runs it was not fitted on."""
    readme = (REPO / "README.md").read_text()
    assert readme.index(BY_HARDWARE) < len("\n".join(readme.splitlines()[:40])), "the answer left the first screen"
    table = readme.split(BY_HARDWARE, 1)[1].split("\n\n", 1)[0]
    row = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines()[2:]}
    cells = [line.split(" | ") for line in per_model_rows()]
    steady = [float(c[3].split()[0]) for c in cells]
    assert {c[7] for c in cells} == {"PASS"} and {c[8].rstrip(" |") for c in cells} == {"6"}, cells
    assert all(float(c[3].split("(")[1].split("–")[0]) > 1 for c in cells), "a model is not decided for native"
    assert (f"{len(cells)} models, small synthetic images, 6 interleaved rounds each, each rank on a core of its own "
            f"| {_span(steady, 2)}: native faster on every model" in row["2 CPU ranks, one 2-core VM"]), row
    snapshots = [sorted(map(float, found)) for found in re.findall(
        r"(\d+\.\d), (\d+\.\d), (\d+\.\d) and (\d+\.\d) %", (REPO / "docs" / "findings.md").read_text())]
    assert len(snapshots) == 3 and (f"native {_span(snapshots[0], 1)} % faster (this VM), {_span(snapshots[1], 1)} % "
                                    f"(this VM, another day) and {_span(snapshots[2], 1)} % (a Xeon VM)"
                                    ) in " ".join(readme.split()), snapshots
    efficiency = [[float(side.split()[0]) for side in c[6].split(" / ")] for c in cells]
    assert (f"native keeps {_span([e[0] for e in efficiency], 2)} of it and Horovod "
            f"{_span([e[1] for e in efficiency], 2)}") in " ".join(readme.split()), efficiency
    gpu = json.loads((RESULTS / "gpu-nvidia-h200" / "host-costs.json").read_text())["summary"]
    steps = [h / n for h, n in zip(gpu["horovod"]["framework_step_s_resnet50_b32"]["rounds"],
                                   gpu["native"]["framework_step_s_resnet50_b32"]["rounds"])]
    mean, (low, high) = stats.mean_interval(steps)
    parity = json.loads((RESULTS / "gpu-nvidia-h200" / "check-resnet50-224px-b32" / "comparison.json").read_text())
    assert (f"{len(steps)} interleaved rounds of [what each framework adds](docs/results/gpu-nvidia-h200/README.md) | "
            f"whole step {mean:.2f} ({low:.2f}–{high:.2f}): {'undecided' if low <= 1 <= high else 'decided'}; "
            f"Horovod's step end {1000 * gpu['horovod']['step_end_s_at_161']['mean']:.2f} ms | yes: parity "
            f"{parity['parity']['1']['verdict']} in the check's round") in row["1 GPU, one H200"], row["1 GPU, one H200"]
    check = json.loads((RESULTS / "published-gpu" / "check.json").read_text())
    published = [r["published"]["native_over_horovod"] for r in check["rows"] if r["published"]["native_over_horovod"]]
    assert (f"| {_span(published, 3)}: DDP ahead in all {len(published)} |" in row["8 GPUs, 2 nodes x 4 (A100, V100)"]
            and min(published) > 1)
    prediction = json.loads((RESULTS / "gpu-prediction" / "gpu-prediction.json").read_text())
    clusters = [r for r in prediction["rows"] if r["gpus"] >= 8]
    assert {r["gpus"] for r in clusters} == {8, 16, 64}
    assert {r["rate_gbit"] for r in clusters} - {None} == {100, 200, 400}
    ratios = [round(r["ratio"], 3) for r in clusters]
    ranges = [round(end, 3) for r in clusters for end in r["range"]]
    ahead = sum(r["range"][0] > 1 for r in clusters)
    worst, bar, v = check["validation"]["worst"], check["bar"], check["validation"]
    bound = sorted({r["model"] for r in clusters if r["host_bound"]})
    assert bound == ["resnet50"] and all(r["beyond_checked"] for r in clusters if r["gpus"] > 8)
    assert (f"on the {v['rows']} published runs it was not fitted on, native ÷ Horovod off by "
            f"{100 * worst['ratio_error']:.1f} % at most (bar {100 * bar['ratio']:.0f} %), DDP's scaling by "
            f"{100 * worst['ddp_scaling_error']:.1f} points (bar {100 * bar['scaling']:.0f}): "
            f"{BARS_MET[(v['met']['ratio'] == v['paired']) + (v['met']['ddp_scaling'] == v['rows'])]}; past 8 GPUs "
            f"nothing published or measured checks it | {_span(ratios, 3)} (ranges {_span(ranges, 3)}): native faster "
            f"in {ahead} of {len(clusters)} rows, the other's range holds 1; ResNet-50's scaling not given: bound by "
            "the host" in row["8–64 GPUs, NVLink, 100–400 Gbit/s"]), (ratios, ranges)
    assert check["host_bound"]["above_images_per_s"] == 938 and "faster than 938 img/s" in " ".join(readme.split())
    for batch in (32, 256):
        made = json.loads((RESULTS / "gpu-prediction" / f"h200-2x8-b{batch}" / "prediction.json").read_text())
        ratio, cluster = made["native_over_horovod"], made["cluster"]
        said = "undecided" if ratio["low"] <= 1 <= ratio["high"] else "native faster"
        assert (f"| 2 × 8 H200, batch {batch}, {cluster['precision']} |" in readme and
                f"| {ratio['value']:.3f} ({ratio['low']:.3f}–{ratio['high']:.3f}): {said}; no scaling: bound by the "
                "host |" in row[f"2 × 8 H200, batch {batch}, {cluster['precision']}"]) and made["host_bound"]


BARS_MET = ("neither bar met", "one bar met", "both bars met")
"""The validation in words: how many of its two bars every held-out row is within."""
BY_HARDWARE = "<!-- by hardware: tests/test_docs.py ties each figure to docs/results -->"
ANSWER_START = "<!-- the answer: tests/test_docs.py checks each row against docs/results -->"


FAST = ["-m", "not cluster and not faults and not docs"]
"""The selection `make test-fast`'s pytest makes; `make test` selects every test."""


@pytest.mark.docs
def test_the_test_counts_docs_install_md_gives_are_what_pytest_collects():
    import subprocess
    import sys

    table = (REPO / "docs" / "install.md").read_text().split("## The test tiers", 1)[1].split("\n\n", 2)[1]
    # One collection gives both: "F/W tests collected (D deselected)", the fast tier F of the whole suite W.
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *FAST],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    fast, whole = map(int, re.search(r"(\d+)/(\d+) tests collected", done.stdout).groups())
    for target, collected in (("`make test-fast`", fast), ("`make test`", whole)):
        row = next(line for line in table.splitlines() if line.startswith(f"| {target} |"))
        said = int(re.search(r"(\d[\d,]*) tests", row)[1].replace(",", ""))
        assert said == collected, f"docs/install.md says {target} runs {said} tests; pytest collects {collected}"


def minutes(text: str) -> list[float]:
    """Every "N min M s" in `text`, in minutes."""
    return [int(m) + int(sec) / 60 for m, sec in re.findall(r"(\d+) min (\d+) s", text)]


def fresh_clones() -> list[list[str]]:
    """docs/install.md's fresh clones, one row each: the clone, setup, make test, make compare."""
    table = (REPO / "docs" / "install.md").read_text().split("## What each command costs", 1)[1].split("\n\n")
    rows = next(block for block in table if block.startswith("| fresh clone |")).splitlines()[2:]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows]


def test_the_readme_s_first_block_runs_the_comparison_and_the_tests_with_their_measured_times():
    """The two commands a newcomer needs first, each with its time: make compare's budget and the range of setups,
    make test's range, both over the fresh clones docs/install.md records; Ray Train's later start is the committed
    models' medians."""
    readme = (REPO / "README.md").read_text()
    first = readme.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split()[0] for line in first[:2]] == ["make", "make"] and "compare" in first[0] and "test" in first[1]
    rows = fresh_clones()
    setups = [m for row in rows for m in minutes(row[1])]
    tests = [minutes(row[2])[0] for row in rows if minutes(row[2])]
    budget = re.search(r"--budget-min (\d+)", (REPO / "Makefile").read_text())[1]
    assert (f"({budget} min, after {round(min(setups))}–{round(max(setups))} of setup: docs/install.md)"
            in first[0]), (setups, first[0])
    assert f"({round(min(tests))}–{round(max(tests))} min on 2 cores: docs/install.md)" in first[1], (tests, first[1])
    started = {arm: [] for arm in ("native", "horovod")}
    for path in [*RESULTS.glob("models/model-*/comparison.json"), RESULTS / "vit_b_16" / "comparison.json"]:
        by_arm = {arm: [r["phases"]["workers_started"] for r in json.loads(path.read_text())["runs"]
                        if r["status"] == "ok" and r["arm"] == arm] for arm in started}
        for arm, values in by_arm.items():
            started[arm].append(statistics.median(values))
    assert (f"Ray Train had its workers up {_span(started['native'], 1)} s after launch, RayExecutor "
            f"{_span(started['horovod'], 1)} s") in " ".join(readme.split()), started

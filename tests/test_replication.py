"""Does a verdict hold on another machine or day: snapshots side by side from their JSON alone, the step's part that
moved between two of them, the unpaired interval it rests on, and what is refused."""

import json
import shutil

import pytest

from analysis import replication, stats
from contract.config import ConfigError
from tests.helpers import REPO, assert_one_line_error, run_module

RESULTS = REPO / "docs" / "results"
CONVNET = RESULTS / "models-epyc-2026-11-26" / "model-convnet"


def test_welch_interval_is_the_difference_of_means_with_its_unpaired_interval():
    diff, (lo, hi) = stats.welch_interval([1.0, 2.0, 3.0], [0.0, 0.0, 3.0])
    # variances of the means 1/3 and 1, so 3.2 degrees of freedom, rounded down to 3: t = 3.1824
    assert diff == 1.0 and lo == pytest.approx(1.0 - 3.18245 * (4 / 3) ** 0.5, abs=1e-4)
    assert hi == pytest.approx(2 * diff - lo)
    assert stats.welch_interval([2.0], [1.0, 3.0]) == (0.0, None)  # one value has no spread
    assert stats.welch_interval([2.0, 2.0], [1.0, 1.0]) == (1.0, (1.0, 1.0))


def snapshot(root, moved_ms: float = 0.0, verdict: str | None = None):
    """The committed ConvNet comparison copied as a one-setting grid, native's backward (and so its step) `moved_ms`
    longer in every run, its verdict replaced where given."""
    folder = root / "model-convnet"
    shutil.copytree(CONVNET, folder)
    doc = json.loads((folder / "comparison.json").read_text())
    for run in doc["runs"]:
        if run["arm"] == "native" and run["epochs"][-1].get("phases_s"):
            for part in ("backward", "step"):
                run["epochs"][-1]["phases_s"][part] += moved_ms / 1000
    if verdict:
        doc["speed"]["2"]["verdict"] = verdict
    doc["run_id"] = f"measured-as-{root.name}"  # a measurement of its own, not a copy of the committed one
    (folder / "comparison.json").write_text(json.dumps(doc))
    return str(root)


def test_the_part_that_moved_between_two_snapshots_is_named_and_the_verdicts_counted(tmp_path):
    first = snapshot(tmp_path / "first")
    later = snapshot(tmp_path / "later", moved_ms=5.0, verdict="undecided")
    text = replication.render([first, later])
    table = [line for line in text.splitlines() if line.startswith("| convnet")]
    assert len(table) == 2 and all("| AMD EPYC | 1.21 (1.16–1.26) | 6 |" in line for line in table)
    assert "backward -2.9, wait -2.8" in table[0] and "backward +2.1" in table[1]  # −2.9 + 5 ms
    said = text.split("- **convnet, 2 workers**: ", 1)[1]
    assert said.startswith("native faster on 1 of 2 snapshots, undecided on 1 of 2 snapshots (1 CPU: AMD EPYC)")
    assert "backward +5.0 (" in said and said.rstrip().endswith(": backward.")  # unpaired: an interval around 5
    assert "(day not recorded)" in text  # a copy named neither by compare's run id nor a grid's


def test_a_snapshot_without_the_step_s_parts_is_counted_and_said_so():
    folders = [str(RESULTS / "models-epyc-2026-11-26"), str(RESULTS / "models-xeon-2026-11-25")]
    text = replication.render(folders)
    assert f"{folders[1]} (2026-11-25) | Intel(R) Xeon(R) Processor | 1.10 (1.01–1.18) | 6 | not recorded" in text
    assert "- **resnet50, 2 workers**: native faster on 2 of 2 snapshots (2 CPUs: AMD EPYC, Intel(R) Xeon(R) " \
           "Processor); no two snapshots took the step apart." in text


def test_the_committed_replication_is_made_again_byte_for_byte(monkeypatch):
    committed = (RESULTS / "replication.md").read_text()
    command = committed.split("`python -m ray_jobs.replicate ", 1)[1].split("`", 1)[0]
    monkeypatch.chdir(REPO)
    assert replication.render(command.split()) == committed


@pytest.mark.parametrize("folders, says", [
    (["docs/results/models"], "give at least two snapshot folders"),
    (["docs/results/models", "docs/results/models/"], "give each snapshot once, none inside another"),
    (["docs/results/models", "docs/results/models/model-resnet18"], "give each snapshot once, none inside another"),
    (["docs/results/models", "docs/results/resnet18-knobs"], "holds two comparisons of resnet18 at 2 workers"),
    (["docs/results/models", "docs/results/nowhere"], "docs/results/nowhere is not a folder"),
    (["docs/results/models", "docs"], "docs holds no comparison.json, nor do its subfolders"),
    (["docs/results/models", "docs/results/vit_b_16"], "no model and worker count was compared in two of"),
])
def test_snapshots_that_cannot_be_set_side_by_side_are_one_line_and_write_nothing(tmp_path, monkeypatch, folders,
                                                                                 says):
    monkeypatch.chdir(REPO)
    with pytest.raises(ConfigError, match=says):
        replication.render(folders)
    done = run_module("ray_jobs.replicate", *folders, "--output", str(tmp_path / "out.md"))
    assert_one_line_error(done, says)
    assert not (tmp_path / "out.md").exists()


def damaged(root, change) -> str:
    """The committed ConvNet comparison as a snapshot of its own, `change(doc)` applied."""
    folder = root / "model-convnet"
    shutil.copytree(CONVNET, folder)
    doc = json.loads((folder / "comparison.json").read_text())
    doc["run_id"] = f"measured-as-{root.name}"
    change(doc)
    (folder / "comparison.json").write_text(json.dumps(doc))
    return str(root)


@pytest.mark.parametrize("change, says", [
    (lambda doc: doc["speed"]["2"].update(ratio=float("nan")), "native ÷ Horovod at 2 workers is nan"),
    (lambda doc: doc["speed"]["2"].update(ci95=[1.0, float("inf")]), "which no comparison writes"),
    (lambda doc: doc["environment"].update(cpu=7), "environment.cpu and the verdict must be text"),
])
def test_a_snapshot_with_a_number_no_comparison_writes_is_refused_as_damaged_not_counted(tmp_path, change, says):
    with pytest.raises(ConfigError, match=f"is damaged or from another version .*{says}"):
        replication.render([snapshot(tmp_path / "first"), damaged(tmp_path / "later", change)])


def test_copies_of_one_snapshot_are_not_more_snapshots(tmp_path):
    shutil.copytree(RESULTS / "models-epyc-2026-11-26", tmp_path / "copy")
    with pytest.raises(ConfigError, match="hold the same comparison .*: a copy is not a second snapshot"):
        replication.render([str(RESULTS / "models-epyc-2026-11-26"), str(tmp_path / "copy")])


@pytest.mark.parametrize("output, says", [
    ("{tmp}", "is a folder; name a Markdown file"),
    ("{tmp}/" + "a" * 300 + ".md", "its name is 303 bytes, filesystems allow 255"),
    ("README.md/replication.md", "README.md is a file, not a folder"),
])
def test_an_output_that_cannot_be_a_file_is_one_line_and_nothing_is_left(tmp_path, output, says):
    done = run_module("ray_jobs.replicate", "docs/results/models-epyc-2026-11-26",
                      "docs/results/models-epyc-2026-11-27", "--output", output.format(tmp=tmp_path))
    assert_one_line_error(done, says)
    assert not list(tmp_path.iterdir()) and not list(REPO.glob(".*.tmp*"))

"""tools/elastic_probe.py: what a trial's timeline says, and its refusals. The trials themselves (three frameworks
on the simulated cluster, minutes each) are a benchmark, run by hand; their figures are in the README."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "elastic_probe.py"
_spec = importlib.util.spec_from_file_location("elastic_probe", TOOL)
probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe)


def step(t, world, epoch, offset):
    return {"ev": "step", "t": t, "world": world, "epoch": epoch, "offset": offset, "n": world * 100}


def test_a_run_that_shrinks_and_grows_back():
    events = [{"ev": "start", "t": 0.0, "world": 2, "epoch": 0, "offset": 0},
              step(1, 2, 0, 200), step(2, 2, 0, 400),
              step(10.05, 2, 0, 600),  # the dying world's last step, logged after the kill: not progress
              {"ev": "start", "t": 11.0, "world": 1, "epoch": 0, "offset": 400},
              step(11.5, 1, 0, 500), step(12, 1, 0, 600),
              {"ev": "start", "t": 75.0, "world": 2, "epoch": 0, "offset": 600},
              step(76, 2, 0, 800), {"ev": "done", "t": 77.0}]
    got = probe.figures(events, killed=10.0, returned=70.0, epochs=1, samples=800)
    # 200 + 200 + 200 (lost) + 100 + 100 + 200 = 1000 samples for an 800-sample epoch
    assert got == {"finished": True, "stalled_s": 1.5, "continued_world": 1, "regrown_s": 6.0,
                   "samples_twice": 200, "worlds": [1, 2]}


def test_a_run_that_waits_for_the_node_never_shrank_so_it_has_no_regrowth():
    events = [{"ev": "start", "t": 0.0, "world": 2, "epoch": 0, "offset": 0}, step(1, 2, 0, 200),
              {"ev": "start", "t": 80.0, "world": 2, "epoch": 0, "offset": 0}, step(81, 2, 0, 200),
              step(82, 2, 0, 400)]
    got = probe.figures(events, killed=5.0, returned=65.0, epochs=1, samples=400)
    assert (got["finished"], got["stalled_s"], got["continued_world"], got["regrown_s"], got["samples_twice"]) \
        == (False, 76.0, 2, None, 200)


def test_no_kill_no_figures_of_a_loss():
    events = [{"ev": "start", "t": 0.0, "world": 2, "epoch": 0, "offset": 0}, step(1, 2, 0, 200)]
    got = probe.figures(events, killed=None, returned=None, epochs=1, samples=200)
    assert (got["stalled_s"], got["continued_world"], got["regrown_s"], got["samples_twice"]) == (None, None, None, 0)


def test_the_table_has_a_row_per_mode_with_median_and_range():
    rows = [{"mode": "torchrun", "finished": True, "stalled_s": s, "continued_world": 1, "regrown_s": 6.0,
             "samples_twice": 900} for s in (44.0, 47.5, 45.1)]
    lines = probe.table(rows, ["torchrun"]).splitlines()
    assert lines[2] == "| torchrun | 3 | 3/3 | 45.1 (44.0–47.5) | 1, 1, 1 | 6.0 (6.0–6.0) | 900 (900–900) |"
    assert probe.table(rows[:2], ["torchrun"]).splitlines()[2].split(" | ")[3] == "45.8 (44.0–47.5)"


@pytest.mark.parametrize("argv, needle", [
    (["--trials", "0"], "--trials must be >= 1"),
    (["--modes", "torchrun,torchrun"], "--modes takes distinct names"),
    (["--modes", "slurm"], "--modes takes distinct names"),
    (["--return-after-s", "0"], "--return-after-s must be > 0"),
    (["--epochs", "2"], "--epochs must be > 2"),
    (["--samples", "4100"], "--samples must be a multiple of 200, at least 4000"),
])
def test_bad_input_is_one_line_and_exit_2_before_anything_starts(argv, needle, tmp_path):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(TOOL), *argv, "--output-dir", str(out)], capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr.count("\n")) == (2, "", 1)
    assert done.stderr.startswith("error: ") and needle in done.stderr
    assert not out.exists()

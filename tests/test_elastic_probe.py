"""experiments/elastic/probe.py's refusals. What a trial's timeline says is experiments/elastic/report.py's
(tests/test_elastic.py); the trials themselves (three frameworks on the simulated cluster, minutes each) are a
benchmark, run by hand."""

import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "experiments" / "elastic" / "probe.py"


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

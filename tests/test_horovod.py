"""Horovod: real horovodrun (Gloo) subprocesses (the same worker on a local Ray cluster: tests/test_compare.py's
comparison)."""

import pytest

from tests.helpers import BIN, assert_one_line_error, data_flags, read_results, run_command, run_module
from tests.helpers import assert_trained

pytestmark = pytest.mark.cluster


def test_horovod_is_built_with_pytorch_and_gloo():
    result = run_command([str(BIN / "horovodrun"), "--check-build"], timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "[X] PyTorch" in result.stdout and "[X] Gloo" in result.stdout, result.stdout


def horovodrun(np: int, *flags: str, timeout: float = 300):
    return run_module("horovod_ddp.train", *flags, launcher=(str(BIN / "horovodrun"), "-np", str(np), "--gloo"),
                      timeout=timeout)


@pytest.fixture(scope="module")
def two_ranks(base_cfg, tmp_path_factory):
    """`horovodrun -np 2` for one epoch with checkpoints on: its result and its folders."""
    root = tmp_path_factory.mktemp("hvd2")
    result = horovodrun(2, *data_flags(base_cfg), "--output-dir", str(root / "out"),
                        "--checkpoint-dir", str(root / "ckpt"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return read_results(root / "out"), root


def test_two_ranks_train_and_agree(two_ranks):
    doc, _ = two_ranks
    assert_trained(doc, 2, "horovodrun", backend="horovod")
    assert doc["config"]["lr"] == 0.01 and doc["config"]["batch_size"] == 100  # no hidden scaling by world size


def test_resume_trains_only_the_new_epoch(two_ranks, base_cfg):
    first, root = two_ranks
    result = horovodrun(2, *data_flags(base_cfg), "--output-dir", str(root / "out2"), "--checkpoint-dir",
                        str(root / "ckpt"), "--epochs", "2")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "resuming after epoch 1" in result.stdout
    second = read_results(root / "out2")
    assert second["resumed_from_epoch"] == 1 and [e["epoch"] for e in second["epochs"]] == [1, 2]
    assert second["epochs"][0] == first["epochs"][0]
    assert "Epoch [1/2]" not in result.stdout and "Epoch [2/2], Step" in result.stdout
    # Its wall time covers both epochs it reports, the first run's included, not only its own attempt.
    assert second["final"]["wall_time_s"] >= sum(e["epoch_time_s"] + e["eval_time_s"] for e in second["epochs"])
    # The resumed run is the uninterrupted run: momentum comes back too (it was lost when restored before the
    # DistributedOptimizer wrap, and the broadcast then sent zeros).
    whole = horovodrun(2, *data_flags(base_cfg), "--output-dir", str(root / "whole"), "--epochs", "2")
    assert whole.returncode == 0, whole.stdout[-3000:] + whole.stderr[-3000:]
    assert second["step_losses"] == read_results(root / "whole")["step_losses"]
    # Killed after its last checkpoint and before its result (results.json goes first): the same command again
    # trains nothing and writes the result from the checkpoint.
    (root / "out2" / "results.json").unlink()
    again = horovodrun(2, *data_flags(base_cfg), "--output-dir", str(root / "out2"), "--checkpoint-dir",
                       str(root / "ckpt"), "--epochs", "2")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "Step [" not in again.stdout and "resuming after epoch 2" in again.stdout
    third = read_results(root / "out2")
    assert (third["resumed_from_epoch"], third["epochs"], third["step_losses"], third["final"]["test_accuracy"]) == \
        (2, second["epochs"], second["step_losses"], second["final"]["test_accuracy"])


def test_four_ranks_oversubscribed_on_two_cores(base_cfg, tmp_path):
    result = horovodrun(4, *data_flags(base_cfg), "--output-dir", str(tmp_path / "out"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    doc = read_results(tmp_path / "out")
    assert doc["workers"] == 4 and doc["parameters_identical_across_ranks"] is True
    assert doc["final"]["test_accuracy"] > 0.85  # 15 steps of 4 x 100 digits


def test_compression_and_local_accumulation_stay_in_the_accuracy_band(two_ranks, base_cfg, tmp_path):
    # Together, as tests/test_options.py holds them under every launcher, bit for bit to their reference.
    plain, _ = two_ranks
    result = horovodrun(2, *data_flags(base_cfg), "--output-dir", str(tmp_path / "out"), "--compression", "fp16",
                        "--grad-accumulation", "2")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    doc = read_results(tmp_path / "out")
    assert doc["final"]["test_accuracy"] > 0.90
    assert abs(doc["final"]["test_accuracy"] - plain["final"]["test_accuracy"]) < 0.03
    assert doc["epochs"][0]["steps"] == plain["epochs"][0]["steps"]


def test_without_horovodrun_runs_as_a_single_worker_and_says_so(base_cfg, tmp_path):
    result = run_module("horovod_ddp.train", *data_flags(base_cfg), "--output-dir", str(tmp_path / "out"),
                        "--max-steps-per-epoch", "10")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "not started by horovodrun: running as a single worker" in result.stdout
    # The launcher's summary, as every launcher prints it, after the run's own first line: the dataset.
    ours = [line for line in result.stdout.splitlines() if not line.startswith("[")]
    assert ours[0].startswith("dataset: synthetic digits"), result.stdout[-3000:]
    assert "horovod via horovodrun: 1 worker(s)" in result.stdout and "final test accuracy" in result.stdout
    assert read_results(tmp_path / "out")["workers"] == 1


def test_horovod_without_pytorch_support_names_the_build_command(base_cfg, tmp_path):
    # A horovod package whose torch extension was never built, found before the real one.
    fake = tmp_path / "fake" / "horovod" / "torch"
    fake.mkdir(parents=True)
    (fake.parent / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("raise ImportError('Extension horovod.torch has not been built')\n")
    result = run_module("horovod_ddp.train", *data_flags(base_cfg), env={"PYTHONPATH": str(tmp_path / "fake")},
                        timeout=120)
    assert_one_line_error(result, "has not been built", "make install")


@pytest.mark.parametrize("flags, needle", [
    (["--epochs", "0"], "--epochs must be a positive integer"),
    (["--batch-size", "0"], "--batch-size must be a positive integer"),
    (["--lr", "-1"], "--lr must be > 0"),
    (["--grad-accumulation", "3"], "must be divisible by --grad-accumulation 3"),
])
def test_bad_numbers_are_one_line_errors(base_cfg, tmp_path, flags, needle):
    result = run_module("horovod_ddp.train", *data_flags(base_cfg), "--output-dir", str(tmp_path / "out"), *flags,
                        timeout=120)
    assert_one_line_error(result, needle)
    assert not (tmp_path / "out").exists()


def test_a_stalled_peer_ends_the_job_within_its_bound():
    # A 5 s bound, waited on generously: without it the job would wait forever.
    result = run_module("tests.stalled_peer", "5", launcher=(str(BIN / "horovodrun"), "-np", "2", "--gloo"),
                        timeout=120)
    assert result.returncode != 0
    assert "no progress for" in result.stdout + result.stderr

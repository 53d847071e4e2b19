"""Native DDP on a real local Ray cluster (TorchTrainer): resume, capacity, addresses. A plain run under each launcher
is tests/test_compare.py's comparison; `ray job submit`, docs/running.md's block in tests/test_newcomer.py."""

from dataclasses import replace

import pytest

from launchers.on_ray import run
from launchers.ray_failures import RayRunOptions
from tests.helpers import assert_one_line_error, assert_trained, data_flags, free_port, read_results, run_module

pytestmark = pytest.mark.cluster


def test_two_workers_on_ray_resume_by_name_then_from_checkpoint_dir(ray_cluster, cfg, tmp_path):
    # One worker on Ray: tests/test_newcomer.py's default run. Ray Train's ScalingConfig takes the placement strategy
    # and places both workers on one node (RayExecutor's: tests/test_faults.py's Horovod on Ray).
    options = RayRunOptions(name="resume-me", storage_path=str(tmp_path / "ray"))
    first = run("native", replace(cfg, workers=2, placement_strategy="STRICT_PACK"), options)
    assert_trained(first, 2, "ray")
    assert first["config"]["placement_strategy"] == "STRICT_PACK"
    assert len({rank["node_id"] for rank in first["placement"]}) == 1
    assert read_results(tmp_path / "out") == first
    assert first["epochs"][0]["steps"] == cfg.synthetic_train_size // (2 * cfg.batch_size)
    # The same name and storage path with one more epoch: Ray hands back the epoch-1 checkpoint.
    second = run("native", replace(cfg, workers=2, epochs=2), options)
    assert second["resumed_from_epoch"] == 1
    assert [e["epoch"] for e in second["epochs"]] == [1, 2]
    assert second["epochs"][0] == first["epochs"][0]  # carried over, not retrained
    assert second["step_losses"][: len(first["step_losses"])] == first["step_losses"]
    assert second["epochs"][1]["train_loss"] < first["epochs"][0]["train_loss"]
    # --checkpoint-dir works on Ray as under torchrun: a run of another name (none) carries on from that folder.
    ckpt = tmp_path / "ray" / "resume-me" / "native-checkpoints"  # where --name put them (see run_checkpoints)
    third = run("native", replace(cfg, workers=2, epochs=3, checkpoint_dir=str(ckpt),
                                  output_dir=str(tmp_path / "out3")), RayRunOptions(storage_path=str(tmp_path / "ray3")))
    assert third["resumed_from_epoch"] == 2 and third["epochs"][:2] == second["epochs"]
    assert third["config"]["epochs"] == 3 and len(third["step_losses"]) == 3 * len(first["step_losses"])


@pytest.mark.parametrize("flags, needle", [
    (["--backend", "mxnet"], "invalid choice: 'mxnet'"),
    (["--workers", "0"], "--workers must be a positive integer"),
    (["--epochs", "0"], "--epochs must be a positive integer"),
    (["--batch-size", "-5"], "--batch-size must be a positive integer"),
    (["--lr", "0"], "--lr must be > 0"),
    (["--lr", "fast"], "invalid float value: 'fast'"),
    (["--autotune"], "--autotune is a Horovod option, not applicable to DDP"),
])
def test_bad_flags_are_one_line_errors(cfg, tmp_path, flags, needle):
    result = run_module("ray_jobs.train", *data_flags(cfg), "--output-dir", str(tmp_path / "out"), *flags,
                        env={"RAY_ADDRESS": f"127.0.0.1:{free_port()}"}, timeout=120)
    assert_one_line_error(result, needle)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flags, needle", [
    (["--workers", "5"], "--workers 5 needs 5 CPUs but the Ray cluster has 4"),
    (["--workers", "2", "--use-gpu"], "--workers 2 needs 2 GPUs but the Ray cluster has 0"),
])
def test_more_workers_than_the_cluster_holds_fails_before_starting(ray_cluster, cfg, tmp_path, flags, needle):
    result = run_module("ray_jobs.train", *data_flags(cfg), "--output-dir", str(tmp_path / "out"), *flags,
                        env={"RAY_ADDRESS": ray_cluster.address}, timeout=120)
    assert_one_line_error(result, needle)
    assert not (tmp_path / "out").exists()


def test_unreachable_ray_address_fails_without_ray_s_minutes_of_retries(cfg, tmp_path):
    result = run_module("ray_jobs.train", *data_flags(cfg), "--output-dir", str(tmp_path / "out"),
                        env={"RAY_ADDRESS": f"127.0.0.1:{free_port()}"}, timeout=60)
    assert_one_line_error(result, "cannot reach the Ray cluster", "ray start --head")

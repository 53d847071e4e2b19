"""Single-process tier: the shared step, metrics maths, checkpoints and the result schema, with no cluster."""

import argparse
import math
import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from contract import results
from contract.config import ConfigError, TrainConfig
from contract.results import History
from runtime import space
from tests.helpers import free_port
from workload import checkpoint, data, reference, run
from workload.distributed import DistContext
from workload.metrics import epoch_timing, mean_ci95
from workload.reference import EmulatedSync
from workload.run import build_model
from workload.trainer import Trainer, build_optimizer, shard_loader


def test_one_epoch_on_default_synthetic_size_reaches_90_percent(tmp_path):
    cfg = data.resolve(TrainConfig(dataset="synthetic", data_dir=str(tmp_path / "data"),
                                   output_dir=str(tmp_path / "out")))
    doc = reference.train(cfg)
    assert cfg.synthetic_train_size == 10_000 and doc["epochs"][0]["steps"] == 100
    assert doc["final"]["test_accuracy"] >= 0.90
    losses = doc["step_losses"]
    assert sum(losses[-10:]) / 10 < 0.5 * sum(losses[:10]) / 10
    assert results.read(tmp_path / "out" / "results.json") == doc


def test_shards_are_disjoint_and_cover_the_training_set(base_cfg):
    splits = data.load(base_cfg)
    shards = []
    for rank in range(3):
        loader = shard_loader(splits, base_cfg, rank, 3)
        loader.sampler.set_epoch(1)
        shards.append(list(loader.sampler))
    seen = [i for shard in shards for i in shard]
    # DistributedSampler pads to equal shard sizes by repeating the first indices.
    assert set(seen) == set(range(len(splits.train)))
    assert len(seen) - len(set(seen)) == (-len(splits.train)) % 3
    assert not set(shards[0]) & set(shards[1])
    loader.sampler.set_epoch(2)
    assert list(loader.sampler) != shards[2]  # set_epoch reshuffles


@pytest.mark.parametrize("compression_name", ["none", "fp16", "bf16"])
@pytest.mark.parametrize("accumulation", [1, 2])
def test_single_rank_gloo_ddp_steps_match_the_reference_bit_for_bit(cfg, compression_name, accumulation):
    """A one-rank process group through the real DDP wrapper, comm hook and no_sync() ends with the weights of the
    reference's emulation of DDP's arithmetic, bit for bit."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        from native_ddp.adapter import DDPGradientSync, torch_all_reduce

        cfg = replace(cfg, compression=compression_name, grad_accumulation=accumulation)
        splits = data.load(cfg)
        ctx = DistContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"),
                          all_reduce=torch_all_reduce(torch.device("cpu")))
        images, labels = splits.train.tensors[0][:100], splits.train.tensors[1][:100]
        groups = [list(zip(images.chunk(accumulation), labels.chunk(accumulation)))]
        losses, weights = [], []
        for wrap in (False, True):
            model = build_model(cfg, ctx.device)
            optimizer = build_optimizer(model, cfg, 1)
            net = DDP(model) if wrap else model
            sync = (DDPGradientSync(net, optimizer, compression_name) if wrap else
                    EmulatedSync(model, optimizer, compression_name, "native"))
            trainer = Trainer(ctx=ctx, cfg=cfg, model=net, module=model, optimizer=optimizer, sync=sync,
                              splits=splits, loaders=[])
            for _ in range(3):
                loss, sync_s = trainer.train_step(groups)
                assert sync_s >= 0
            losses.append(float(loss))
            weights.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
        assert losses[0] == losses[1]
        assert torch.equal(weights[0], weights[1])
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("message, lost", [
    ("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:4242", True),
    ("[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 10000ms for recv", True),
    ("Application timeout caused pair closure", True),  # a broadcast's other operations, once the timeout closed
    ("CUDA out of memory", False),
])
def test_a_collective_that_lost_its_peer_is_told_from_any_other_error(message, lost):
    from native_ddp.adapter import lost_peer

    assert lost_peer(RuntimeError(message)) is lost


def test_epoch_timing_excludes_warmup_and_reports_shares():
    # 2 workers, 4 steps of (data, compute, sync, samples); the first step is a slow warm-up.
    step = [[0.0, 5.0, 0.0, 100]] + [[0.01, 0.07, 0.02, 100]] * 3
    stats = epoch_timing(torch.tensor([step, step], dtype=torch.float64), warmup_steps=1)
    assert stats["measured_steps"] == 3
    assert stats["samples_per_s_median"] == pytest.approx(2000)
    assert stats["samples_per_s_per_worker"] == pytest.approx(1000)
    assert stats["samples_per_s"] == pytest.approx(2000)
    assert stats["samples_per_s_per_worker_ci95"] == pytest.approx(0, abs=1e-6)
    assert stats["step_time_p50_s"] == pytest.approx(0.1)
    assert (stats["comm_share"], stats["data_share"]) == (pytest.approx(0.2), pytest.approx(0.1))


def test_a_step_is_taken_apart_into_phases_that_add_up_to_it_with_the_remainder():
    # (data, compute, sync, samples, cpu, forward, backward, optimizer): 10 + 20 wait of a 100 ms step, whose
    # compute holds 30 forward, 25 backward, 10 optimizer and 5 of zeroing and bookkeeping.
    row = [0.010, 0.070, 0.020, 100, 0.1, 0.030, 0.025, 0.010]
    stats = epoch_timing(torch.tensor([[row] * 3, [row] * 3], dtype=torch.float64), warmup_steps=1)
    assert {k: round(v, 6) for k, v in stats["phases_s"].items()} == {
        "data": 0.01, "forward": 0.03, "backward": 0.025, "wait": 0.02, "optimizer": 0.01, "step": 0.1,
        "remainder": 0.005}
    assert "phases_s" not in epoch_timing(torch.tensor([[row[:5]] * 3]), warmup_steps=1)  # results before phases


def test_mean_ci95_is_1_96_standard_deviations():
    mean, ci = mean_ci95(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert mean == 2.5 and ci == pytest.approx(1.96 * math.sqrt(5 / 3))


def test_checkpoint_round_trip_and_atomic_replace(cfg, tmp_path):
    model = build_model(cfg, torch.device("cpu"))
    optimizer = build_optimizer(model, cfg, 1)
    model(torch.randn(4, 1, 28, 28)).sum().backward()
    optimizer.step()
    history = History(step_losses=[1.0, 0.5], epochs=[{"epoch": 1}])
    checkpoint.save(tmp_path, model, optimizer, history, cfg, "native", "torchrun")
    # Overwriting leaves one file and no temporaries.
    checkpoint.save(tmp_path, model, optimizer, history, cfg, "native", "torchrun")
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]
    fresh = build_model(replace(cfg, seed=1), torch.device("cpu"))
    fresh_optimizer = build_optimizer(fresh, cfg, 1)
    restored = checkpoint.restore(checkpoint.load(tmp_path), fresh, fresh_optimizer)
    assert restored == history and restored.last_epoch == 1
    for a, b in zip(model.state_dict().values(), fresh.state_dict().values()):
        assert torch.equal(a, b)
    assert fresh_optimizer.state_dict()["state"].keys() == optimizer.state_dict()["state"].keys()
    assert checkpoint.load(tmp_path / "nothing") is None


def test_result_schema_rejects_incomplete_documents(cfg):
    doc = reference.train(replace(cfg, max_steps_per_epoch=8))
    results.validate(doc)
    assert doc["environment"]["torch"] == torch.__version__.split("+")[0]
    for key in ("backend", "environment", "final"):
        broken = {k: v for k, v in doc.items() if k != key}
        with pytest.raises(ValueError, match=key):
            results.validate(broken)
    with pytest.raises(ValueError, match="one loss per step"):
        results.validate({**doc, "step_losses": doc["step_losses"][:-1]})


def test_epoch_timing_counts_the_samples_each_step_processed():
    # A short last batch (40 of 100) counts for what it holds, in the rate too.
    steps = [[0.0, 0.1, 0.0, 100]] * 3 + [[0.0, 0.1, 0.0, 40]]
    stats = epoch_timing(torch.tensor([steps], dtype=torch.float64), warmup_steps=0)
    assert stats["samples_per_s_per_worker"] == pytest.approx((1000 * 3 + 400) / 4)
    assert stats["samples_per_s_median"] == pytest.approx(1000)


def test_sample_counts_are_the_samples_processed_not_the_nominal_batch(cfg):
    # 6000 digits at batch 4000: one full batch and one of 2000; the epoch says 6000, not 8000.
    doc = reference.train(replace(cfg, batch_size=4000, warmup_steps=0))
    assert doc["epochs"][0]["steps"] == 2 and doc["epochs"][0]["samples"] == cfg.synthetic_train_size


def test_a_diverging_run_stops_with_a_clear_error_and_writes_nothing(cfg):
    from workload.trainer import Diverged

    with pytest.raises(Diverged, match="training diverged.*lower --lr"):
        reference.train(replace(cfg, lr=1e30, max_steps_per_epoch=20))
    assert not (Path(cfg.output_dir) / results.FILENAME).exists()


def test_a_loss_that_grows_a_thousandfold_has_diverged_though_it_stays_finite(cfg):
    """Seen: at --lr 50 the losses went from 2.35 to 2.7e16, all finite, and parity passed on them."""
    from workload.trainer import Diverged

    with pytest.raises(Diverged, match=r"training diverged: the loss grew over 1000x, from 2\.\d+ at the first step "
                                       r"to .* by epoch 1, step 10 \(--lr 50.0, .*lower --lr"):
        reference.train(replace(cfg, lr=50.0, max_steps_per_epoch=10))
    assert not (Path(cfg.output_dir) / results.FILENAME).exists()


@pytest.mark.parametrize("losses, said", [
    ([2.3, 1.9, 0.4], None), ([2.3, 40.0, 0.9], None),  # a spike of a run that trains on
    ([2.35, 9.1, 2.7e16], "the loss grew over 1000x, from 2.35 at the first step to 2.7e+16"),
    ([0.05, 60.0], "the loss grew over 1000x"), ([2.3, math.inf], "the loss became inf"),
    ([2.3, math.nan, 1.0], "the loss became nan")])
def test_diverged_is_a_loss_not_finite_or_a_thousand_times_the_first_step_s(losses, said):
    from contract.errors import diverged

    assert diverged(losses) == said if said is None else said in diverged(losses)


def test_a_resumed_run_counts_the_checkpoint_writes_of_the_attempts_before_it(cfg, monkeypatch):
    """checkpoint_time_s once covered the last attempt only; the writes before travel in the checkpoint's history."""
    carried = History(checkpoint_s=5.0)
    monkeypatch.setattr(reference, "train_and_report",
                        lambda trainer, **kwargs: run.train_and_report(trainer, history=carried, **kwargs))
    doc = reference.train(replace(cfg, max_steps_per_epoch=8))
    assert doc["checkpoint_time_s"] >= 5.0 and carried.checkpoint_s >= 5.0


def test_results_json_is_strict_json(tmp_path):
    with pytest.raises(ValueError):
        space.write_json(tmp_path / "x.json", {"rate": float("nan")})
    assert not (tmp_path / "x.json").exists()


def saved_checkpoint(cfg, directory, epochs=1) -> None:
    model = build_model(cfg, torch.device("cpu"))
    history = History(step_losses=[1.0], epochs=[{"epoch": e} for e in range(1, epochs + 1)])
    checkpoint.save(directory, model, build_optimizer(model, cfg, 1), history, cfg, "native", "torchrun")


@pytest.mark.parametrize("change, needle", [
    ({"lr": 5.0}, "--lr 0.01 -> 5.0"),
    ({"batch_size": 50, "epochs": 3}, "--batch-size 100 -> 50"),
    ({"workers": 2, "epochs": 3}, "--workers 1 -> 2"),
    ({"seed": 1, "epochs": 3}, "--seed 0 -> 1"),
    ({"epochs": 1}, "has already trained 2 epoch(s), more than --epochs 1; pass --epochs 2 to write its result"),
    ({"backend": "horovod"}, "--backend native -> horovod"),
    ({"launcher": "ray"}, "--launcher torchrun -> ray"),
])
def test_a_resume_with_other_settings_is_refused(cfg, tmp_path, change, needle):
    launch = (change.pop("backend", "native"), change.pop("launcher", "torchrun"))
    saved_checkpoint(cfg, tmp_path, epochs=2)
    state = checkpoint.load(tmp_path)
    with pytest.raises(ConfigError) as refused:
        checkpoint.check_resume(state, replace(cfg, **{"epochs": 3, **change}), tmp_path, *launch)
    assert needle in str(refused.value)


def test_a_resume_may_grow_epochs_and_move_outputs(cfg, tmp_path):
    saved_checkpoint(cfg, tmp_path, epochs=1)
    state = checkpoint.load(tmp_path)
    checkpoint.check_resume(state, replace(cfg, epochs=4, output_dir=str(tmp_path / "elsewhere"), log_every=3),
                            tmp_path, "native", "torchrun")
    # Its last epoch done and checkpointed, a run killed before its result finishes from the checkpoint.
    checkpoint.check_resume(state, replace(cfg, epochs=1), tmp_path, "native", "torchrun")


@pytest.mark.parametrize("content, needle", [
    (b"garbage bytes, not a checkpoint", "is not a readable checkpoint"),
    (None, "is not a checkpoint of this project"),
    ("other-model", "holds weights of another model"),
    ("foreign-pickle", "is not a readable checkpoint"),
])
def test_a_file_that_is_not_our_checkpoint_is_one_clear_error(tmp_path, content, needle):
    path = tmp_path / checkpoint.FILENAME
    if content is None:
        torch.save({"model": {}}, path)
    elif content == "foreign-pickle":
        # Another program's pickle is refused, not executed: checkpoints load with weights_only.
        torch.save({"args": argparse.Namespace(lr=0.1)}, path)
    elif content == "other-model":
        torch.save({k: {} for k in checkpoint.KEYS} | {"model": torch.nn.Linear(3, 2).state_dict()}, path)
    else:
        path.write_bytes(content)
    with pytest.raises(ConfigError, match=needle):
        checkpoint.load(tmp_path)


def test_every_run_writes_tensorboard_scalars_and_files_as_the_umask_says(cfg, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from workload.tensorboard_scalars import TAGS

    out = tmp_path / "run"
    old = os.umask(0o027)  # not the usual 022: the modes must follow the umask, not happen to match it
    try:
        doc = reference.train(replace(cfg, epochs=2, max_steps_per_epoch=8, output_dir=str(out)))
    finally:
        os.umask(old)
    events = EventAccumulator(str(out))
    events.Reload()
    assert set(events.Tags()["scalars"]) == TAGS
    losses = events.Scalars("train/step_loss")
    assert [e.step for e in losses] == list(range(1, 17))
    assert [e.value for e in losses] == pytest.approx(doc["step_losses"], rel=1e-6)
    accuracy = events.Scalars("test/accuracy")
    assert [(e.step, e.value) for e in accuracy] == [(8, pytest.approx(doc["epochs"][0]["test_accuracy"])),
                                                     (16, pytest.approx(doc["epochs"][1]["test_accuracy"]))]
    assert stat.S_IMODE((out / results.FILENAME).stat().st_mode) == 0o640
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o640 for p in out.glob("events.out.tfevents.*"))


def test_the_reference_keeps_each_simulated_worker_s_batchnorm_buffers_and_averages_them_before_evaluating(cfg,
                                                                                                          tmp_path):
    """As each rank does: a worker's forward updates its own running statistics, and before an evaluation they are
    averaged over the workers (timm's distribute_bn), so the reference evaluates as Horovod's averaged ranks do."""
    cfg = data.resolve(replace(cfg, model="tests.tiny_models:tiny", image_size=16, workers=2, batch_size=4,
                               data_dir=str(tmp_path), synthetic_train_size=64, synthetic_test_size=8, warmup_steps=1))
    ctx, splits = DistContext(0, 1, 0, torch.device("cpu"), lambda t, op: t.clone()), data.load(cfg)
    model = build_model(cfg, ctx.device)
    optimizer = build_optimizer(model, cfg, 2)
    trainer = Trainer(ctx=ctx, cfg=cfg, model=model, module=model, optimizer=optimizer, splits=splits,
                      sync=EmulatedSync(model, optimizer, "none", "native"),
                      loaders=[shard_loader(splits, cfg, rank, 2) for rank in range(2)])
    groups = trainer._micro_batches(next(zip(*trainer.loaders)))
    trainer.train_step(groups)
    first, second = trainer.worker_buffers
    assert not torch.equal(first, second)  # each worker saw its own batch
    trainer.average_buffers()
    bn = trainer.module[1]
    assert torch.equal(torch.cat([bn.running_mean, bn.running_var]), (first + second) / 2)
    assert all(torch.equal(w, (first + second) / 2) for w in trainer.worker_buffers)


def test_a_run_that_ends_before_its_first_epoch_leaves_no_tensorboard_file(tmp_path):
    """A failed run's folder held an 88-byte events.out.tfevents beside its log: the writer came with the run."""
    from workload.tensorboard_scalars import Scalars

    scalars = Scalars(tmp_path, 0)
    scalars.close()
    assert list(tmp_path.iterdir()) == []

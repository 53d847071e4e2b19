import json
from dataclasses import replace
import re

import numpy as np
import pytest
import torch

from contract import models
from contract.config import ConfigError, TrainConfig
from contract.summary import format_result
from workload import data, images, reference
from workload.model import ConvNet, build, describe


def test_output_shape_and_parameter_count():
    model = ConvNet()
    assert model(torch.zeros(7, 1, 28, 28)).shape == (7, 10)
    # conv1 416 + bn1 32 + conv2 12 832 + bn2 64 + fc 15 690: the tutorial network's 29 034.
    assert sum(p.numel() for p in model.parameters()) == 29_034


def test_layers_are_the_tutorial_network():
    model = ConvNet()
    conv1, bn1, _, pool1 = model.layer1
    conv2, bn2, _, pool2 = model.layer2
    assert (conv1.in_channels, conv1.out_channels, conv1.kernel_size, conv1.padding) == (1, 16, (5, 5), (2, 2))
    assert (conv2.in_channels, conv2.out_channels, conv2.kernel_size, conv2.padding) == (16, 32, (5, 5), (2, 2))
    assert (bn1.num_features, bn2.num_features) == (16, 32)
    assert pool1.kernel_size == pool2.kernel_size == 2
    assert (model.fc.in_features, model.fc.out_features) == (1568, 10)


@pytest.mark.parametrize("name, size", [("convnet", {"width": 1}), ("convnet", {"width": 3}), ("mlp", {}),
                                        ("resnet18", {}), ("resnet18", {"num_classes": 7}), ("resnet50", {}),
                                        ("vit_b_16", {}), ("vit_b_16", {"image_size": 64, "num_classes": 3})])
def test_the_registry_counts_each_model_as_torch_builds_it(name, size):
    cfg = TrainConfig(model=name, **{"model_width" if k == "width" else k: v for k, v in size.items()})
    network = build(cfg)
    record = describe(network, cfg)
    assert record["parameters"] == models.parameters(name, **size) == sum(p.numel() for p in network.parameters())
    assert record["gradient_bytes"] == models.gradient_bytes(name, **size) == 4 * record["parameters"]
    pixels = (1, 28) if models.spec(name).inputs == models.DIGITS else (3, cfg.image_size)
    assert (record["channels"], record["image_size"]) == pixels
    assert network(torch.zeros(2, pixels[0], pixels[1], pixels[1])).shape == (2, cfg.num_classes)


def test_the_gradients_span_the_regimes_the_backends_differ_in():
    # One DDP bucket (< 1 MiB), a few (1-25 MB), several and Horovod's fusion threshold (> 128 MiB) crossed.
    sizes = {name: models.gradient_bytes(name) / 2**20 for name in models.MODELS}
    assert sizes["convnet"] < 1 < sizes["mlp"] < 25 < sizes["resnet18"] < sizes["resnet50"] < 128 < sizes["vit_b_16"]


def test_each_model_takes_its_own_defaults_unless_given():
    assert (TrainConfig().batch_size, TrainConfig().synthetic_train_size) == (100, 10_000)
    resnet = TrainConfig(model="resnet18")
    assert (resnet.batch_size, resnet.synthetic_train_size, resnet.synthetic_test_size) == (32, 2560, 512)
    assert TrainConfig(model="resnet50", batch_size=16).batch_size == 16
    assert TrainConfig(model="tests.tiny_models:tiny").batch_size == 32


@pytest.mark.parametrize("bad, needle", [
    ({"model": "resnet1"}, "--model must be one of convnet, mlp, resnet18, resnet50, vit_b_16"),
    ({"model": "resnet18", "model_width": 2}, "--model-width scales convnet"),
    ({"model": "mlp", "image_size": 64}, "mlp trains on 28x28 digits"),
    ({"model": "convnet", "num_classes": 5}, "convnet trains on 28x28 digits"),
    ({"model": "resnet18", "dataset": "mnist"}, "MNIST is for convnet and mlp"),
    ({"model": "vit_b_16", "image_size": 40}, "must be a multiple of 16"),
    ({"model": "resnet18", "image_size": 8}, "--image-size must be from 16 to 512"),
    ({"model": "resnet18", "num_classes": 1}, "--num-classes must be from 2"),
    ({"model": "resnet50", "batch_size": 4, "grad_accumulation": 4}, "needs micro-batches of at least 2"),
])
def test_a_model_setting_that_cannot_train_is_refused(bad, needle):
    with pytest.raises(ConfigError, match=needle):
        TrainConfig(**bad)


def test_synthetic_images_are_deterministic_balanced_and_learnable():
    a, labels = images.generate(200, 16, 5, seed=3)
    again, _ = images.generate(200, 16, 5, seed=3)
    other, _ = images.generate(200, 16, 5, seed=4)
    test, test_labels = images.generate(100, 16, 5, seed=3, split=1)
    assert a.shape == (200, 3, 16, 16) and a.dtype == np.uint8 and np.array_equal(a, again)
    assert not np.array_equal(a, other) and np.bincount(labels).tolist() == [40] * 5
    # The test split shares the classes' patterns, shifted: by its spectrum (blind to a circular shift), the nearest
    # training class mean names most test images.
    def spectrum(x):
        return np.abs(np.fft.fft2(x.astype(float)))

    means = np.stack([spectrum(a[labels == c]).mean(0) for c in range(5)])
    guess = np.argmin(((spectrum(test)[:, None] - means[None]) ** 2).sum((2, 3, 4)), 1)
    assert (guess == test_labels).mean() > 0.5  # chance: 0.2


def test_image_data_is_made_once_and_a_damaged_copy_is_refused(tmp_path):
    cfg = data.resolve(TrainConfig(model="tests.tiny_models:tiny", image_size=16, data_dir=str(tmp_path),
                                   synthetic_train_size=256, synthetic_test_size=32))
    root = data.images_root(cfg)
    made = {p.name: p.stat().st_mtime_ns for p in root.iterdir()}
    assert cfg.dataset == "synthetic" and sorted(made) == sorted(n for pair in images.FILES.values() for n in pair)
    splits = data.load(cfg)
    assert splits.train.tensors[0].shape == (256, 3, 16, 16) and splits.test.tensors[1].dtype == torch.int64
    assert {p.name: p.stat().st_mtime_ns for p in root.iterdir()} == made  # loaded, not made again
    np.save(root / "train-labels.npy", np.zeros(5, dtype=np.int64))
    with pytest.raises(data.DataError, match="not the images this setting makes; delete"):
        data.load(cfg)


def test_a_user_network_trains_on_the_images_and_is_recorded(tmp_path):
    cfg = data.resolve(TrainConfig(model="tests.tiny_models:tiny", image_size=16, data_dir=str(tmp_path / "d"),
                                   output_dir=str(tmp_path / "o"), synthetic_train_size=640, synthetic_test_size=64,
                                   epochs=2, workers=2, warmup_steps=2, log_every=100))
    doc = reference.train(cfg)
    assert doc["model"] == {"name": "tests.tiny_models:tiny", "parameters": 5_370, "gradient_bytes": 21_480,
                            "image_size": 16, "channels": 3, "batch_norm": True}
    said = format_result(doc)  # a small network in kilobytes, and what its test loss rests on with BatchNorm
    assert "(0.01 M parameters, 21.5 kB of gradient)" in said and "they may differ between the backends" in said
    assert doc["epochs"][-1]["train_loss"] < min(2.2, doc["epochs"][0]["train_loss"])  # it learns: ln 10 ≈ 2.3
    assert doc["overlap"] is None and doc["cpu_s_per_1k_samples"] > 0 and len(doc["peak_rss_bytes"]) == 1


@pytest.mark.parametrize("name, needle", [
    ("tests.no_such_module:tiny", "cannot import tests.no_such_module (ModuleNotFoundError"),
    ("tests.tiny_models:missing", "tests.tiny_models has no callable 'missing'"),
    ("tests.tiny_models:NOT_CALLABLE", "has no callable 'NOT_CALLABLE'"),
    ("tests.tiny_models:not_a_module", "returned str, not a torch.nn.Module"),
])
def test_a_user_network_that_does_not_resolve_is_one_config_error(name, needle):
    with pytest.raises(ConfigError, match=re.escape(needle)):
        build(TrainConfig(model=name))


def test_a_network_that_drops_is_recorded_so_and_its_parity_fail_says_why():
    """A parity FAIL from dropout's masks read as a bug: the model record says dropout, and so does the report."""
    import json

    from analysis import report
    from tests.helpers import REPO

    cfg = TrainConfig(model="tests.tiny_models:with_dropout", image_size=16)
    assert describe(build(cfg), cfg)["dropout"] is True
    tiny = TrainConfig(model="tests.tiny_models:tiny", image_size=16)
    assert "dropout" not in describe(build(tiny), tiny)
    with torch.device("meta"):  # torchvision's vit_b_16 builds its Dropout layers with p = 0.0
        assert "dropout" not in describe(build(TrainConfig(model="vit_b_16")), TrainConfig(model="vit_b_16"))
    comparison = json.loads((REPO / "docs/results/models-xeon-2026-11-25/model-convnet/comparison.json").read_text())
    comparison["model"]["dropout"] = True
    assert report.DROPOUT_NOTE not in report.report_markdown(comparison)  # PASS: nothing to explain
    comparison["parity"]["2"]["verdict"] = "FAIL"
    assert report.DROPOUT_NOTE in report.report_markdown(comparison)


def test_a_network_with_batch_norm_is_recorded_so():
    with torch.device("meta"):
        assert describe(build(TrainConfig(model="resnet18")), TrainConfig(model="resnet18"))["batch_norm"] is True
        assert "batch_norm" not in describe(build(TrainConfig(model="vit_b_16")), TrainConfig(model="vit_b_16"))
    assert "batch_norm" not in describe(build(TrainConfig(model="mlp")), TrainConfig(model="mlp"))


def test_an_epoch_shorter_than_the_default_warm_up_times_its_second_half_and_says_so(tmp_path, caplog):
    from contract.config import warmup_for
    from runtime import preflight

    assert [warmup_for(5, steps) for steps in (2, 3, 4, 5, 6, 40)] == [1, 1, 2, 2, 5, 5]
    assert (warmup_for(4, 3), warmup_for(0, 3)) == (4, 0)  # a warm-up asked for is kept: refused where too long
    short = TrainConfig(model="resnet50", workers=16)  # the default 1,920 images: 3 steps at 16 workers
    assert preflight.warmup_chosen(short, 1920) == (
        "an epoch is 3 steps at --workers 16: its first 1 warm up (the default --warmup-steps 5 would leave none to "
        "time) and 2 are timed; --synthetic-train-size 12800 would time 20")
    caplog.set_level("INFO")
    cfg = data.resolve(TrainConfig(model="tests.tiny_models:tiny", image_size=16, data_dir=str(tmp_path / "d"),
                                   output_dir=str(tmp_path / "o"), synthetic_train_size=128, synthetic_test_size=32,
                                   batch_size=32))
    doc = reference.train(cfg)
    assert doc["epochs"][-1]["steps"] == 4 and doc["epochs"][-1]["warmup_steps"] == 2
    assert "an epoch is 4 steps: its first 2 warm up" in caplog.text


def test_synthetic_images_stay_their_bytes_and_a_batch_converts_bit_for_bit_as_the_whole_set_did(tmp_path):
    """The images are held as on disk (uint8, memory-mapped) and normalised a batch at a time: every value is what the
    whole-set conversion gave before, so every run trains exactly as it did."""
    from workload.trainer import shard_loader

    cfg = data.resolve(TrainConfig(model="tests.tiny_models:tiny", image_size=16, data_dir=str(tmp_path),
                                   synthetic_train_size=256, synthetic_test_size=32, workers=2))
    splits = data.load(cfg)
    pixels = splits.train.tensors[0]
    assert pixels.dtype == torch.uint8 and isinstance(images.read(data.images_root(cfg), "train")[0],
                                                      np.memmap)
    on_disk = np.load(data.images_root(cfg) / images.FILES["train"][0])
    whole = (torch.from_numpy(on_disk.copy()).float() / 255 - images.MEAN) / images.STD
    loader = shard_loader(splits, cfg, 1, cfg.workers)
    loader.sampler.set_epoch(1)
    batch, _ = next(iter(loader))
    taken = list(loader.sampler)[:cfg.batch_size]
    assert torch.equal(data.inputs(batch).view(torch.int32), whole[taken].view(torch.int32))
    every = torch.arange(256, dtype=torch.uint8)
    assert torch.equal(data.inputs(every).view(torch.int32),
                       ((every.float() / 255 - images.MEAN) / images.STD).view(torch.int32))
    digits = torch.randn(4, 1, 28, 28)
    assert data.inputs(digits) is digits  # digits arrive normalised


@pytest.mark.parametrize("model", ["resnet50", "vit_b_16"])
def test_the_recipe_s_8_workers_a_node_pass_the_memory_preflight_on_a_64_gb_machine(model):
    """docs/real-cluster.md's comparison at 224 px, 12,800 + 2,560 images: the set once, memory-mapped, and each
    rank's batch or evaluation chunk; it used to need the whole set as float32 in every rank (about 9 GB each)."""
    from runtime import preflight

    recipe = TrainConfig(model=model, image_size=224, workers=8, use_gpu=True, amp="bf16", synthetic_train_size=12800,
                         synthetic_test_size=2560)
    machine = 64 * 10**9 * 9 // 10  # what a 64 GB machine has available beside its system
    preflight.synthetic_memory(recipe, available=machine)
    preflight.synthetic_memory(replace(recipe, workers=16), available=machine)  # even all 16 ranks on it
    pixels = 3 * 224 ** 2
    rank = preflight.EVAL_BATCH * (9 * pixels + 8)
    assert (12800 + 2560) * (pixels + 8) + 8 * rank < 14 * 10**9  # 2.2 GiB of images, 1.3 GiB a rank
    with pytest.raises(ConfigError, match=r"15,360 synthetic images and 8 rank\(s\) need about 12\.2 GB of memory "
                                          r"on a machine that holds them all \(2\.2 GB of images, memory-mapped and "
                                          r"shared, and 1\.3 GB a rank"):
        preflight.synthetic_memory(recipe, available=8 * 10**9)
    from runtime import space
    from tests.helpers import REPO

    figures = [space.size(preflight.synthetic_file_bytes(recipe) + w * rank) for w in (8, 16)]
    said = " ".join((REPO / "docs" / "real-cluster.md").read_text().split())
    assert (f"counts the set once ({space.size(preflight.synthetic_file_bytes(recipe))} with the 2,560 test images) "
            f"and {space.size(rank)} a rank") in said
    assert f"{figures[0]} for 8 ranks on one machine, {figures[1]}" in said


@pytest.mark.cluster
def test_a_rank_s_peak_memory_is_its_batch_and_its_shard_s_pages_not_the_set_as_float32(tmp_path):
    """Two ranks under torchrun on images whose float32 copy (3.1 GB) would dwarf the rest (a rank of this model at
    this size peaks near 1.2 GB on 400 images): each rank's recorded peak RSS stays below it, since the set stays as
    its bytes, memory-mapped, and is converted a batch at a time."""
    from tests.helpers import BIN, read_results, run_command

    train, size = 10000, 160
    result = run_command([str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", "-m", "native_ddp.train",
                          "--model", "tests.tiny_models:any_size", "--image-size", str(size), "--synthetic-train-size",
                          str(train), "--synthetic-test-size", "200", "--max-steps-per-epoch", "20",
                          "--data-dir", str(tmp_path / "data"), "--output-dir", str(tmp_path / "out")], timeout=600)
    assert result.returncode == 0, result.stderr
    as_float32 = train * 3 * size ** 2 * 4
    peaks = read_results(tmp_path / "out")["peak_rss_bytes"]
    assert len(peaks) == 2 and max(peaks) < as_float32, (peaks, as_float32)

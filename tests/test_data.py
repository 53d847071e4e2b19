import gzip
import logging
import os
import shutil
import stat
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.datasets import MNIST

from contract.config import TrainConfig
from tests.helpers import assert_one_line_error, run_module
from workload import data, synthetic


def raw_dir(cfg: TrainConfig) -> Path:
    return data.mnist_root(cfg) / "MNIST" / "raw"


def test_synthetic_idx_round_trips_through_torchvision(tmp_path):
    cfg = TrainConfig(dataset="synthetic", data_dir=str(tmp_path), synthetic_train_size=300, synthetic_test_size=50,
                      seed=7)
    root = data.write_synthetic(cfg)
    images, labels = synthetic.generate(300, seed=14)  # the train split's seed: 2 * seed
    loaded = MNIST(str(root), train=True)
    assert torch.equal(loaded.data, torch.from_numpy(images))
    assert torch.equal(loaded.targets, torch.from_numpy(labels).long())
    assert len(MNIST(str(root), train=False)) == 50
    raw = root / "MNIST" / "raw" / "train-images-idx3-ubyte"
    assert gzip.decompress(raw.with_name(raw.name + ".gz").read_bytes()) == raw.read_bytes()


def test_synthetic_digits_are_deterministic_balanced_and_varied():
    images, labels = synthetic.generate(200, seed=1)
    again, _ = synthetic.generate(200, seed=1)
    other, _ = synthetic.generate(200, seed=2)
    assert np.array_equal(images, again) and not np.array_equal(images, other)
    assert np.bincount(labels, minlength=10).tolist() == [20] * 10
    # Two samples of one digit differ (shifts, strokes, noise), and there is ink on a dark background.
    sevens = images[labels == 7].astype(float)
    assert np.abs(sevens[0] - sevens[1]).mean() > 10
    assert images.mean() < 80 and images.max() > 200


def test_load_gives_normalised_in_memory_tensors(base_cfg):
    splits = data.load(base_cfg)
    images, labels = splits.train.tensors
    assert images.shape == (base_cfg.synthetic_train_size, 1, 28, 28) and images.dtype == torch.float32
    assert labels.dtype == torch.int64 and int(labels.max()) == 9
    assert abs(float(images.mean())) < 1.0  # normalised with MNIST's mean and std, not raw 0-255


@pytest.fixture
def broken(base_cfg, tmp_path) -> TrainConfig:
    """A private copy of the session's synthetic files, to break."""
    cfg = replace(base_cfg, data_dir=str(tmp_path / "data"))
    shutil.copytree(data.mnist_root(base_cfg), data.mnist_root(cfg))
    return cfg


def test_missing_file(broken):
    (raw_dir(broken) / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(data.DataError, match="missing .*t10k-labels-idx1-ubyte"):
        data.load(broken)


def test_truncated_images(broken):
    path = raw_dir(broken) / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(data.DataError, match="truncated"):
        data.load(broken)


def test_corrupt_header(broken):
    path = raw_dir(broken) / "train-labels-idx1-ubyte"
    path.write_bytes(b"\x00\x00\x08\x03" + path.read_bytes()[4:])
    with pytest.raises(data.DataError, match="not an MNIST IDX file of labels"):
        data.load(broken)


def test_image_and_label_counts_differ(broken):
    _, labels = synthetic.generate(broken.synthetic_test_size - 1, seed=0)
    (raw_dir(broken) / "t10k-labels-idx1-ubyte").write_bytes(synthetic.idx_bytes(labels))
    with pytest.raises(data.DataError, match=f"{broken.synthetic_test_size} test images but"):
        data.load(broken)


def test_wrong_image_size(broken):
    images = np.zeros((broken.synthetic_test_size, 32, 32), dtype=np.uint8)
    (raw_dir(broken) / "t10k-images-idx3-ubyte").write_bytes(synthetic.idx_bytes(images))
    with pytest.raises(data.DataError, match="32x32, MNIST digits are 28x28"):
        data.load(broken)


def test_broken_real_mnist_is_a_one_line_cli_error(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "train-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x03garbage")
    result = run_module("ray_jobs.train", "--dataset", "mnist", "--data-dir", str(tmp_path), timeout=120)
    assert_one_line_error(result, "train-images-idx3-ubyte")
    assert not (tmp_path / "synthetic").exists()


@pytest.fixture
def offline_mnist(monkeypatch):
    """torchvision's real download code, pointed at a closed local port: fails as it does offline."""
    monkeypatch.setattr(MNIST, "mirrors", ["http://127.0.0.1:9/"])


def test_mnist_absent_and_not_downloadable_names_the_fix(tmp_path, offline_mnist):
    with pytest.raises(data.DataError, match="could not be downloaded.*use --dataset synthetic"):
        data.resolve(TrainConfig(dataset="mnist", data_dir=str(tmp_path / "data")))
    assert list(tmp_path.iterdir()) == []  # no empty data/MNIST/raw left by the failed download


def test_generated_data_is_readable_as_the_umask_says(tmp_path):
    old = os.umask(0o027)
    try:
        root = data.write_synthetic(TrainConfig(dataset="synthetic", data_dir=str(tmp_path), synthetic_train_size=100,
                                                synthetic_test_size=20, batch_size=10))
    finally:
        os.umask(old)
    raw = root / "MNIST" / "raw"
    assert {stat.S_IMODE(p.stat().st_mode) for p in (root, root / "MNIST", raw)} == {0o750}
    assert {stat.S_IMODE(p.stat().st_mode) for p in raw.iterdir()} == {0o640}


def test_auto_falls_back_to_synthetic_and_says_so(tmp_path, offline_mnist, caplog):
    with caplog.at_level(logging.INFO):
        cfg = data.resolve(TrainConfig(dataset="auto", data_dir=str(tmp_path), synthetic_train_size=100,
                                       synthetic_test_size=20, batch_size=10))
    assert cfg.dataset == "synthetic"
    assert caplog.messages[0].startswith("dataset: synthetic digits (MNIST is not in")
    assert len(data.load(cfg).train) == 100


def test_auto_uses_real_mnist_files_when_present(broken, caplog):
    # MNIST-format files in <data-dir>/MNIST/raw are what torchvision's download leaves; auto takes them.
    shutil.copytree(raw_dir(broken), Path(broken.data_dir) / "MNIST" / "raw")
    with caplog.at_level(logging.INFO):
        cfg = data.resolve(replace(broken, dataset="auto"))
    assert cfg.dataset == "mnist" and caplog.messages[0].startswith("dataset: MNIST from")
    assert len(data.load(cfg).train) == broken.synthetic_train_size


def test_synthetic_digits_cut_short_leave_no_folder_behind(tmp_path, monkeypatch):
    """SIGTERM (or a full disk) while the digits are made: nothing of them stays, not even an empty synthetic/."""
    def interrupted(count, seed, chunk=256):
        raise KeyboardInterrupt

    monkeypatch.setattr(synthetic, "generate", interrupted)
    cfg = TrainConfig(dataset="synthetic", data_dir=str(tmp_path / "data"), synthetic_train_size=500,
                      synthetic_test_size=100)
    with pytest.raises(KeyboardInterrupt):
        data.write_synthetic(cfg)
    assert not (tmp_path / "data").exists()

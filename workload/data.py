"""The data every rank trains on: for the digits models, MNIST through the real torchvision loader (real digits when
present or downloadable, synthetic IDX otherwise); for the image models, synthetic images (workload/images.py)."""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import math
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass, replace
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from contract import models
from contract.config import TrainConfig
from contract.errors import DataError
from runtime import files, preflight
from runtime.preflight import DataPlan

if TYPE_CHECKING:  # torch is imported when data is loaded: resolve() and the CLIs that call it stay light
    import torch
    from torch import Tensor
    from torch.utils.data import TensorDataset

log = logging.getLogger(__name__)

# The per-pixel mean and std of the MNIST training set, used by the PyTorch MNIST examples.
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
SPLIT_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
IMAGES_MAGIC, LABELS_MAGIC = 0x0803, 0x0801


@dataclass(frozen=True, slots=True)
class Splits:
    """The two splits in memory, so that loading never dominates a step: digits normalised, synthetic images as their
    bytes on disk (uint8, memory-mapped and shared by the ranks of a machine), normalised a batch at a time by
    inputs()."""

    train: TensorDataset
    test: TensorDataset


def resolve(cfg: TrainConfig) -> TrainConfig:
    """Pick the dataset once, in the launcher, so every worker loads the same files: choose, check, then make.

    Returns the config with `dataset` set to `mnist` or `synthetic`; synthetic files exist on return.
    """
    plan = choose(cfg)
    preflight.check_data(cfg, plan)
    return make(cfg, plan)


def check_known(cfg: TrainConfig) -> None:
    """The data's checks where its size is known before the dataset is resolved (synthetic digits and images): for
    the commands and ranks that refuse before anything starts, the process group included."""
    if cfg.dataset == "synthetic" or takes_images(cfg):
        preflight.check_data(cfg, choose(cfg))


def choose(cfg: TrainConfig) -> DataPlan:
    """Which dataset, where, and how many training samples, decided without writing anything (a download of MNIST
    where --dataset auto or mnist asks for it and there is none)."""
    if takes_images(cfg):
        root = images_root(cfg)
        return DataPlan("synthetic", root, cfg.synthetic_train_size, make=not root.is_dir())
    if cfg.dataset in ("auto", "mnist"):
        problem = _ensure_mnist(Path(cfg.data_dir))
        if problem is None:
            mnist = replace(cfg, dataset="mnist")
            return DataPlan("mnist", mnist_root(mnist), train_count(mnist), make=False)
        if cfg.dataset == "mnist":
            raise DataError(
                f"MNIST is not in {Path(cfg.data_dir) / 'MNIST' / 'raw'} and could not be downloaded ({problem}); "
                "copy the files there or use --dataset synthetic"
            )
    root = mnist_root(replace(cfg, dataset="synthetic"))
    return DataPlan("synthetic", root, cfg.synthetic_train_size, make=not _digits_made(root / "MNIST" / "raw"))


def make(cfg: TrainConfig, plan: DataPlan) -> TrainConfig:
    """The files `plan` names, made where they are not there yet (and checked whole where they are)."""
    asked, cfg = cfg.dataset, replace(cfg, dataset=plan.dataset)
    if takes_images(cfg):
        log.info("dataset: synthetic %dx%d images of %d classes (%s)", cfg.image_size, cfg.image_size, cfg.num_classes,
                 cfg.model)
        write_images(cfg)
    elif plan.dataset == "mnist":
        log.info("dataset: MNIST from %s", plan.root)
    else:
        log.info("dataset: synthetic digits%s", "" if asked == "synthetic"
                 else f" (MNIST is not in {cfg.data_dir} and could not be downloaded)")
        write_synthetic(cfg)
    return cfg


def takes_images(cfg: TrainConfig) -> bool:
    return models.spec(cfg.model).inputs == models.IMAGES


def train_count(cfg: TrainConfig) -> int:
    """Training samples in a resolved dataset, from the IDX header (no need to read the images)."""
    if takes_images(cfg):
        return cfg.synthetic_train_size
    return _idx_dims(mnist_root(cfg) / "MNIST" / "raw" / SPLIT_FILES["train"][0], IMAGES_MAGIC)[0]


def images_root(cfg: TrainConfig) -> Path:
    """The synthetic images' folder: one per seed, size, classes and counts, shared by every run that asks the same."""
    name = (f"seed{cfg.seed}-{cfg.image_size}px-{cfg.num_classes}classes-train{cfg.synthetic_train_size}"
            f"-test{cfg.synthetic_test_size}")
    return Path(cfg.data_dir) / "synthetic-images" / name


def write_images(cfg: TrainConfig) -> Path:
    """Generate the synthetic images unless they already exist (and are whole); deterministic from the seed."""
    root = images_root(cfg)
    if root.is_dir():
        _check_images(cfg, root)
        return root
    from workload import images  # numpy: imported only when images are generated

    with _made_whole(root) as scratch:
        images.write(scratch, cfg.synthetic_train_size, cfg.synthetic_test_size, cfg.image_size, cfg.num_classes,
                     cfg.seed)
    return root


def _check_images(cfg: TrainConfig, root: Path) -> None:
    import numpy as np

    from workload import images

    for split, count in (("train", cfg.synthetic_train_size), ("test", cfg.synthetic_test_size)):
        why = ""
        try:
            pixels, labels = images.read(root, split)
            whole = (pixels.shape == (count, 3, cfg.image_size, cfg.image_size) and pixels.dtype == np.uint8
                     and labels.shape == (count,) and 0 <= int(labels.min()) and int(labels.max()) < cfg.num_classes)
        except (OSError, ValueError) as error:
            whole, why = False, f" ({' '.join(str(error).split())[:100]})"
        if not whole:
            raise DataError(f"{root}: its {split} files are not the images this setting makes{why}; delete {root} "
                            "and they are made again")


@contextlib.contextmanager
def _made_whole(root: Path) -> Iterator[Path]:
    """A scratch folder beside `root`, renamed into place once the body has filled it: processes racing here never
    see half a dataset, and a run cut short (SIGTERM, a full disk) leaves no folder it made."""
    made = [p for p in (root.parent, *root.parent.parents) if not p.exists()]
    root.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".partial-", dir=root.parent))
    try:
        yield scratch
        for folder in (scratch, *(p for p in scratch.rglob("*") if p.is_dir())):
            files.normal_mode(folder)  # mkdtemp made it 0700; the files inside are already as the umask says
        try:
            os.rename(scratch, root)
        except OSError:
            if not root.exists():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if not root.exists():
            for folder in made:
                with contextlib.suppress(OSError):
                    folder.rmdir()


def mnist_root(cfg: TrainConfig) -> Path:
    """The `root` handed to torchvision's MNIST class; its files live in `<root>/MNIST/raw`."""
    if cfg.dataset == "synthetic":
        # Its own folder, so synthetic digits are never mistaken for real MNIST in data_dir.
        name = f"seed{cfg.seed}-train{cfg.synthetic_train_size}-test{cfg.synthetic_test_size}"
        return Path(cfg.data_dir) / "synthetic" / name
    return Path(cfg.data_dir)


def _digits_made(raw: Path) -> bool:
    return all((raw / name).exists() for pair in SPLIT_FILES.values() for name in pair)


def write_synthetic(cfg: TrainConfig) -> Path:
    """Generate the synthetic IDX files unless they already exist; deterministic from the seed."""
    root = mnist_root(replace(cfg, dataset="synthetic"))
    raw = root / "MNIST" / "raw"
    if _digits_made(raw):
        for split in SPLIT_FILES:  # made here earlier, then cut short or changed: refused now, not in the workers
            try:
                _validate_idx(raw, split)
            except DataError as problem:
                raise DataError(f"{problem}; delete {root} and it is made again") from None
        return root
    from workload import synthetic  # torch and numpy: imported only when digits are generated

    with _made_whole(root) as scratch:
        (scratch / "MNIST" / "raw").mkdir(parents=True)
        for split, seed_offset, count in (("train", 0, cfg.synthetic_train_size), ("test", 1, cfg.synthetic_test_size)):
            for name, array in zip(SPLIT_FILES[split], synthetic.generate(count, seed=cfg.seed * 2 + seed_offset)):
                synthetic.write_idx(scratch / "MNIST" / "raw" / name, array)  # the images', then the labels' file
    return root


def load(cfg: TrainConfig) -> Splits:
    """Load both splits of a resolved dataset through torchvision, as normalised tensors."""
    if cfg.dataset not in ("mnist", "synthetic"):
        raise ValueError("resolve() the dataset before loading it")
    if cfg.dataset == "synthetic" and (plan := choose(cfg)).make:  # another node than the launcher's: made here
        preflight.check_data(cfg, plan)
    if takes_images(cfg):
        return _image_splits(write_images(cfg))  # a no-op where the launcher already wrote them
    if cfg.dataset == "synthetic":
        write_synthetic(cfg)
    root = mnist_root(cfg)
    for split in SPLIT_FILES:
        validate_idx(root / "MNIST" / "raw", split)
    from torchvision.datasets import MNIST  # here, not at the top: importing torchvision costs every CLI ~2 s

    return Splits(train=_tensors(MNIST(str(root), train=True)), test=_tensors(MNIST(str(root), train=False)))


def _image_splits(root: Path) -> Splits:
    import torch
    from torch.utils.data import TensorDataset

    from workload import images

    def split(name: str) -> TensorDataset:
        pixels, labels = images.read(root, name)
        return TensorDataset(torch.from_numpy(pixels), torch.from_numpy(labels.copy()))

    return Splits(train=split("train"), test=split("test"))


def inputs(batch: Tensor) -> Tensor:
    """A batch as the model takes it: synthetic images arrive as their uint8 bytes and are normalised here, on the
    batch's own device, through a table of the 256 values computed on the CPU as the whole set once was (so every
    value is bit for bit what it was, where a GPU's division would round differently); digits arrive normalised."""
    import torch

    if batch.dtype != torch.uint8:
        return batch
    return _table(batch.device)[batch.int()]


@functools.cache
def _table(device: torch.device) -> Tensor:
    import torch

    from workload import images

    return ((torch.arange(256, dtype=torch.uint8).float() / 255 - images.MEAN) / images.STD).to(device)


def _tensors(dataset) -> TensorDataset:
    from torch.utils.data import TensorDataset

    images = (dataset.data.unsqueeze(1).float() / 255 - MNIST_MEAN) / MNIST_STD
    return TensorDataset(images, dataset.targets.long())


def _ensure_mnist(data_dir: Path) -> str | None:
    """None when real MNIST is (now) in data_dir, else why not."""
    try:
        for split in SPLIT_FILES:
            validate_idx(data_dir / "MNIST" / "raw", split)
        return None
    except DataError:
        if any((data_dir / "MNIST" / "raw" / name).exists() for pair in SPLIT_FILES.values() for name in pair):
            raise  # Files are there but broken: say so rather than silently train on something else.
        reason = "no MNIST files there"
    created = [d for d in (data_dir, data_dir / "MNIST", data_dir / "MNIST" / "raw") if not d.exists()]
    try:
        # torchvision prints its download attempts; they are noise when offline.
        from torchvision.datasets import MNIST

        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            MNIST(str(data_dir), train=True, download=True)
        return None
    except (RuntimeError, OSError) as error:
        # A failed download leaves empty folders that nobody asked for; remove the ones it made.
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()
        return f"{reason}; download failed: {str(error).splitlines()[0]}"


def validate_idx(raw: Path, split: str) -> None:
    """Check one split's IDX files as torchvision will read them; raise DataError naming the first problem."""
    try:
        _validate_idx(raw, split)
    except DataError as problem:
        raise DataError(f"{problem}; put the original uncompressed MNIST files in {raw}, "
                        "or use --dataset synthetic") from None


def _validate_idx(raw: Path, split: str) -> None:
    images_path, labels_path = (raw / name for name in SPLIT_FILES[split])
    image_dims = _idx_dims(images_path, IMAGES_MAGIC)
    label_dims = _idx_dims(labels_path, LABELS_MAGIC)
    if image_dims[1:] != (28, 28):
        raise DataError(f"{images_path}: images are {image_dims[1]}x{image_dims[2]}, MNIST digits are 28x28")
    if image_dims[0] != label_dims[0]:
        raise DataError(f"{raw}: {image_dims[0]} {split} images but {label_dims[0]} labels")
    labels = labels_path.read_bytes()[8:]
    if labels and max(labels) > 9:
        raise DataError(f"{labels_path}: label {max(labels)} is not a digit 0-9, the file is corrupt")


def _idx_dims(path: Path, magic: int) -> tuple[int, ...]:
    if not path.exists():
        raise DataError(f"missing {path}")
    if not path.is_file():
        raise DataError(f"{path} is not a file")
    with path.open("rb") as f:
        header = f.read(4)
        if len(header) < 4 or struct.unpack(">I", header)[0] != magic:
            raise DataError(f"{path}: not an MNIST IDX file of {'images' if magic == IMAGES_MAGIC else 'labels'}")
        ndim = magic & 0xFF
        raw_dims = f.read(4 * ndim)
    if len(raw_dims) < 4 * ndim:
        raise DataError(f"{path}: truncated header")
    dims = struct.unpack(f">{ndim}I", raw_dims)
    expected = 4 + 4 * ndim + math.prod(dims)
    actual = path.stat().st_size
    if actual != expected:
        what = "truncated" if actual < expected else "corrupt"
        raise DataError(f"{path}: {what}, {actual} bytes where its header promises {expected}")
    return dims

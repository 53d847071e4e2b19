"""Synthetic colour images for the image models: a class is a smooth pattern of its own, each sample that pattern
shifted, rescaled and noisy, so that a network learns it within an epoch or two yet every sample differs.

Everything is deterministic from the seed; the files are written once per setting (uint8 .npy arrays in a folder
named after seed, size, classes and counts) and shared by every run and every rank.
"""

import functools
from pathlib import Path

import numpy as np

WAVES = 4
"""Sinusoids per class and channel: a low-frequency pattern that survives the shifts and the noise."""
NOISE = 0.4
"""Per-pixel noise, in the pattern's units (0-1): enough that the loss takes an epoch or two to fall."""
MEAN, STD = 0.5, 0.25
TEMPLATE_STREAM = 7  # the classes' patterns draw from a stream of their own, apart from the splits' (1 and 2)
"""Every pixel is scaled to [0, 1], then normalised with these, as an ImageNet loader would with its own."""
FILES = {"train": ("train-images.npy", "train-labels.npy"), "test": ("test-images.npy", "test-labels.npy")}


@functools.lru_cache(maxsize=64)
def template(seed: int, size: int, label: int) -> np.ndarray:
    """[3, size, size] in [0, 1]: class `label`'s pattern, a sum of a few random waves of 0.5-3 cycles across the image,
    from a generator of its own (so that any number of classes costs no more memory than a few of them)."""
    rng = np.random.default_rng([seed, TEMPLATE_STREAM, label])
    grid = np.arange(size, dtype=np.float32) / size
    freq = rng.uniform(0.5, 3.0, (3, WAVES, 2)).astype(np.float32)
    phase = rng.uniform(0, 2 * np.pi, (3, WAVES)).astype(np.float32)
    weight = rng.uniform(0.5, 1.0, (3, WAVES)).astype(np.float32)
    pattern = np.zeros((3, size, size), dtype=np.float32)
    for wave in range(WAVES):
        angle = (2 * np.pi * (freq[:, wave, 0, None, None] * grid[:, None] + freq[:, wave, 1, None, None] * grid)
                 + phase[:, wave, None, None])
        pattern += weight[:, wave, None, None] * np.sin(angle)
    low, high = pattern.min((-2, -1), keepdims=True), pattern.max((-2, -1), keepdims=True)
    return (pattern - low) / np.maximum(high - low, 1e-9)


def generate(count: int, size: int, classes: int, seed: int, split: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`count` images (uint8 [count, 3, size, size]) and labels (int64 [count]), balanced over the classes: the
    classes' patterns from `seed`, the samples from `seed` and `split` (0: train, 1: test)."""
    rng = np.random.default_rng([seed, split + 1])
    labels = rng.permutation(np.arange(count) % classes).astype(np.int64)
    images = np.empty((count, 3, size, size), dtype=np.uint8)
    reach = max(1, size // 4)
    for i, label in enumerate(labels):
        dy, dx = rng.integers(-reach, reach + 1, 2)
        image = np.roll(template(seed, size, int(label)), (int(dy), int(dx)), axis=(-2, -1))
        image = image * rng.uniform(0.7, 1.1) + rng.uniform(-0.2, 0.2) + rng.normal(0, NOISE, image.shape)
        images[i] = (np.clip(image, 0, 1) * 255).astype(np.uint8)
    return images, labels


def write(folder: Path, train: int, test: int, size: int, classes: int, seed: int) -> None:
    """Both splits' files into `folder` (which exists and is empty)."""
    for split, index, count in (("train", 0, train), ("test", 1, test)):
        for name, array in zip(FILES[split], generate(count, size, classes, seed, index)):  # images, then labels
            np.save(folder / name, array)


def read(folder: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """One split's arrays, memory-mapped copy-on-write: torch takes them as they are, nothing writes them, so the
    ranks of a machine share the file's pages."""
    images, labels = (np.load(folder / name, mmap_mode="c") for name in FILES[split])
    return images, labels

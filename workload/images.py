"""Synthetic colour images for the image models: a class is a smooth pattern of its own, each sample that pattern
shifted, rescaled and noisy, so that a network learns it within an epoch or two yet every sample differs.

Everything is deterministic from the seed; the files are written once per setting (uint8 .npy arrays in a folder
named after seed, size, classes and counts) and shared by every run and every rank.
"""

from pathlib import Path

import numpy as np

WAVES = 4
"""Sinusoids per class and channel: a low-frequency pattern that survives the shifts and the noise."""
NOISE = 0.4
"""Per-pixel noise, in the pattern's units (0-1): enough that the loss takes an epoch or two to fall."""
MEAN, STD = 0.5, 0.25
"""Every pixel is scaled to [0, 1], then normalised with these, as an ImageNet loader would with its own."""
FILES = {"train": ("train-images.npy", "train-labels.npy"), "test": ("test-images.npy", "test-labels.npy")}


def templates(classes: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """[classes, 3, size, size] in [0, 1]: each a sum of a few random waves of 0.5-3 cycles across the image."""
    grid = np.arange(size) / size
    freq = rng.uniform(0.5, 3.0, (classes, 3, WAVES, 2))
    phase = rng.uniform(0, 2 * np.pi, (classes, 3, WAVES))
    weight = rng.uniform(0.5, 1.0, (classes, 3, WAVES))
    angle = (2 * np.pi * (freq[..., 0, None, None] * grid[:, None] + freq[..., 1, None, None] * grid[None, :])
             + phase[..., None, None])
    pattern = (weight[..., None, None] * np.sin(angle)).sum(2)
    low, high = pattern.min((-2, -1), keepdims=True), pattern.max((-2, -1), keepdims=True)
    return (pattern - low) / np.maximum(high - low, 1e-9)


def generate(count: int, size: int, classes: int, seed: int, split: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`count` images (uint8 [count, 3, size, size]) and labels (int64 [count]), balanced over the classes: the
    classes' patterns from `seed`, the samples from `seed` and `split` (0: train, 1: test)."""
    patterns = templates(classes, size, np.random.default_rng(seed))
    rng = np.random.default_rng([seed, split + 1])
    labels = rng.permutation(np.arange(count) % classes).astype(np.int64)
    images = np.empty((count, 3, size, size), dtype=np.uint8)
    reach = max(1, size // 4)
    for i, label in enumerate(labels):
        dy, dx = rng.integers(-reach, reach + 1, 2)
        image = np.roll(patterns[label], (int(dy), int(dx)), axis=(-2, -1))
        image = image * rng.uniform(0.7, 1.1) + rng.uniform(-0.2, 0.2) + rng.normal(0, NOISE, image.shape)
        images[i] = (np.clip(image, 0, 1) * 255).astype(np.uint8)
    return images, labels


def write(folder: Path, train: int, test: int, size: int, classes: int, seed: int) -> None:
    """Both splits' files into `folder` (which exists and is empty)."""
    for split, index, count in (("train", 0, train), ("test", 1, test)):
        images, labels = generate(count, size, classes, seed, index)
        np.save(folder / FILES[split][0], images)
        np.save(folder / FILES[split][1], labels)


def read(folder: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """One split's arrays, memory-mapped (the caller copies them into tensors once)."""
    images, labels = (np.load(folder / name, mmap_mode="r") for name in FILES[split])
    return images, labels

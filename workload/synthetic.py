"""Learnable synthetic handwritten digits, written as MNIST IDX files so the real torchvision loader reads them.

Each digit is a few pen strokes (lines and arcs in a unit box). Every sample gets its own random affine warp
(shift, scale, rotation, shear), pen width, stroke jitter and background noise, so the classes overlap the way
handwriting does but remain learnable. Everything is deterministic from the seed.
"""

import gzip
import math
import struct
from pathlib import Path

import numpy as np
import torch

IMAGE_SIZE = 28


def _line(x0: float, y0: float, x1: float, y1: float) -> list[tuple[float, float]]:
    return [(x0 + (x1 - x0) * t, y0 + (y1 - y0) * t) for t in np.linspace(0, 1, 12)]


def _arc(cx: float, cy: float, rx: float, ry: float, start_deg: float, end_deg: float) -> list[tuple[float, float]]:
    # Angles are clockwise from 3 o'clock because y grows downwards in an image.
    angles = np.radians(np.linspace(start_deg, end_deg, 24))
    return [(cx + rx * math.cos(a), cy + ry * math.sin(a)) for a in angles]


# Strokes of the ten digits in a box x, y in [0, 1], y pointing down.
STROKES: dict[int, list[list[tuple[float, float]]]] = {
    0: [_arc(0.5, 0.5, 0.3, 0.42, 0, 360)],
    1: [_line(0.52, 0.08, 0.52, 0.92), _line(0.52, 0.08, 0.36, 0.26)],
    2: [_arc(0.5, 0.3, 0.28, 0.22, 190, 390), _line(0.76, 0.38, 0.22, 0.9), _line(0.22, 0.9, 0.8, 0.9)],
    3: [_arc(0.48, 0.29, 0.26, 0.21, 200, 450), _arc(0.48, 0.7, 0.3, 0.21, 270, 520)],
    4: [_line(0.62, 0.08, 0.18, 0.64), _line(0.18, 0.64, 0.84, 0.64), _line(0.64, 0.3, 0.64, 0.92)],
    5: [_line(0.76, 0.1, 0.3, 0.1), _line(0.3, 0.1, 0.26, 0.46), _arc(0.48, 0.66, 0.3, 0.25, 225, 500)],
    6: [_arc(0.62, 0.48, 0.36, 0.42, 235, 150), _arc(0.5, 0.68, 0.25, 0.22, 0, 360)],
    7: [_line(0.2, 0.1, 0.82, 0.1), _line(0.82, 0.1, 0.4, 0.92)],
    8: [_arc(0.5, 0.28, 0.22, 0.19, 0, 360), _arc(0.5, 0.7, 0.27, 0.22, 0, 360)],
    9: [_arc(0.5, 0.32, 0.25, 0.22, 0, 360), _line(0.75, 0.32, 0.66, 0.92)],
}


def _templates() -> np.ndarray:
    """[10, P, 2] pen paths, shorter ones padded with their last point (which leaves distances unchanged)."""
    paths = [np.array([p for stroke in STROKES[d] for p in stroke], dtype=np.float64) for d in range(10)]
    longest = max(len(path) for path in paths)
    return np.stack([np.concatenate([path, np.repeat(path[-1:], longest - len(path), 0)]) for path in paths])


def generate(count: int, seed: int, chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """`count` digits as (uint8 images [count, 28, 28], uint8 labels [count]), balanced over the ten classes."""
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(count) % 10).astype(np.uint8)
    images = np.empty((count, IMAGE_SIZE * IMAGE_SIZE), dtype=np.uint8)
    grid = np.stack(np.meshgrid(np.arange(IMAGE_SIZE), np.arange(IMAGE_SIZE), indexing="xy"), -1)
    grid = torch.from_numpy(grid.reshape(1, -1, 2).astype(np.float64))  # [1, 784, (x, y)]
    templates = _templates() - 0.5
    for start in range(0, count, chunk):
        n = min(chunk, count - start)
        points = templates[labels[start : start + n]]  # [n, P, 2]
        points = points + rng.normal(0, 0.025, points.shape)  # a shaky hand
        angle, shear = rng.normal(0, 0.15, n), rng.normal(0, 0.15, n)
        cos, sin = np.cos(angle), np.sin(angle)
        # rotation @ shear, then an anisotropic scale: [n, 2, 2]
        warp = np.stack([np.stack([cos, cos * shear - sin], -1), np.stack([sin, sin * shear + cos], -1)], -2)
        warp = warp * (rng.uniform(16, 21, n)[:, None, None] * np.stack([rng.uniform(0.8, 1.15, n), np.ones(n)], -1)[:, None, :])
        centre = 13.5 + rng.uniform(-2.5, 2.5, (n, 1, 2))
        pixels = np.einsum("npk,njk->npj", points, warp) + centre  # [n, P, 2]
        width = rng.uniform(0.9, 1.7, (n, 1))
        # [n, 784]: squared distance from each pixel to the pen path
        distance2 = torch.cdist(grid, torch.from_numpy(pixels)).amin(-1).numpy() ** 2
        ink = np.exp(-distance2 / (2 * width**2)) * rng.uniform(0.75, 1.0, (n, 1))
        ink = ink + np.abs(rng.normal(0, 0.06, ink.shape))
        images[start : start + n] = (np.clip(ink, 0, 1) * 255).astype(np.uint8)
    return images.reshape(count, IMAGE_SIZE, IMAGE_SIZE), labels


def idx_bytes(array: np.ndarray) -> bytes:
    """The IDX (SN3 "Pascal Vincent") encoding of a uint8 array: magic 0x08 type, dims, big-endian sizes."""
    header = struct.pack(">I", 0x0800 | array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def write_idx(path: Path, array: np.ndarray) -> None:
    """Write `path` and `path.gz`, the two files torchvision's own download leaves in MNIST/raw."""
    data = idx_bytes(array)
    path.write_bytes(data)
    # mtime=0 keeps the gzip bytes identical for identical data.
    with gzip.GzipFile(path.with_name(path.name + ".gz"), "wb", mtime=0) as f:
        f.write(data)

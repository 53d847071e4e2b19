"""A network of the user's own, as `--model tests.tiny_models:tiny` names it: a callable taking num_classes."""

from torch import nn


def tiny(num_classes: int) -> nn.Module:
    """A convolution with BatchNorm, then a linear layer, over 3 x 16 x 16 images: an image model quick to train."""
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(8 * 8 * 8, num_classes))


def not_a_module(num_classes: int) -> str:
    return "a network"


NOT_CALLABLE = 3

"""A network of the user's own, as `--model tests.tiny_models:tiny` names it: a callable taking num_classes."""

from torch import nn


def tiny(num_classes: int) -> nn.Module:
    """A convolution with BatchNorm, then a linear layer, over 3 x 16 x 16 images: an image model quick to train."""
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(8 * 8 * 8, num_classes))


def any_size(num_classes: int) -> nn.Module:
    """A convolution, then an average pooled to 4 x 4 before the linear layer: it takes images of any size."""
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                         nn.Linear(8 * 4 * 4, num_classes))


def not_a_module(num_classes: int) -> str:
    return "a network"


NOT_CALLABLE = 3


def seven_classes(num_classes: int) -> nn.Module:
    """Ignores num_classes: its last layer has 7 outputs."""
    return tiny(7)


class _Unused(nn.Module):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.used, self.spare = nn.Linear(3 * 16 * 16, num_classes), nn.Linear(4, 4)

    def forward(self, x):
        return self.used(x.flatten(1))


def unused_parameters(num_classes: int) -> nn.Module:
    """A layer that forward never calls: DDP refuses it unless find_unused_parameters=True."""
    return _Unused(num_classes)


def takes_nothing() -> nn.Module:
    return tiny(10)


def with_dropout(num_classes: int) -> nn.Module:
    """tiny with Dropout(0.5) before its last layer: every process draws its own masks."""
    layers = list(tiny(num_classes))
    return nn.Sequential(*layers[:-1], nn.Dropout(0.5), layers[-1])


class _Residual(nn.Module):
    """Two BatchNorm convolutions whose output is added to their input: a ResNet's basic block, small."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
                                  nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels))

    def forward(self, x):
        return (x + self.body(x)).relu()


def residual(num_classes: int) -> nn.Module:
    """A stem, two residual blocks with BatchNorm and a linear head over 3 x 16 x 16 images: a user's own ResNet."""
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), _Residual(8), nn.MaxPool2d(2),
                         _Residual(8), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, num_classes))

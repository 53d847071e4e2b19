"""The ConvNet of the classic DDP tutorials, and its size at a given width."""

from torch import Tensor, nn

FLOAT32_BYTES = 4


class ConvNet(nn.Module):
    """2 x [Conv5x5 -> BatchNorm -> ReLU -> MaxPool], 16 then 32 channels, Linear 1568 -> 10.

    `width` multiplies both channel counts (1: exactly the tutorial network). The second convolution's weights grow
    as width², the others as width, so the gradient grows towards width² as the width rises (2.9x at 2, 9.3x at 4).
    """

    def __init__(self, num_classes: int = 10, width: int = 1) -> None:
        super().__init__()
        c1, c2 = 16 * width, 32 * width
        self.layer1 = nn.Sequential(
            nn.Conv2d(1, c1, kernel_size=5, stride=1, padding=2),
            nn.BatchNorm2d(c1),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
        )
        self.layer2 = nn.Sequential(
            nn.Conv2d(c1, c2, kernel_size=5, stride=1, padding=2),
            nn.BatchNorm2d(c2),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
        )
        self.fc = nn.Linear(7 * 7 * c2, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        out = self.layer2(self.layer1(x))
        return self.fc(out.flatten(1))


def size(width: int) -> dict[str, int]:
    """Trainable parameters, and the float32 bytes of gradient one allreduce averages per step."""
    parameters = sum(p.numel() for p in ConvNet(width=width).parameters() if p.requires_grad)
    return {"width": width, "parameters": parameters, "gradient_bytes": FLOAT32_BYTES * parameters}

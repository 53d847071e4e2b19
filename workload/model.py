"""The ConvNet of the classic DDP tutorials."""

from torch import Tensor, nn


class ConvNet(nn.Module):
    """2 x [Conv5x5 -> BatchNorm -> ReLU -> MaxPool], 16 then 32 channels, Linear 1568 -> 10."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.layer1 = nn.Sequential(
            nn.Conv2d(1, 16, kernel_size=5, stride=1, padding=2),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
        )
        self.layer2 = nn.Sequential(
            nn.Conv2d(16, 32, kernel_size=5, stride=1, padding=2),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
        )
        self.fc = nn.Linear(7 * 7 * 32, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        out = self.layer2(self.layer1(x))
        return self.fc(out.flatten(1))

"""The networks by name (contract/models.py): the tutorials' ConvNet, Ray's release MLP, torchvision's ResNets and
ViT with weights=None (nothing downloaded), or a user's `module:factory`; each built the same way on every rank."""

import torch.distributed as dist
from torch import Tensor, nn

from contract import models
from contract.config import ConfigError, TrainConfig
from contract.options import DDP_DEFAULT_BUCKET_MB

FLOAT32_BYTES = 4


class ConvNet(nn.Module):
    """2 x [Conv5x5 -> BatchNorm -> ReLU -> MaxPool], 16 then 32 channels, Linear 1568 -> 10.

    `width` multiplies both channel counts (1: exactly the tutorial network). The second convolution's weights grow
    as width², the others as width, so the gradient grows towards width² as the width rises (2.9x at 2, 9.3x at 4).
    """

    def __init__(self, num_classes: int = 10, width: int = 1) -> None:
        super().__init__()
        c1, c2 = 16 * width, 32 * width
        self.layer1, self.layer2 = _conv_block(1, c1), _conv_block(c1, c2)  # built in this order: the same weights
        self.fc = nn.Linear(7 * 7 * c2, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        out = self.layer2(self.layer1(x))
        return self.fc(out.flatten(1))


def _conv_block(inputs: int, outputs: int) -> nn.Sequential:
    """One of the tutorial's two layers: Conv5x5 -> BatchNorm -> ReLU -> MaxPool."""
    return nn.Sequential(nn.Conv2d(inputs, outputs, kernel_size=5, stride=1, padding=2), nn.BatchNorm2d(outputs),
                         nn.ReLU(), nn.MaxPool2d(kernel_size=2, stride=2))


class MLP(nn.Module):
    """784-512-512-10 with ReLUs, Ray Train's release benchmark's network (which also puts a ReLU on the logits; this
    one does not, as cross-entropy expects)."""

    def __init__(self, num_classes: int = models.DIGIT_CLASSES) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                                    nn.Linear(512, num_classes))

    def forward(self, x: Tensor) -> Tensor:
        return self.layers(x)


def build(cfg: TrainConfig) -> nn.Module:
    """`cfg.model` as a fresh network; the caller seeds torch first, so that every rank builds the same weights."""
    if cfg.model == "convnet":
        return ConvNet(width=cfg.model_width)
    if cfg.model == "mlp":
        return MLP()
    if cfg.model in models.MODELS:
        from torchvision import models as zoo  # here: torchvision costs every process ~2 s to import

        extra = {"image_size": cfg.image_size} if cfg.model == "vit_b_16" else {}
        return getattr(zoo, cfg.model)(weights=None, num_classes=cfg.num_classes, **extra)
    try:
        return models.network_of(cfg.model, cfg.num_classes)
    except ValueError as error:
        raise ConfigError(str(error)) from None


def describe(network: nn.Module, cfg: TrainConfig) -> dict[str, object]:
    """results.json's `model`: the name, trainable parameters, float32 gradient bytes per step, and input size."""
    count = sum(p.numel() for p in network.parameters() if p.requires_grad)
    digits = models.spec(cfg.model).inputs == models.DIGITS
    dropout = any(isinstance(m, DROPOUTS) and m.p > 0 for m in network.modules())
    batch_norm = any(isinstance(m, nn.modules.batchnorm._NormBase) and m.track_running_stats for m in network.modules())
    return {"name": cfg.model, "parameters": count,
            "gradient_bytes": sum(p.numel() * p.element_size() for p in network.parameters() if p.requires_grad),
            "image_size": 28 if digits else cfg.image_size, "channels": 1 if digits else 3,
            **({"width": cfg.model_width} if cfg.model == "convnet" else {}), **({"dropout": True} if dropout else {}),
            **({"batch_norm": True} if batch_norm else {})}


DROPOUTS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
"""Layers that draw a random mask in training: each process draws its own (describe's `dropout`)."""


def ddp_buckets(width: int | str, bucket_mb: float = 0.0) -> tuple[tuple[int, ...], int]:
    """The bytes in each of DDP's buckets of the ConvNet at `width` (or of a registry model by name), cut as DDP cuts
    them after its first step (in backward's order; with the default cap the first bucket holds 1 MiB), and the
    bytes of BatchNorm buffers it broadcasts before each forward."""
    net = ConvNet(width=width) if isinstance(width, int) else build(TrainConfig(model=width))
    params = list(reversed([p.detach() for p in net.parameters()]))
    cap = int((bucket_mb or DDP_DEFAULT_BUCKET_MB) * 1024 * 1024)
    first = cap if bucket_mb else dist._DEFAULT_FIRST_BUCKET_BYTES  # DDP's BucketCapacityConfig
    buckets, _ = dist._compute_bucket_assignment_by_size(params, [first, cap])
    sizes = tuple(sum(params[i].numel() * params[i].element_size() for i in bucket) for bucket in buckets)
    return sizes, sum(b.numel() * b.element_size() for b in net.buffers())

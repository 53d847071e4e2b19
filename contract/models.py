"""The networks a run can train, by name, without torch: what each takes as input, its defaults, and its size.

A name is one of `MODELS`, or `package.module:factory` for a network of the user's own: a callable taking
`num_classes` and returning an `nn.Module` for 3 × image_size² inputs (workload/model.py builds every one).
"""

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass

DIGITS, IMAGES = "digits", "images"
DIGIT_CLASSES = 10
VIT_PATCH = 16


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    inputs: str
    """`digits`: 1 × 28 × 28, MNIST or synthetic digits; `images`: 3 × image_size², synthetic images."""
    batch_size: int
    """Per worker: the tutorials' 100 for the digits, Horovod's synthetic benchmark's 32 for the images."""
    train_size: int
    """Training samples generated when the data is synthetic: an epoch of a few seconds to a minute here."""
    test_size: int
    what: str


MODELS = {spec.name: spec for spec in (
    ModelSpec("convnet", DIGITS, 100, 10_000, 2_000, "the DDP tutorials' ConvNet (--model-width scales it)"),
    ModelSpec("mlp", DIGITS, 100, 10_000, 2_000, "784-512-512-10, the MLP of Ray Train's release benchmark"),
    ModelSpec("resnet18", IMAGES, 32, 2_560, 512, "torchvision resnet18, weights=None"),
    ModelSpec("resnet50", IMAGES, 32, 1_920, 384, "torchvision resnet50, weights=None"),
    ModelSpec("vit_b_16", IMAGES, 32, 1_024, 256, "torchvision vit_b_16(image_size=--image-size), weights=None"),
)}
FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def spec(name: str) -> ModelSpec:
    """The registry's record, or that of a user's `module:factory` (an image model with resnet18's defaults)."""
    if name in MODELS:
        return MODELS[name]
    if FACTORY.match(name):
        return ModelSpec(name, IMAGES, 32, 2_560, 512, f"{name}(num_classes=--num-classes)")
    raise ValueError(f"--model must be one of {', '.join(MODELS)}, or package.module:factory for your own network; "
                     f"got {name!r}")


def is_factory(name: str) -> bool:
    return name not in MODELS and bool(FACTORY.match(name))


def parameters(name: str, *, width: int = 1, num_classes: int = DIGIT_CLASSES, image_size: int = 32) -> int | None:
    """Trainable parameters of a registry model, counted without building it (tests/test_model.py checks each
    against torch); None for a user's factory, known only once built."""
    if name == "convnet":
        c1, c2 = 16 * width, 32 * width
        return (25 * c1 + c1 + 2 * c1) + (25 * c1 * c2 + c2 + 2 * c2) + (49 * c2 * DIGIT_CLASSES + DIGIT_CLASSES)
    if name == "mlp":
        return (784 * 512 + 512) + (512 * 512 + 512) + (512 * DIGIT_CLASSES + DIGIT_CLASSES)
    head = {"resnet18": 512, "resnet50": 2048, "vit_b_16": 768}.get(name)
    if head is None:
        return None
    body = {"resnet18": 11_176_512, "resnet50": 23_508_032, "vit_b_16": 85_647_360}[name]
    tokens = 1 + (image_size // VIT_PATCH) ** 2 if name == "vit_b_16" else 0
    return body + (head + 1) * num_classes + 768 * tokens


def gradient_bytes(name: str, **kwargs: int) -> int | None:
    """The float32 bytes one allreduce averages per step."""
    count = parameters(name, **kwargs)
    return None if count is None else 4 * count


def factory(name: str) -> Callable:
    """The callable a `package.module:factory` names, or a ValueError saying why it does not resolve."""
    module_name, attribute = name.split(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - whatever the user's module raises while importing
        raise ValueError(f"--model {name}: cannot import {module_name} ({type(error).__name__}: "
                         f"{' '.join(str(error).split())[:160]}); make it importable here and on every worker "
                         "(install it, or put its folder on PYTHONPATH)") from None
    found = getattr(module, attribute, None)
    if not callable(found):
        raise ValueError(f"--model {name}: {module_name} has no callable {attribute!r}")
    return found


def check_network(name: str, num_classes: int, image_size: int) -> None:
    """A user's factory called once on torch's meta device (no memory, no weights, no data), a batch of 2 images
    through it and back: it must take num_classes, return an nn.Module whose output is 2 × num_classes logits, and
    give every trainable parameter a gradient, as DDP requires; a ValueError naming the fix otherwise."""
    import torch

    with torch.device("meta"):
        network = network_of(name, num_classes)
    try:
        with torch.device("meta"):
            out = network(torch.zeros(2, 3, image_size, image_size))
        out.float().sum().backward()
    except Exception as error:  # noqa: BLE001 - whatever the user's forward raises
        raise ValueError(f"--model {name}: a batch of 3x{image_size}x{image_size} images through it raised "
                         f"{_said(error)}; check --image-size") from None
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (2, num_classes):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"--model {name}: its output for 2 images is {shape}, and --num-classes {num_classes} needs "
                         f"(2, {num_classes}): pass --num-classes to match its last layer, or size that layer by "
                         "num_classes")
    unused = [n for n, p in network.named_parameters() if p.requires_grad and p.grad is None]
    if unused:
        shown = ", ".join(unused[:3]) + (", …" if len(unused) > 3 else "")
        raise ValueError(f"--model {name}: {len(unused)} trainable parameter(s) get no gradient ({shown}), and DDP "
                         "refuses a network whose forward leaves parameters unused (find_unused_parameters is off, as "
                         "in the tutorials): use them in forward, or set requires_grad=False on them")


def network_of(name: str, num_classes: int):
    """The nn.Module a user's `module:factory` returns for `num_classes`, or a ValueError saying what it did instead
    (on the device torch's context sets: the meta device for check_network, a rank's for workload/model.py)."""
    import torch

    try:
        network = factory(name)(num_classes=num_classes)
    except ValueError:
        raise
    except Exception as error:  # noqa: BLE001 - whatever the user's factory raises
        raise ValueError(f"--model {name}: calling it with num_classes={num_classes} raised {_said(error)}; it must "
                         "take num_classes and return a torch.nn.Module") from None
    if not isinstance(network, torch.nn.Module):
        raise ValueError(f"--model {name} returned {type(network).__name__}, not a torch.nn.Module")
    return network


def _said(error: BaseException) -> str:
    return f"{type(error).__name__}: {' '.join(str(error).split())[:160]}"

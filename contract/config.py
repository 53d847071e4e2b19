"""The one typed configuration shared by every backend and launcher."""

import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from contract import models

BACKENDS = ("native", "horovod")
"""The two distributed backends this project compares."""
OWN_LAUNCHERS = {"native": ("torchrun", "mp.spawn"), "horovod": ("horovodrun",)}
"""The launchers each backend ships with, the baselines Ray is measured against: native DDP's torchrun and the
tutorials' torch.multiprocessing.spawn (native_ddp/spawn.py), Horovod's horovodrun."""
LAUNCHERS = ("ray", "torchrun", "mp.spawn", "horovodrun")
"""Every launcher an arm can run under: Ray (Ray Train, RayExecutor), and each backend's own."""
CEILING = "ceiling"
"""The ceiling arm's label: a backend's ranks under a launcher with no gradient averaging (--no-averaging); under a
backend's own launcher, `ceiling/<launcher>`."""
AA_SUFFIX = "-aa"
"""An A/A twin's label: the same arm run again under a name of its own, interleaved beside it, so that the paired
ratio of an arm with itself measures the noise floor (`compare --aa`)."""
DATASETS = ("auto", "mnist", "synthetic")
COMPRESSIONS = ("none", "fp16", "bf16")
AMP = ("none", "bf16", "fp16")
AFFINITIES = ("share", "none")
PLACEMENTS = ("PACK", "SPREAD", "STRICT_PACK")
FLOAT32_MAX = 3.4028234663852886e38
MAX_MODEL_WIDTH = 64
MAX_SEED = 2**32 - 1
MIN_IMAGE_SIZE, MAX_IMAGE_SIZE = 16, 512
MAX_CLASSES = 100_000
UPPER_BOUNDS = {"epochs": 10_000, "batch_size": 65_536, "workers": 4096, "grad_accumulation": 4096,
                "threads_per_worker": 1024, "bucket_mb": 4096.0, "cycle_time_ms": 1000.0, "stall_timeout_s": 86_400.0,
                "warmup_steps": 1_000_000, "max_steps_per_epoch": 100_000_000}
"""The largest value of each numeric flag a user could mean (a fusion buffer of 4 GiB, a cycle of a second, a stall
bound of a day); beyond them a run would fail late (Horovod aborts allocating a 1e9 MiB fusion buffer) or hang."""


AVERAGING_ONLY = ("compression", "bucket_mb", "gradient_as_bucket_view", "static_graph", "cycle_time_ms", "autotune",
                  "fused_buffers")
"""Options that only shape how gradients are averaged: --no-averaging has none to shape."""


class ConfigError(ValueError):
    """A setting the user can fix; CLIs print it as one line and exit 2."""


@dataclass(kw_only=True, slots=True)
class TrainConfig:
    epochs: int = 1
    """Passes over the training set."""

    model: str = "convnet"
    """The network: convnet (the tutorials') or mlp on digits; resnet18, resnet50 or vit_b_16 (torchvision,
    weights=None) on synthetic images; or package.module:factory, your own (a callable taking num_classes)."""

    image_size: int = 32
    """The image models' inputs are 3 x image-size x image-size (vit_b_16: a multiple of 16)."""

    num_classes: int = 10
    """Classes of the image models' synthetic images."""

    batch_size: int | None = None
    """Samples per worker per optimizer step; unset: the model's (100 for convnet and mlp, the tutorials'; 32 for the
    image models, Horovod's synthetic benchmark's). The global batch is this times `workers`."""

    lr: float = 0.01
    """SGD learning rate, the same in every backend."""

    momentum: float = 0.9
    """SGD momentum."""

    scale_lr: bool = False
    """Multiply `lr` by the world size (the linear scaling rule); off unless asked for, in every backend alike."""

    seed: int = 0
    """Seeds the initial weights, the sampler's shuffle and the synthetic digits."""

    dataset: str = "auto"
    """`mnist` (torchvision, downloaded into `data_dir`), `synthetic` (generated IDX files) or `auto`."""

    data_dir: str = "./data"
    """Where torchvision looks for (and downloads) MNIST, and where synthetic digits are written."""

    synthetic_train_size: int | None = None
    """Training samples generated for synthetic data; unset: the model's (10000 digits; 2560 images for resnet18, 1920
    for resnet50, 1024 for vit_b_16)."""

    synthetic_test_size: int | None = None
    """Test samples generated for synthetic data; unset: the model's (2000 digits; a fifth of the images)."""

    workers: int = 1
    """Data-parallel workers (ranks)."""

    use_gpu: bool = False
    """One GPU per worker, NCCL between them; otherwise CPU and gloo."""

    output_dir: str = "./results/latest"
    """Where rank 0 writes `results.json` once the run has finished."""

    checkpoint_dir: str = ""
    """Launchers without their own checkpoint store (horovodrun, torchrun) save and resume here; empty: off."""

    model_width: int = 1
    """Multiplies convnet's channel counts (1: the tutorial network); the gradient grows towards width²."""

    compression: str = "none"
    """Gradients on the wire, in both backends: `none`, `fp16` or `bf16` (DDP: its compress hooks; Horovod: its
    fp16 compressor, and a bf16 one written on its Compressor interface)."""

    grad_accumulation: int = 1
    """Split each batch into this many micro-batches, one backward each, gradients averaged across ranks once, after
    the last (DDP: no_sync() on the others; Horovod: backward_passes_per_step)."""

    amp: str = "none"
    """Mixed precision for forward and loss, torch.autocast in every backend: `none`, `bf16`, or `fp16` (GPU only,
    with a GradScaler)."""

    bucket_mb: float = 0.0
    """DDP's bucket_cap_mb and Horovod's fusion threshold, set to the same size in MiB; 0: each framework's own
    default (DDP 25, Horovod 0.28.1 128)."""

    gradient_as_bucket_view: bool = False
    """DDP only: gradients are views into the allreduce buckets (saves a copy)."""

    static_graph: bool = False
    """DDP only: tell DDP the graph never changes between iterations."""

    cycle_time_ms: float = 0.0
    """Horovod only: the background thread's cycle time (HOROVOD_CYCLE_TIME); 0: Horovod's default (1 ms)."""

    autotune: bool = False
    """Horovod only: Horovod's Bayesian autotuner of fusion threshold and cycle time; its log lands beside the
    results."""

    fused_buffers: bool = False
    """Horovod only: record its fused buffers (which gradients each allreduce carried, when it ran) in the schedule
    of results.json, from Horovod's timeline, which slows every step (docs/options.md)."""

    no_averaging: bool = False
    """Each rank trains its own shard alone, with no gradient averaging (neither DDP nor hvd.DistributedOptimizer):
    the ceiling compare measures each backend's efficiency against; its ranks end with different models."""

    trace: bool = False
    """Write a Chrome trace per rank of a few steady-state steps (torch.profiler; Horovod also its timeline)."""

    warmup_steps: int = 5
    """Steps at the start of every epoch left out of the timing statistics; the default shrinks to half an epoch
    shorter than it (warmup_for), a value given otherwise is kept."""

    threads_per_worker: int = 1
    """torch intra-op threads per worker; Ray grants one CPU per worker, so every backend gets the same."""

    cpu_affinity: str = "none"
    """`share` (compare's default): the ranks on a machine split the cores it lets them use evenly, and every thread
    of a rank stays on its own share (one core each where there are as many cores as ranks); `none`: where the
    launcher and the scheduler put them."""

    placement_strategy: str = "PACK"
    """Where Ray places the workers of both Ray arms, one of Ray's placement strategies: PACK fills a node before the
    next, SPREAD spreads them evenly over the nodes, STRICT_PACK puts them all on one node. Ray Train takes it as
    ScalingConfig's placement_strategy; Horovod's RayExecutor as its own placement (docs/real-cluster.md). Recorded in
    results.json; torchrun, horovodrun and mp.spawn place ranks by their own flags and do not take it."""

    stall_timeout_s: float = 300.0
    """A rank that makes no progress (no step, no evaluation) for this long ends the run; 0: wait forever."""

    log_every: int = 20
    """Rank 0 logs a progress line every this many steps."""

    max_steps_per_epoch: int = 0
    """Stop each epoch after this many steps (0: the whole epoch); for quick checks."""

    def __post_init__(self) -> None:
        self._model_defaults()
        for f in fields(self):
            # NaN passes every comparison below (nan > 0 is False, but so is nan <= 0), and inf trains to NaN.
            if f.type in (float, "float") and not math.isfinite(getattr(self, f.name)):
                raise ConfigError(f"{flag(f.name)} must be a finite number, got {getattr(self, f.name)}")
        for name in ("epochs", "batch_size", "workers", "synthetic_train_size", "synthetic_test_size",
                     "grad_accumulation", "threads_per_worker", "log_every", "model_width", "image_size",
                     "num_classes"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{flag(name)} must be a positive integer, got {getattr(self, name)}")
        for name in ("warmup_steps", "max_steps_per_epoch", "stall_timeout_s", "bucket_mb", "cycle_time_ms"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{flag(name)} must be >= 0, got {getattr(self, name)}")
        for name, bound in UPPER_BOUNDS.items():
            if getattr(self, name) > bound:
                raise ConfigError(f"{flag(name)} must be at most {bound:g}, got {getattr(self, name):g}")
        for name in ("output_dir", "data_dir"):
            require_path(getattr(self, name), flag(name))
        if not self.lr > 0:
            raise ConfigError(f"--lr must be > 0, got {self.lr}")
        if self.lr > FLOAT32_MAX:
            # The weights are float32: the optimizer could not even multiply a gradient by it.
            raise ConfigError(f"--lr must be at most {FLOAT32_MAX:.4g} (the weights are float32), got {self.lr:g}")
        if not 0 <= self.seed <= MAX_SEED:
            raise ConfigError(f"--seed must be an integer from 0 to {MAX_SEED} (a 32-bit seed), got {self.seed}")
        if self.model_width > MAX_MODEL_WIDTH:
            # conv2 grows as width²: width 64 is already ~60 M parameters.
            raise ConfigError(f"--model-width must be at most {MAX_MODEL_WIDTH}, got {self.model_width}")
        if not 0 <= self.momentum < 1:
            raise ConfigError(f"--momentum must be in [0, 1), got {self.momentum}")
        for name, choices in (("dataset", DATASETS), ("compression", COMPRESSIONS), ("cpu_affinity", AFFINITIES),
                              ("placement_strategy", PLACEMENTS), ("amp", AMP)):
            if getattr(self, name) not in choices:
                what = " (Ray's placement strategies)" if choices is PLACEMENTS else ""
                raise ConfigError(f"{flag(name)} must be one of {', '.join(choices)}{what}, got "
                                  f"{getattr(self, name)!r}")
        if self.amp == "fp16" and not self.use_gpu:
            # fp16 autocast on CPU is barely supported, and its GradScaler exists to protect GPU fp16 kernels.
            raise ConfigError("--amp fp16 needs a GPU (--use-gpu) and a GradScaler; on CPU use --amp bf16")
        if self.batch_size % self.grad_accumulation:
            raise ConfigError(
                f"--batch-size {self.batch_size} must be divisible by --grad-accumulation {self.grad_accumulation}"
            )
        if self.no_averaging and (averaging := [n for n in AVERAGING_ONLY if getattr(self, n) != DEFAULTS[n]]):
            raise ConfigError(f"--no-averaging averages nothing, so {flag(averaging[0])} has nothing to act on; "
                              "drop one of them")
        self._check_model()

    def _model_defaults(self) -> None:
        """The batch and the synthetic sizes left unset take the model's own."""
        try:
            spec = models.spec(self.model)
        except ValueError as error:
            raise ConfigError(str(error)) from None
        for name, default in (("batch_size", spec.batch_size), ("synthetic_train_size", spec.train_size),
                              ("synthetic_test_size", spec.test_size)):
            if getattr(self, name) is None:
                setattr(self, name, default)

    def _check_model(self) -> None:
        spec = models.spec(self.model)
        if self.model != "convnet" and self.model_width != 1:
            raise ConfigError(f"--model-width scales convnet; {self.model} has its own size (drop --model-width)")
        if spec.inputs == models.DIGITS:
            if self.image_size != 32 or self.num_classes != models.DIGIT_CLASSES:
                raise ConfigError(f"{self.model} trains on 28x28 digits of 10 classes; --image-size and --num-classes "
                                  "are for the image models (resnet18, resnet50, vit_b_16, module:factory)")
            return
        if self.dataset == "mnist":
            raise ConfigError(f"{self.model} trains on synthetic 3x{self.image_size}x{self.image_size} images; MNIST "
                              "is for convnet and mlp (use --dataset auto or synthetic)")
        if not MIN_IMAGE_SIZE <= self.image_size <= MAX_IMAGE_SIZE:
            raise ConfigError(f"--image-size must be from {MIN_IMAGE_SIZE} to {MAX_IMAGE_SIZE}, got {self.image_size}")
        if self.model == "vit_b_16" and self.image_size % models.VIT_PATCH:
            raise ConfigError(f"vit_b_16 cuts images into {models.VIT_PATCH}x{models.VIT_PATCH} patches: --image-size "
                              f"must be a multiple of {models.VIT_PATCH}, got {self.image_size}")
        if not 2 <= self.num_classes <= MAX_CLASSES:
            raise ConfigError(f"--num-classes must be from 2 to {MAX_CLASSES}, got {self.num_classes}")
        if self.batch_size // self.grad_accumulation < 2:
            # BatchNorm's training statistics need two samples: a ResNet's last block sees 1x1 maps here.
            raise ConfigError(f"{self.model} needs micro-batches of at least 2 (BatchNorm's statistics): raise "
                              f"--batch-size {self.batch_size} or lower --grad-accumulation {self.grad_accumulation}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})

    def with_absolute_paths(self) -> "TrainConfig":
        """Workers may start in another directory (Ray jobs do), so paths are resolved where the user typed them."""
        values = self.to_dict()
        for name in ("data_dir", "output_dir", "checkpoint_dir"):
            if values[name]:
                values[name] = str(Path(values[name]).expanduser().resolve())
        return TrainConfig(**values)


DEFAULTS = {f.name: f.default for f in fields(TrainConfig)}


def warmup_for(warmup_steps: int, steps: int) -> int:
    """The warm-up of an epoch of `steps`: --warmup-steps, except that the default, where an epoch is no longer than
    it, is the epoch's first half (rounded down), so that a short epoch, as a user's `--synthetic-train-size 256` on
    2 ranks gives, still times its second half, as Horovod's and torch's benchmarks time what follows their warm-up."""
    return steps // 2 if warmup_steps == DEFAULTS["warmup_steps"] and steps <= warmup_steps else warmup_steps


def require_path(path: str, flag: str) -> None:
    """A folder flag must name one: an empty or blank path would write into the working directory."""
    if not str(path).strip():
        raise ConfigError(f"{flag} is empty; name a folder (an empty path would write into the working directory)")


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


# What a resumed run may change: where things go, how often it logs, its stall bound, and --epochs (upwards).
# Everything else decides the numbers, so a checkpoint resumes only under the settings that wrote it.
RESUMABLE_CHANGES = ("epochs", "data_dir", "output_dir", "checkpoint_dir", "stall_timeout_s", "log_every", "trace",
                     "cpu_affinity", "placement_strategy")


def resume_conflicts(saved: dict[str, Any], cfg: TrainConfig) -> list[str]:
    """The settings of `cfg` that differ from those a checkpoint was written with, as `--flag saved -> now`."""
    conflicts = []
    for f in fields(cfg):
        if f.name in RESUMABLE_CHANGES or f.name not in saved:
            continue
        now, then = getattr(cfg, f.name), saved[f.name]
        if f.name == "dataset" and "auto" in (now, then):
            continue  # auto is resolved to mnist or synthetic; the resolved names are compared once known
        if now != then:
            conflicts.append(f"{flag(f.name)} {then} -> {now}")
    return conflicts

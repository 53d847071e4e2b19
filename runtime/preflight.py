"""What every entry point refuses before any training, data generation or Ray start. Nothing here creates files."""

import math
import os
import socket
import zipfile
from dataclasses import dataclass
from pathlib import Path

from contract import framework_env, models
from contract.config import ConfigError, TrainConfig, require_path, warmup_for
from runtime import files, space

# Most filesystems cap one path component at 255 bytes; a longer run name would fail only when first written.
NAME_MAX = 255


def writable_dir(path: str | Path, flag: str) -> Path:
    """`path`, absolute, once it is known that it is (or can become) a writable folder. Creates nothing."""
    require_path(str(path), flag)
    resolved = Path(path).expanduser().resolve()
    for part in resolved.parts:
        if len(part.encode()) > NAME_MAX:
            raise ConfigError(f"{flag} {str(path)[:60]}…: a path component is {len(part.encode())} bytes, "
                              f"filesystems allow {NAME_MAX}; choose a shorter path")
    existing = _nearest_existing(resolved)
    if not existing.is_dir():
        if existing == resolved:
            raise ConfigError(f"{flag} {resolved} is a file, not a folder; choose another path")
        raise ConfigError(f"{flag} {resolved} cannot be a folder: {existing} is a file; choose another path")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {resolved} is not writable ({existing} is read-only); choose another path")
    return resolved


def _nearest_existing(path: Path) -> Path:
    return next(p for p in (path, *path.parents) if p.exists())  # the filesystem root always exists


def free_bytes(path: str | Path) -> int:
    """What the filesystem of `path` (or of its nearest existing folder) has free for this user."""
    stat = os.statvfs(_nearest_existing(Path(path).expanduser().resolve()))
    return stat.f_bavail * stat.f_frsize


def free_space(path: str | Path, flag: str, needed: int, what: str) -> None:
    """Refuse a folder whose filesystem has less than `needed` bytes free, rather than fill the disk midway (a
    write that still finds it full is one line too: runtime/space.py)."""
    resolved = Path(path).expanduser().resolve()
    if (free := free_bytes(resolved)) < needed:
        raise ConfigError(f"{flag} {resolved} has {space.size(free)} free; this run needs about {space.size(needed)} "
                          f"there ({what}); free some space or choose another folder")


def _pixels(cfg: TrainConfig) -> int:
    return 28 * 28 if _inputs(cfg) == models.DIGITS else 3 * cfg.image_size ** 2


def _inputs(cfg: TrainConfig) -> str:
    """What the model reads, models.DIGITS or models.IMAGES, and so what the refusals count: "digits" or "images"."""
    return models.spec(cfg.model).inputs


def synthetic_file_bytes(cfg: TrainConfig) -> int:
    """Synthetic samples on disk: a byte a pixel and the label, and for digits as much again for the .gz copy
    torchvision expects."""
    copies = 2 if _inputs(cfg) == models.DIGITS else 1
    return (cfg.synthetic_train_size + cfg.synthetic_test_size) * copies * (_pixels(cfg) + 8)


EVAL_BATCH = 1000
"""The test samples a rank scores at once (workload/trainer.py's evaluate)."""


def synthetic_memory(cfg: TrainConfig, available: int | None = None) -> None:
    """Synthetic samples too many for this machine's memory (`available`, default MemAvailable). Digits: each process
    holds them as float32 pixels and an int64 label. Images: the set as it is on disk, memory-mapped once and shared by
    the machine's ranks, and each rank a batch or an evaluation chunk at a time as uint8, float32 and the int32 index
    its conversion reads (workload/data.py's inputs); every rank counted here, as Ray's PACK may place them all."""
    samples = cfg.synthetic_train_size + cfg.synthetic_test_size
    if available is None:  # MemAvailable, in kB; 0 where it cannot be read (no check then)
        available = (files.proc_number("/proc/meminfo", "MemAvailable:") or 0) * 1024
    if _inputs(cfg) == models.DIGITS:
        needed = samples * (4 * _pixels(cfg) + 8)
        said = f"{samples:,} synthetic digits need about {space.size(needed)} of memory in each process that loads them"
    else:
        rank = max(cfg.batch_size, EVAL_BATCH) * (9 * _pixels(cfg) + 8)
        needed = synthetic_file_bytes(cfg) + cfg.workers * rank
        said = (f"{samples:,} synthetic images and {cfg.workers} rank(s) need about {space.size(needed)} of memory "
                f"on a machine that holds them all ({space.size(synthetic_file_bytes(cfg))} of images, memory-mapped "
                f"and shared, and {space.size(rank)} a rank for a batch or an evaluation chunk of {EVAL_BATCH})")
    if available and needed > available:
        fewer = "" if _inputs(cfg) == models.DIGITS else ", or start fewer ranks on this machine"
        raise ConfigError(f"{said}, and this machine has {space.size(available)} available; lower "
                          f"--synthetic-train-size or --synthetic-test-size{fewer}")


RANKS_PER_CORE = 2
"""The most ranks one host runs a core: beyond, every rank's start (torch's import), step and teardown queue for a
core, a start takes minutes and a SIGTERM's end too; within, a parity check past two workers runs on two cores."""


def check_cores(ranks: int) -> None:
    """Room on this host's cores for the `ranks` a launcher starts on it (torchrun, horovodrun, mp.spawn)."""
    if ranks > RANKS_PER_CORE * (cores := len(os.sched_getaffinity(0))):
        raise ConfigError(f"{ranks} ranks on this host would share its {cores} core(s), more than {RANKS_PER_CORE} "
                          "a core: too little for each to start, train or stop in time; start at most "
                          f"{RANKS_PER_CORE * cores} here, or run on a larger machine")


def check_name(name: str | None, flag: str = "--name") -> None:
    """A run name becomes one folder name under the storage path."""
    if name is None:
        return
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise ConfigError(f"{flag} {name!r} must be a plain folder name (no '/'); choose another name")
    if not name.isascii():
        raise ConfigError(f"{flag} {name!r} must be ASCII (Ray Train fails on other names); choose another name")
    if len(name.encode()) > NAME_MAX:
        raise ConfigError(f"{flag} is {len(name.encode())} bytes long; filesystems allow {NAME_MAX}; "
                          "choose a shorter name")


def steps_per_epoch(cfg: TrainConfig, train_count: int) -> int:
    """Steps each rank runs per epoch: DistributedSampler pads every shard to ceil(count / workers); the image models
    drop a short last batch (workload/trainer.py)."""
    shard = math.ceil(train_count / cfg.workers)
    full = _inputs(cfg) == models.IMAGES
    steps = shard // cfg.batch_size if full else math.ceil(shard / cfg.batch_size)
    return min(steps, cfg.max_steps_per_epoch) if cfg.max_steps_per_epoch else steps


MEASURED_STEPS = 20
"""The timed steps an epoch of the size a refusal proposes leaves after the warm-up."""


def check_epoch_length(cfg: TrainConfig, train_count: int) -> None:
    """Refuse an epoch too short to leave a step after the warm-up: there would be nothing honest to time. Where the
    data is synthetic, name the size that leaves MEASURED_STEPS at these workers."""
    steps = steps_per_epoch(cfg, train_count)
    warmup = warmup_for(cfg.warmup_steps, steps)
    if steps <= warmup or (cfg.warmup_steps and not warmup):  # nothing to time, or a first step timed as steady
        enough = cfg.batch_size * cfg.workers * (cfg.warmup_steps + MEASURED_STEPS)
        more = (f"pass --synthetic-train-size {enough} ({cfg.warmup_steps + MEASURED_STEPS} steps at --workers "
                f"{cfg.workers})" if cfg.dataset != "mnist" and not cfg.max_steps_per_epoch else
                f"train on more {_inputs(cfg)}")
        raise ConfigError(
            f"an epoch is {steps} step(s) ({train_count} training {_inputs(cfg)}, --workers {cfg.workers}, "
            f"--batch-size {cfg.batch_size}"
            f"{f', --max-steps-per-epoch {cfg.max_steps_per_epoch}' if cfg.max_steps_per_epoch else ''}"
            f"), which leaves no step after --warmup-steps {cfg.warmup_steps} to time; {more}, or lower "
            "--warmup-steps or --batch-size"
        )


def warmup_chosen(cfg: TrainConfig, train_count: int) -> str | None:
    """What the default warm-up became in an epoch shorter than it (warmup_for), in a line; None where it is kept."""
    steps = steps_per_epoch(cfg, train_count)
    if (warmup := warmup_for(cfg.warmup_steps, steps)) == cfg.warmup_steps:
        return None
    more = (f"; --synthetic-train-size {cfg.batch_size * cfg.workers * (cfg.warmup_steps + MEASURED_STEPS)} would "
            f"time {MEASURED_STEPS}" if cfg.dataset != "mnist" and not cfg.max_steps_per_epoch else "")
    return (f"an epoch is {steps} steps at --workers {cfg.workers}: its first {warmup} warm up (the default "
            f"--warmup-steps {cfg.warmup_steps} would leave none to time) and {steps - warmup} are timed{more}")


# Room for a run's results.json, TensorBoard scalars and ray.log, with a wide margin (docs/right-or-refused.md).
OUTPUT_BYTES = 2 << 20
# A checkpoint holds the weights and the momentum, and a new one is written beside the old before it replaces it; a
# margin of 1 MB, and 1 MB x width² for the convnet (its counted size is far below).
CHECKPOINT_BYTES_PER_WIDTH2 = 1 << 20


def checkpoint_bytes(cfg: TrainConfig) -> int:
    weights = models.gradient_bytes(cfg.model, width=cfg.model_width, num_classes=cfg.num_classes,
                                    image_size=cfg.image_size) or 0
    return max(CHECKPOINT_BYTES_PER_WIDTH2 * cfg.model_width ** 2, 2 * 2 * weights + (1 << 20))


CHECKPOINT = "checkpoint.pt"


def check_checkpoint_file(path: Path) -> None:
    """A checkpoint there must be a torch.save archive: anything else is refused without loading torch (seconds on a
    busy machine); workload/checkpoint.py reads one that is."""
    if path.exists() and not (path.is_file() and zipfile.is_zipfile(path)):
        raise ConfigError(f"{path} is not a readable checkpoint (not a torch.save archive); delete it or choose "
                          "another checkpoint folder")


def check_model(cfg: TrainConfig) -> None:
    """A user's `module:factory` resolves and builds a network that fits the run (contract/models.py's
    check_network, on torch's meta device), so that a typo, a wrong output size or an unused parameter is refused
    before anything starts, not as a worker's death minutes later."""
    if models.is_factory(cfg.model):
        try:
            models.check_network(cfg.model, cfg.num_classes, cfg.image_size)
        except ValueError as error:
            raise ConfigError(str(error)) from None


@dataclass(frozen=True, slots=True)
class DataPlan:
    """The data a run will train on, decided before anything is written (workload/data.py's choose): the checks
    read this record, and the files are made from it once they pass."""

    dataset: str
    """`mnist` or `synthetic`."""
    root: Path
    """The folder the files are in, or will be."""
    train_count: int
    """Training samples: the IDX header's for MNIST, --synthetic-train-size otherwise."""
    make: bool
    """Whether the files are still to be made (synthetic digits or images not there yet)."""


def check_data(cfg: TrainConfig, plan: DataPlan) -> None:
    """Everything about the data that could fail later, refused now: an epoch with no step to time, samples too many
    for memory, files that would not fit on the disk."""
    check_epoch_length(cfg, plan.train_count)
    if plan.dataset == "synthetic":
        synthetic_memory(cfg)
    if plan.make:
        free_space(plan.root.parent, "--data-dir", synthetic_file_bytes(cfg), f"the synthetic {_inputs(cfg)}")


def check_interface() -> None:
    """GLOO_SOCKET_IFNAME naming an interface this host lacks: gloo would fail in every rank as the group forms (a
    traceback under torchrun, a ControllerError under Ray)."""
    named = [name.strip() for name in os.environ.get("GLOO_SOCKET_IFNAME", "").split(",") if name.strip()]
    have = sorted(name for _, name in socket.if_nameindex())
    if missing := [name for name in named if name not in have]:
        raise ConfigError(f"GLOO_SOCKET_IFNAME={os.environ['GLOO_SOCKET_IFNAME']} names {', '.join(missing)}, which "
                          f"this host does not have (it has {', '.join(have)}); unset it or name one of those")


def check_config(cfg: TrainConfig, horovod: bool = True) -> None:
    """The model, the network interface gloo is told to use, the frameworks' settings exported (`horovod`: whether
    Horovod runs under this command), and the paths a run will write and the room they have (the data: check_data, on
    the data's plan)."""
    check_model(cfg)
    check_interface()
    framework_env.check(os.environ, cfg, horovod)
    writable_dir(cfg.output_dir, "--output-dir")
    free_space(cfg.output_dir, "--output-dir", OUTPUT_BYTES, "results, TensorBoard scalars, logs")
    if not (cfg.dataset == "mnist" and (Path(cfg.data_dir) / "MNIST" / "raw").is_dir()):
        writable_dir(cfg.data_dir, "--data-dir")  # real MNIST is only read: a read-only shared copy is fine
    if cfg.checkpoint_dir:
        writable_dir(cfg.checkpoint_dir, "--checkpoint-dir")
        check_checkpoint_file(Path(cfg.checkpoint_dir).expanduser() / CHECKPOINT)
        free_space(cfg.checkpoint_dir, "--checkpoint-dir", checkpoint_bytes(cfg),
                   "two checkpoints while one replaces the other")

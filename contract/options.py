"""The training and communication options, side by side: where each applies, what each framework really uses, and
the environment Horovod reads its own from.

One flag sets both frameworks alike (`--compression`, `--grad-accumulation`, `--amp`, `--bucket-mb`); the few that
only one framework has are refused by the other's entry points and recorded as not applicable by `compare`.
"""

from dataclasses import replace
from typing import Any

from contract.config import AVERAGING_ONLY, BACKENDS, DEFAULTS, ConfigError, TrainConfig, flag

DDP_ONLY = ("gradient_as_bucket_view", "static_graph")
HOROVOD_ONLY = ("cycle_time_ms", "autotune", "fused_buffers")
RAY_ONLY = ("placement_strategy",)
"""Options of Ray's launchers alone: torchrun's, horovodrun's and mp.spawn's entry points do not offer them."""
MATHS = ("compression", "grad_accumulation", "amp")
"""Options that change the numbers: the single-process references take them too, and only them."""
SHOWN = ("compression", "grad_accumulation", "amp", "bucket_mb", *DDP_ONLY, *HOROVOD_ONLY, "trace")

DDP_DEFAULT_BUCKET_MB = 25.0  # DistributedDataParallel(bucket_cap_mb=None)
DDP_FIRST_BUCKET_MB = 1.0  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES: DDP's first bucket is smaller
# Read from horovod/common/operations.cc of 0.28.1 (SetTensorFusionThresholdBytes(128 * 1024 * 1024)); its docs
# (tensor-fusion, HOROVOD_FUSION_THRESHOLD) still say 64 MB, the default of releases before 0.21.
HOROVOD_DEFAULT_FUSION_MB = 128.0
HOROVOD_DEFAULT_CYCLE_MS = 1.0  # operations.cc: SetCycleTimeMs(1)
AUTOTUNE_LOG = "horovod-autotune.csv"
MIB = 1024 * 1024

COMPRESSION_TEXT = {
    "native": {
        "none": "float32 on the wire (allreduce_hook: divide by N, sum)",
        "fp16": "float16 on the wire (fp16_compress_hook: cast, divide by N, sum in float16)",
        "bf16": "bfloat16 on the wire (bf16_compress_hook: cast, divide by N, sum in bfloat16)",
    },
    "horovod": {
        "none": "float32 on the wire (Compression.none: sum, then × 1/N)",
        "fp16": "float16 on the wire (Compression.fp16: cast, sum in float16, then × 1/N in float16)",
        "bf16": "bfloat16-rounded values in float32 on the wire (BF16Compressor: Horovod 0.28.1 allreduces no "
                "bfloat16, so no bytes are saved): cast, sum in float32, × 1/N, round to bfloat16",
    },
}
CEILING_TEXT = "not applicable: the ceiling averages nothing"
REFERENCE_ROUNDING = {"reference": "native", "reference-horovod": "horovod", "reference-reordered": "native"}
"""The single-process references that emulate each backend's gradient arithmetic (workload/compression.py)."""


def _framework(backend: str) -> str:
    return backend if backend in BACKENDS else "reference"


def applies(name: str, backend: str) -> bool:
    """Whether option `name` means something to `backend` (native, horovod or a reference mode)."""
    framework = _framework(backend)
    if framework == "reference":
        return name in MATHS
    return not (name in DDP_ONLY and framework == "horovod" or name in HOROVOD_ONLY and framework == "native")


def check(cfg: TrainConfig, backend: str, backend_flag: str = "--backend") -> None:
    """Refuse, in one line, an option that means nothing to `backend`, rather than ignore it silently."""
    for name in [name for name in SHOWN if getattr(cfg, name) != DEFAULTS[name]]:
        if name in DDP_ONLY and backend == "horovod":
            raise ConfigError(f"{flag(name)} is a DDP option, not applicable to Horovod; use {backend_flag} native")
        if name in HOROVOD_ONLY and backend == "native":
            raise ConfigError(f"{flag(name)} is a Horovod option, not applicable to DDP; use {backend_flag} horovod")


def for_backend(cfg: TrainConfig, backend: str) -> TrainConfig:
    """`cfg` with the options that do not apply to `backend` at their defaults: `compare` passes each backend its own
    share of the user's options and records the rest as not applicable."""
    return replace(cfg, **{name: DEFAULTS[name] for name in SHOWN if not applies(name, backend)})


def effective(cfg: TrainConfig, backend: str) -> dict[str, Any]:
    """Each option as `backend` applies it, in words, with the framework's own value where the flag leaves it to
    the framework; `not applicable` where it has no such option."""
    framework = _framework(backend)
    out: dict[str, Any] = {}
    for name in SHOWN:
        if not applies(name, backend):
            out[name] = "not applicable"
    n = cfg.grad_accumulation
    if framework == "reference":
        rounding = REFERENCE_ROUNDING.get(backend)
        out["compression"] = (f"{cfg.compression}, emulating {rounding}'s rounding order" if rounding and
                              cfg.compression != "none" else cfg.compression)
        out["grad_accumulation"] = f"{n} micro-batch(es) per simulated worker, averaged once"
    else:
        out["compression"] = f"{cfg.compression}: {COMPRESSION_TEXT[framework][cfg.compression]}"
    if framework == "native":
        out["grad_accumulation"] = f"{n}" + (f" (no_sync() on the first {n - 1} micro-batch(es))" if n > 1 else "")
        out["bucket_mb"] = (f"{cfg.bucket_mb:g} MiB (bucket_cap_mb)" if cfg.bucket_mb else
                            f"{DDP_DEFAULT_BUCKET_MB:g} MiB (DDP's default; its first bucket "
                            f"{DDP_FIRST_BUCKET_MB:g} MiB)")
        out["gradient_as_bucket_view"] = cfg.gradient_as_bucket_view
        out["static_graph"] = cfg.static_graph
    elif framework == "horovod":
        out["grad_accumulation"] = f"{n} (backward_passes_per_step={n})"
        out["bucket_mb"] = (f"{cfg.bucket_mb:g} MiB (HOROVOD_FUSION_THRESHOLD={fusion_bytes(cfg.bucket_mb)})"
                            if cfg.bucket_mb else f"{HOROVOD_DEFAULT_FUSION_MB:g} MiB (Horovod 0.28.1's default in "
                                                  "its code; its docs say 64 MB)")
        out["cycle_time_ms"] = (f"{cfg.cycle_time_ms:g} ms (HOROVOD_CYCLE_TIME)" if cfg.cycle_time_ms else
                                f"{HOROVOD_DEFAULT_CYCLE_MS:g} ms (Horovod's default)")
        out["autotune"] = f"on (log: {AUTOTUNE_LOG})" if cfg.autotune else "off"
        out["fused_buffers"] = "on (Horovod's timeline; it slows every step)" if cfg.fused_buffers else "off"
    out["amp"] = "none" if cfg.amp == "none" else f"{cfg.amp} (torch.autocast over forward and loss)"
    if framework != "reference":
        out["trace"] = cfg.trace
    if cfg.no_averaging:
        out.update(dict.fromkeys((name for name in AVERAGING_ONLY if name in out), CEILING_TEXT))
    return {name: out[name] for name in SHOWN}


def fusion_bytes(mb: float) -> int:
    return max(1, round(mb * MIB))


def horovod_env(cfg: TrainConfig, output_dir: str) -> dict[str, str]:
    """What Horovod reads at hvd.init() for the options it takes from the environment rather than from code."""
    env = {}
    if cfg.bucket_mb:
        env["HOROVOD_FUSION_THRESHOLD"] = str(fusion_bytes(cfg.bucket_mb))
    if cfg.cycle_time_ms:
        env["HOROVOD_CYCLE_TIME"] = f"{cfg.cycle_time_ms:g}"
    if cfg.autotune:
        env["HOROVOD_AUTOTUNE"] = "1"
        env["HOROVOD_AUTOTUNE_LOG"] = f"{output_dir}/{AUTOTUNE_LOG}"
    if cfg.trace or cfg.fused_buffers:
        env["HOROVOD_TIMELINE"] = "DYNAMIC"  # hvd.start_timeline()/stop_timeline() then record only the steps wanted
    return env


def ceiling(cfg: TrainConfig) -> TrainConfig:
    """`cfg` for the ceiling arm: the same model, batch, threads and shards, nothing averaged, and so none of the
    options that shape averaging."""
    return replace(cfg, no_averaging=True, **{name: DEFAULTS[name] for name in AVERAGING_ONLY})

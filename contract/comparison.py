"""The comparison's one typed config: what `compare` runs, for how long, how it judges, where, and where it writes.
Its field docstrings are compare's flags (runtime/flags.py), grouped in --help as GROUPS says."""

import math
from dataclasses import dataclass, field

from contract.config import BACKENDS, LAUNCHERS, ConfigError, flag

MAX_TARGET_CI = 50.0
MAX_BUDGET_MIN = 10_080.0
GROUPS = {
    "what to compare": ("workers", "backends", "launchers", "model", "amp", "compression", "bucket_mb", "model_width",
                        "cycle_time_ms", "gradient_as_bucket_view", "best_of_each", "no_ceiling", "aa"),
    "how long": ("repeats", "target_ci", "budget_min"),
    "statistics": ("parity_steps", "tolerance", "target_accuracy", "assert_parity"),
    "cluster": ("simulate_nodes", "link_rates"),
    "output": ("output_dir", "render", "resume"),
}
"""compare's flag groups in --help (its training flags, TrainConfig's, come last)."""
LISTS = ("model", "amp", "compression", "bucket_mb", "model_width", "cycle_time_ms", "gradient_as_bucket_view")
"""TrainConfig's options that compare takes as comma-separated lists: every combination is a tuning grid."""


@dataclass(kw_only=True, slots=True)
class CompareConfig:
    workers: str = "2"
    """Worker counts to compare, comma-separated (each its own verdict)."""

    backends: str = "native,horovod"
    """The distributed backends, comma-separated."""

    launchers: str = "ray"
    """Comma-separated, from ray, torchrun, mp.spawn, horovodrun: torchrun, mp.spawn and horovodrun add each backend
    under its own launcher beside Ray."""

    model: str = "convnet"
    """The network(s): convnet, mlp, resnet18, resnet50, vit_b_16, or package.module:factory; a comma-separated
    list runs one comparison per model."""

    amp: str = "none"
    """Mixed precision for forward and loss in every run, from none, bf16, fp16 (fp16: GPU only, with a GradScaler);
    a comma-separated list runs one comparison per precision."""

    compression: str = "none"
    """Gradients on the wire in both backends, from none, fp16, bf16 (DDP: its compress hooks; Horovod: its
    compressors); a comma-separated list runs the tuning grid."""

    bucket_mb: str = "0"
    """DDP's bucket_cap_mb and Horovod's fusion threshold, in MiB; 0: each framework's own default (DDP 25, Horovod
    128); a comma-separated list runs the tuning grid."""

    model_width: str = "1"
    """Multiplies convnet's channel counts (1: the tutorial network); a comma-separated list runs the grid."""

    cycle_time_ms: str = "0"
    """Horovod only: its background thread's cycle time (HOROVOD_CYCLE_TIME), 0: Horovod's default (1 ms); a
    comma-separated list runs the grid."""

    gradient_as_bucket_view: str = "off"
    """DDP only: gradients as views into its buckets, off or on; off,on runs the grid."""

    best_of_each: bool = False
    """After a tuning grid, one more comparison: each backend at its own best setting, interleaved and paired (a fair
    fight is each at its best, not both at one setting)."""

    no_ceiling: bool = False
    """Leave out the ceiling: the same ranks, launched alike, each training its own shard with no gradient averaging,
    interleaved with the other arms; each backend's efficiency is its samples/s ÷ the ceiling's."""

    aa: bool = False
    """The A/A control: every arm also runs against a twin of itself, interleaved alike; the report gives each A/A
    interval and the resolution it allows (doubles the runs)."""

    repeats: int = 6
    """Runs of every arm per worker count, interleaved; with --target-ci, the pilot."""

    target_ci: float = 0.0
    """After the --repeats rounds (the pilot, at least 3), add the rounds Stein's two-stage procedure says native ÷
    Horovod needs for a 95 % half-width of ±this many percent, within --budget-min; its interval stays valid, unlike
    one recomputed after every round (0: a fixed --repeats)."""

    budget_min: float = 30.0
    """With --target-ci: the comparison's minutes from its first run, which the added rounds stay within; a grid or a
    link sweep gives it to each of its comparisons."""

    parity_steps: int = 50
    """Steps compared for parity."""

    tolerance: float = 1e-4
    """Largest |step-loss difference| that passes parity."""

    target_accuracy: float = 0.95
    """For the time to accuracy."""

    assert_parity: bool = False
    """Exit 1 unless parity is PASS everywhere."""

    simulate_nodes: int = 0
    """Run on this many simulated Ray nodes on this host, one network namespace each, one worker per node (needs root,
    ip and tc; 0: one real node)."""

    link_rates: str = "unshaped"
    """With --simulate-nodes: the link rates to compare at, e.g. 20mbit,1gbit,unshaped, one comparison each, and the
    regime report."""

    output_dir: str = "results"
    """Each comparison goes into <output-dir>/<run-id>/."""

    render: str = ""
    """Only re-render this folder's report from its comparison.json (or grid.json, network.json)."""

    resume: str = ""
    """Go on with the comparison (or grid) in this folder, stopped midway: the runs that finished whole are checked
    and kept, the rest run; given the same settings it started with, or refused naming the difference."""

    worker_counts: tuple[int, ...] = field(init=False, default=())
    backend_names: tuple[str, ...] = field(init=False, default=())
    launcher_names: tuple[str, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        self.worker_counts = _workers(self.workers)
        self.backend_names = _distinct_names("--backends", self.backends, BACKENDS, "unknown backend {} in --backends")
        self.launcher_names = _distinct_names("--launchers", self.launchers, LAUNCHERS,
                                              f"--launchers takes distinct names from {', '.join(LAUNCHERS)}, got "
                                              f"{self.launchers!r}")
        for name, bound in (("repeats", 1000), ("parity_steps", 1_000_000)):
            if not 0 < getattr(self, name) <= bound:
                raise ConfigError(f"{flag(name)} must be a positive integer up to {bound}, got {getattr(self, name)}")
        if not (math.isfinite(self.tolerance) and self.tolerance >= 0):
            raise ConfigError(f"--tolerance must be a finite number >= 0, got {self.tolerance}")
        if not 0 < self.target_accuracy <= 1:
            raise ConfigError(f"--target-accuracy must be in (0, 1], got {self.target_accuracy}")
        self._check_two_stage()

    def _check_two_stage(self) -> None:
        if not (math.isfinite(self.target_ci) and 0 <= self.target_ci <= MAX_TARGET_CI):
            raise ConfigError(f"--target-ci is a half-width in percent from 0 to {MAX_TARGET_CI:g}, e.g. 5 for ±5 %; "
                              f"got {self.target_ci}")
        if not (math.isfinite(self.budget_min) and 0 < self.budget_min <= MAX_BUDGET_MIN):
            raise ConfigError(f"--budget-min must be a positive number of minutes up to {MAX_BUDGET_MIN:g} (a week), "
                              f"got {self.budget_min}")
        if self.target_ci and set(self.backend_names) != set(BACKENDS):
            raise ConfigError("--target-ci sizes native ÷ Horovod; pass --backends native,horovod (or --target-ci 0, "
                              "as make compare needs for one backend)")
        if self.target_ci and self.repeats < 3:
            raise ConfigError(f"--target-ci needs a pilot of at least 3 rounds to measure its spread; pass --repeats 3 "
                              f"or more (got {self.repeats})")


def _workers(text: str) -> tuple[int, ...]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise ConfigError(f"--workers takes a comma-separated list of positive integers, got {text!r}") from None
    if not counts or any(n <= 0 for n in counts) or len(set(counts)) != len(counts):
        raise ConfigError(f"--workers takes distinct positive integers, got {text!r}")
    return tuple(counts)


def _distinct_names(flag: str, text: str, known: tuple[str, ...], unknown: str) -> tuple[str, ...]:
    """The names in `text`, each known and once; `unknown` words the refusal (with {}: the names not known, and the
    choices after it)."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    wrong = [n for n in names if n not in known] or ([] if names else [repr(text)])
    if wrong:
        choices = f"; choose from {', '.join(known)}" if "{}" in unknown else ""
        raise ConfigError(unknown.format(", ".join(wrong)) + choices)
    if len(set(names)) != len(names):
        raise ConfigError(unknown if "{}" not in unknown else f"{flag} lists a name twice: {text}")
    return tuple(names)

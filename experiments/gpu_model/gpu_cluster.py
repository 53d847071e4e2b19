"""A GPU cluster's step under each framework: the replay of its averaging (schedule_replay.py) over a
backward shaped as a measured one and scaled to the cluster's own one-GPU step, plus the two things a GPU host adds
that the replay alone leaves out (docs/cluster.md, "What a GPU host adds"):

- the allreduces that run beside backward slow it: NCCL's kernels take the GPU's cores and memory while they run.
  overlap_cost of each second of averaging hidden behind backward is added to the step (fitted);
- Horovod's step end: `optimizer.step()` calls `synchronize()`, which holds the host until every allreduce is done
  and then walks every gradient's handle, while the GPU has nothing queued (horovod/torch/optimizer.py,
  synchronize; mpi_ops_v2.cc, WaitAndClear). Its host work is measured here per gradient and per step
  (tools/host_costs.py) and scaled by step_end_scale, Horovod's step end on a GPU node ÷ that loop (fitted).
  DDP's reducer makes the stream wait and returns (reducer.cpp, finalize_backward), so its host stays ahead.

Each hook's own cost during backward is measured too but not added: on a GPU the host runs ahead of the GPU during
backward, so the autograd thread's hooks delay kernels the GPU is not yet waiting for.
Torch-free: the constants are fitted by experiments/gpu_model/published_check.py on the calibration rows of
docs/results/published-gpu, and read from its check.json.
"""

import json
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from analysis import runs
from contract import models
from contract.config import BACKENDS, ConfigError
from experiments.gpu_model import schedule_replay
from experiments.gpu_model.schedule_replay import Gradient, Link, Schedule

PRECISIONS = ("fp32", "tf32", "amp", "bf16")
"""The one-GPU figure's precision. Autocast (amp, bf16) and TF32 keep the parameters, and so the gradients DDP and
Horovod average, in float32: the precision changes the step, which the one-GPU figure carries, not the bytes."""
NVLINK_LATENCY_S = 5e-6
NIC_LATENCY_S = 10e-6
NIC_EFFICIENCY = 0.9
"""A node's network link carries an allreduce at 90 % of its rate (nccl-tests' all_reduce_perf bus bandwidth over
InfiniBand), each hop NIC_LATENCY_S; inside a node, NVLink's hop NVLINK_LATENCY_S. Assumed."""
NEGOTIATION_S = 100e-6
"""Horovod's negotiation a cycle once its response cache holds every tensor (a bit vector over its control plane).
Assumed."""
FUSION_COPY_BYTES_PER_S = 1e12
"""Horovod's copy of a fused buffer in and out on the GPU (MEMCPY_IN/OUT_FUSION_BUFFER), at device-memory speed.
Assumed."""
LINK_RANGE = (0.75, 1.0, 1.25)
LATENCY_RANGE = (0.5, 1.0, 2.0)
"""The assumed links' bandwidths are known to ±25 % and their latencies (NVLink's and the NIC's hop, Horovod's
negotiation) to a factor of 2: published_check fits the constants at every pair of these bounds, and a prediction's
range spans every fit."""
RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
CHECK = RESULTS / "published-gpu" / "check.json"
HOST_COSTS = RESULTS / "host-costs" / "host-costs.json"
GPU_HOST_COSTS = RESULTS / "gpu-nvidia-h200" / "host-costs.json"
"""The same benchmark on a GPU node's host: one rank on an H200 (tools/host_costs.py --device cuda)."""


LARGEST = 1e9
"""No input of a cluster file is larger: past it a count overflows before anything is predicted."""
MAX_STEP_S = 3600.0
"""A one-GPU step longer than an hour is a slip in the batch or the rate, and past it the replay's times overflow."""
OPTIONAL = ("one_gpu_images_per_s_low", "one_gpu_images_per_s_high")


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer of hundreds of digits
        return False


class Given(float):
    """A JSON number as its file spells it (1e400 is read as inf): the messages quote what the user wrote."""

    def __new__(cls, text: str) -> "Given":
        made = super().__new__(cls, text)
        made.text = text
        return made

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__


@dataclass(frozen=True, kw_only=True, slots=True)
class Cluster:
    """A team's cluster, as `python -m experiments.gpu_model.predict_gpus --cluster FILE` reads it."""

    model: str
    """A model of the registry whose backward a committed CPU run recorded (resnet50, vit_b_16)."""
    image_size: int
    """The images' side in pixels, as the one-GPU figure was measured."""
    batch_per_gpu: int
    precision: str
    """fp32, tf32, amp or bf16: the one-GPU figure's."""
    one_gpu_images_per_s: float
    """One GPU's training rate at this batch and precision: `make gpu-check` on one of the team's GPUs, or a
    published figure."""
    gpus_per_node: int
    nodes: int
    intra_node_busbw_gbyte_s: float
    """NCCL's all_reduce bus bandwidth inside a node (nccl-tests' all_reduce_perf, busbw), GB/s."""
    inter_node_gbit_s: float
    """A node's network link, Gbit/s (all its NICs together)."""
    one_gpu_images_per_s_low: float | None = None
    one_gpu_images_per_s_high: float | None = None
    """Optional: how far the one-GPU figure may be off, as the lowest and highest rate you measured or expect; the
    range varies it this far and no further (unset: the figure as given)."""

    def __post_init__(self) -> None:
        for name, allowed in (("model", models.MODELS), ("precision", PRECISIONS)):
            if not isinstance(value := getattr(self, name), str):
                raise ConfigError(f"{name} must be a name, not {value!r}")
            if value not in allowed:
                raise ConfigError(f"{name} {value!r} is not one of {', '.join(allowed)}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("model", "precision") or (value is None and f.name in OPTIONAL):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value) or value <= 0:
                raise ConfigError(f"{f.name} must be a positive finite number, not {value}")
            if value > LARGEST:
                raise ConfigError(f"{f.name} {value} is beyond any cluster's: at most {LARGEST:g}")
            if f.type in (int, "int"):
                if value != int(value):
                    raise ConfigError(f"{f.name} must be a whole number, not {value}")
                object.__setattr__(self, f.name, int(value))  # 2.0 nodes are 2 nodes
        low, high = self.one_gpu_images_per_s_low, self.one_gpu_images_per_s_high
        if (low or 0) > self.one_gpu_images_per_s or (high or math.inf) < self.one_gpu_images_per_s:
            raise ConfigError(f"one_gpu_images_per_s {self.one_gpu_images_per_s} is outside its own "
                              f"one_gpu_images_per_s_low and _high: give the low below it and the high above it")
        if self.batch_per_gpu / min(self.one_gpu_rates()) > MAX_STEP_S:
            raise ConfigError(f"batch_per_gpu {self.batch_per_gpu} at one_gpu_images_per_s "
                              f"{min(self.one_gpu_rates())} is a step of more than {MAX_STEP_S:g} s: check both")

    @property
    def gpus(self) -> int:
        return int(self.gpus_per_node * self.nodes)

    def one_gpu_rates(self) -> tuple[float, ...]:
        """The one-GPU figure, then the ends of its range where one was given."""
        return (self.one_gpu_images_per_s, *(getattr(self, name) for name in OPTIONAL if getattr(self, name)))

    def given(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


def load(path: Path) -> Cluster:
    """A cluster file, or one line naming what is wrong with it."""
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        if twice := sorted({key for key in keys if keys.count(key) > 1}):
            raise ConfigError(f"--cluster {path}: {', '.join(twice)} is given twice; keep one")
        return dict(pairs)

    doc = runs.read_json(path, "--cluster names a JSON file of your cluster (docs/cluster.md, \"Your cluster, "
                               "predicted\")", object_pairs_hook=unique, parse_float=Given)
    keys = [f.name for f in fields(Cluster)]
    if not isinstance(doc, dict):
        raise ConfigError(f"--cluster {path}: a JSON object with the keys {', '.join(keys)}")
    missing = [k for k in keys if k not in doc and k not in OPTIONAL]
    unknown = sorted(set(doc) - set(keys))
    if missing or unknown:
        said = [f"missing {', '.join(missing)}"] if missing else []
        said += [f"unknown {', '.join(unknown)}"] if unknown else []
        raise ConfigError(f"--cluster {path}: {'; '.join(said)} (the keys: {', '.join(keys)}; the last two may be "
                          "left out)")
    return Cluster(**doc)


@dataclass(frozen=True, slots=True)
class Host:
    """Horovod's step end on this machine's host beyond what the same step costs with no framework, measured at a few
    gradient counts."""

    points: tuple[tuple[int, float], ...]
    """(gradients, seconds), the means over rounds, by gradient count."""
    low: float
    high: float
    """The 95 % interval of the step end at ResNet-50's 161 gradients, as shares of its mean."""

    def at(self, gradients: int) -> float:
        """Seconds at `gradients`: straight lines between the measured counts, the nearest line's past them, never
        below 0."""
        (n0, y0), (n1, y1) = next(((a, b) for a, b in zip(self.points, self.points[1:]) if gradients <= b[0]),
                                  self.points[-2:])
        return max(0.0, y0 + (y1 - y0) * (gradients - n0) / (n1 - n0))


def host(path: Path = HOST_COSTS) -> Host:
    doc = json.loads(path.read_text())
    summary = doc["summary"]["horovod"]
    at = summary["step_end_s_at_161"]
    return Host(tuple((n, summary[f"step_end_s_at_{n}"]["mean"]) for n in doc["tensors"]),
                at["low"] / at["mean"], at["high"] / at["mean"])


@dataclass(frozen=True, slots=True)
class Constants:
    """One fit of published_check: its two constants, and the assumed links it was made under (and so predicts
    under)."""

    overlap_cost: float
    """Seconds added to the step per second of averaging that runs while backward does."""
    step_end_scale: float
    """Horovod's step end on a GPU node ÷ the host loop measured here: above 1 where the GPU's step end holds more
    than that loop (each handle's completion passes Horovod's finalizer thread, which waits on the host for its
    CUDA events, gpu_operations.cc), below 1 where the node's host is faster than this one."""
    bandwidth: float = 1.0
    """The links' bandwidth as a share of the assumed figure, LINK_RANGE's."""
    latency: float = 1.0
    """The latencies as a share of the assumed figures, LATENCY_RANGE's."""
    on: str = "calibration"
    """The clusters whose rows it was fitted on."""


@dataclass(frozen=True, slots=True)
class Checked:
    """What published_check's check.json gives a prediction: every fit, the first the calibration split's at the
    assumed figures; where the step is bound by the host; what the published rows and measurements cover."""

    fits: tuple[Constants, ...]
    host_bound_above: float
    """One-GPU rates (img/s) above this are the host-bound regime: no published row faster than it scaled as the
    model says (check.json's `host_bound`)."""
    covers: dict[str, int]
    """The most GPUs a node, nodes and GPUs any published row or measurement had."""


def checked(path: Path = CHECK) -> Checked:
    doc = json.loads(path.read_text())
    return Checked(tuple(Constants(**fit) for fit in doc["fits"]), doc["host_bound"]["above_images_per_s"],
                   doc["covers"])


def beyond(cluster: Cluster, covers: dict[str, int]) -> list[str]:
    """Where `cluster` is larger than anything published or measured, in words; empty where it is not."""
    said = {"gpus": "GPUs", "gpus_per_node": "GPUs a node", "nodes": "nodes"}
    return [f"{getattr(cluster, key):,} {words} (the published rows and measurements: at most {covers[key]:,})"
            for key, words in said.items() if getattr(cluster, key) > covers[key]]


def link(cluster: Cluster, fit: Constants) -> Link:
    """One allreduce over every GPU, as NCCL's ring: inside one node over NVLink, across nodes at the slower of the
    node's link and NVLink (the ring crosses each node's link once each way); at the fit's share of the assumed
    bandwidths and latencies."""
    latency, bandwidth = NVLINK_LATENCY_S, cluster.intra_node_busbw_gbyte_s * 1e9
    if cluster.nodes > 1:
        latency, bandwidth = NIC_LATENCY_S, min(bandwidth, cluster.inter_node_gbit_s * 1e9 / 8 * NIC_EFFICIENCY)
    return Link(latency * fit.latency, bandwidth * fit.bandwidth, cluster.gpus, FUSION_COPY_BYTES_PER_S)


Replayed = tuple[float, int, Schedule, Schedule]
"""The one-GPU step, the gradients' count and each backend's schedule: what a fit's two constants do not move."""


def replay(cluster: Cluster, shape: dict[str, Any], fit: Constants, rate: float | None = None) -> Replayed:
    """Each backend's schedule on the cluster under `fit`'s links, one GPU training `rate` img/s (default: the
    cluster's figure)."""
    one = cluster.batch_per_gpu / (rate or cluster.one_gpu_images_per_s)
    forward, backward, optimizer = (share * one for share in shape["split"])
    grads = [Gradient(forward + s * backward, shape["bytes"][i], i) for i, s in shape["shares"].items()]
    net = link(cluster, fit)
    native = schedule_replay.ddp(grads, forward + backward, net)
    horovod = schedule_replay.horovod_over_phases(
        grads, forward + backward, net, negotiation_s=NEGOTIATION_S * fit.latency if cluster.gpus > 1 else 0.0)
    return one, len(grads), native, horovod


def steps(cluster: Cluster, shape: dict[str, Any], fit: Constants, measured: Host, *, rate: float | None = None,
          host_share: float = 1.0, copy_s: float = 0.0, replayed: Replayed | None = None) -> dict[str, Any]:
    """Each backend's step on the cluster, in seconds, with its parts, one GPU training `rate` img/s (default: the
    cluster's figure). `copy_s`: what a benchmark adds to Horovod's step alone (published rows only). `replayed`:
    replay()'s result for the same cluster, shape, rate and links, where the caller prices it under several
    constants."""
    one, count, native, horovod = replayed or replay(cluster, shape, fit, rate)
    # Horovod registers its hooks, and so walks handles at the step's end, only past one rank (optimizer.py)
    alone = cluster.gpus == 1  # one rank averages nothing: the one-GPU figure is its step, whatever DDP adds in it
    block = 0.0 if alone else fit.step_end_scale * host_share * measured.at(count)
    parts: dict[str, Any] = {"one_gpu_step_s": one}
    for name, schedule, extra in (("native", native, 0.0), ("horovod", horovod, block + copy_s)):
        # the averaging's seconds that ran while backward still did
        overlap = 0.0 if alone else fit.overlap_cost * sum(
            max(0.0, min(a.end_s, schedule.backward_end_s) - a.start_s) for a in schedule.allreduces)
        wait = 0.0 if alone else schedule.wait_s
        parts[name] = {"step_s": one + wait + overlap + extra, "wait_s": wait, "overlap_s": overlap,
                       "allreduces": len(schedule.allreduces), "cycles": schedule.cycles}
    parts["horovod"].update(host_block_s=block, benchmark_copy_s=copy_s)
    return parts


def predict(cluster: Cluster, shape: dict[str, Any], fits: tuple[Constants, ...], measured: Host,
            copy_s: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> dict[str, Any]:
    """native and horovod's img/s per GPU and scaling efficiency, native ÷ Horovod, each with its range, and what
    decides it: the first fit's prediction, the ranges over every fit (each under its own links), the one-GPU figure's
    given range, the host's step end over its interval and a benchmark's extra copy in Horovod's arm (`copy_s`: low,
    middle, high)."""
    # each fit's links at each one-GPU rate, replayed once: the host's two ends and the middle price the same schedules
    replays = {(i, rate): replay(cluster, shape, fit, rate) for i, fit in enumerate(fits)
               for rate in cluster.one_gpu_rates()}
    middle = steps(cluster, shape, fits[0], measured, copy_s=copy_s[1],
                   replayed=replays[0, cluster.one_gpu_images_per_s])
    # Horovod's host work and a benchmark's copy add to its step alone: their ends bound the ratio's
    spread = [(rate, steps(cluster, shape, fit, measured, rate=rate, host_share=h, copy_s=c, replayed=replays[i, rate]))
              for i, fit in enumerate(fits) for rate in cluster.one_gpu_rates()
              for h, c in ((measured.low, copy_s[0]), (measured.high, copy_s[2]))]
    ratios = [s["horovod"]["step_s"] / s["native"]["step_s"] for _, s in spread]
    batch = cluster.batch_per_gpu
    out: dict[str, Any] = {}
    for name in BACKENDS:
        per_gpu = batch / middle[name]["step_s"]
        rates = [batch / s[name]["step_s"] for _, s in spread]
        scalings = [batch / s[name]["step_s"] / rate for rate, s in spread]
        out[name] = {"images_per_s_per_gpu": per_gpu, "scaling_efficiency": per_gpu / cluster.one_gpu_images_per_s,
                     "images_per_s_per_gpu_range": [min(rates), max(rates)],
                     "scaling_range": [min(scalings), max(scalings)],
                     **{key[:-2] + "_ms" if key.endswith("_s") else key: 1000 * value if key.endswith("_s") else value
                        for key, value in middle[name].items()}}  # the step's parts, its times in ms
    out["native_over_horovod"] = {"value": middle["horovod"]["step_s"] / middle["native"]["step_s"],
                                  "low": min(ratios), "high": max(ratios)}
    return {**out, "deciding": deciding(middle), "one_gpu_step_ms": 1000 * middle["one_gpu_step_s"]}


def limits(cluster: Cluster, made: dict[str, Any], checked_by: Checked) -> dict[str, Any]:
    """`made` as far as the published rows and measurements reach: where one GPU is faster than any whose published
    scaling the model met, no scaling (the host bounds the step there, which the model does not see); and, in
    `beyond`, where the cluster is larger than anything checked."""
    out = {**made, "beyond_checked": beyond(cluster, checked_by.covers), "host_bound": None}
    if cluster.gpus > 1 and max(cluster.one_gpu_rates()) > checked_by.host_bound_above:
        out["host_bound"] = (f"one GPU trains up to {max(cluster.one_gpu_rates()):,.0f} img/s, past "
                             f"{checked_by.host_bound_above:,.0f}, the fastest at which a published row scaled as the "
                             "model says (docs/results/published-gpu/check.md, \"Bound by the host\")")
        for name in BACKENDS:
            out[name] = {k: v for k, v in made[name].items() if "scaling" not in k and "per_gpu" not in k}
    return out


def deciding(parts: dict[str, Any]) -> str:
    """The largest of the terms that set Horovod's step apart from DDP's, in words, and how much of the gap the
    fitted step end is."""
    native, horovod = parts["native"], parts["horovod"]
    terms = {
        "Horovod's step end (synchronize() holds the host while the GPU idles)": horovod["host_block_s"],
        "the averaging's wait after backward (Horovod's cycle and negotiation, DDP's last bucket)":
            horovod["wait_s"] - native["wait_s"],
        "the averaging beside backward, which slows it": horovod["overlap_s"] - native["overlap_s"],
        "the benchmark's own copy in Horovod's arm (pageable memory)": horovod["benchmark_copy_s"],
    }
    name, value = max(terms.items(), key=lambda kv: abs(kv[1]))
    gap = horovod["step_s"] - native["step_s"]
    if abs(gap) < 1e-4 * native["step_s"]:
        return "nothing: the two steps are the same within 0.01 %"
    replayed = gap - horovod["host_block_s"] - horovod["benchmark_copy_s"]
    return (f"{name}, {1000 * value:+.2f} ms to Horovod's step beside DDP's (+ where Horovod pays more; the steps "
            f"{1000 * horovod['step_s']:.1f} and {1000 * native['step_s']:.1f} ms; of the {1000 * gap:+.2f} ms "
            f"between them the fitted step end is {1000 * horovod['host_block_s']:+.2f} and the replayed schedule "
            f"{1000 * replayed:+.2f})")

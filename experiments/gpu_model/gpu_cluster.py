"""A GPU cluster's step under each framework: the replay of its averaging (experiments/gpu_model/schedule_replay.py) over a
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
STEP_RANGE = (0.8, 1.0, 1.2)
LINK_RANGE = (0.75, 1.0, 1.25)
"""The interval of native ÷ Horovod spans the one-GPU step at ±20 %, the links at ±25 % and the host's measured
work over its 95 % interval."""
CHECK = Path(__file__).resolve().parents[2] / "docs" / "results" / "published-gpu" / "check.json"
HOST_COSTS = Path(__file__).resolve().parents[2] / "docs" / "results" / "host-costs" / "host-costs.json"
GPU_HOST_COSTS = HOST_COSTS.parent.parent / "gpu-nvidia-h200" / "host-costs.json"
"""The same benchmark on a GPU node's host: one rank on an H200 (tools/host_costs.py --device cuda)."""


LARGEST = 1e9
"""No input of a cluster file is larger: past it a count overflows before anything is predicted."""
MAX_STEP_S = 3600.0
"""A one-GPU step longer than an hour is a slip in the batch or the rate, and past it the replay's times overflow."""


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer of hundreds of digits
        return False


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

    def __post_init__(self) -> None:
        for name in ("model", "precision"):
            if not isinstance(getattr(self, name), str):
                raise ConfigError(f"{name} must be a name, not {getattr(self, name)!r}")
        if self.model not in models.MODELS:
            raise ConfigError(f"model {self.model!r} is not one of {', '.join(models.MODELS)}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("model", "precision"):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value) or value <= 0:
                raise ConfigError(f"{f.name} must be a positive finite number, not {str(value)[:20]!s}")
            if value > LARGEST:
                raise ConfigError(f"{f.name} {value:g} is beyond any cluster's: at most {LARGEST:g}")
            if f.type in (int, "int"):
                if value != int(value):
                    raise ConfigError(f"{f.name} must be a whole number, not {value!r}")
                object.__setattr__(self, f.name, int(value))  # 2.0 nodes are 2 nodes
        if self.batch_per_gpu / self.one_gpu_images_per_s > MAX_STEP_S:
            raise ConfigError(f"batch_per_gpu {self.batch_per_gpu} at one_gpu_images_per_s "
                              f"{self.one_gpu_images_per_s:g} is a step of more than {MAX_STEP_S:g} s: check both")

    @property
    def gpus(self) -> int:
        return int(self.gpus_per_node * self.nodes)


def load(path: Path) -> Cluster:
    """A cluster file, or one line naming what is wrong with it."""
    doc = runs.read_json(path, "--cluster names a JSON file of your cluster (docs/cluster.md, \"Your cluster, "
                                "predicted\")")
    keys = [f.name for f in fields(Cluster)]
    if not isinstance(doc, dict):
        raise ConfigError(f"--cluster {path}: a JSON object with the keys {', '.join(keys)}")
    missing = [k for k in keys if k not in doc]
    unknown = sorted(set(doc) - set(keys))
    if missing or unknown:
        said = [f"missing {', '.join(missing)}"] if missing else []
        said += [f"unknown {', '.join(unknown)}"] if unknown else []
        raise ConfigError(f"--cluster {path}: {'; '.join(said)} (the keys: {', '.join(keys)})")
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
    overlap_cost: float
    """Seconds added to the step per second of averaging that runs while backward does."""
    step_end_scale: float
    """Horovod's step end on a GPU node ÷ the host loop measured here: above 1 where the GPU's step end holds more
    than that loop (each handle's completion passes Horovod's finalizer thread, which waits on the host for its
    CUDA events, gpu_operations.cc), below 1 where the node's host is faster than this one."""


def constants(path: Path = CHECK) -> Constants:
    fitted = json.loads(path.read_text())["fitted"]
    return Constants(fitted["overlap_cost"]["value"], fitted["step_end_scale"]["value"])


def link(cluster: Cluster, bandwidth: float = 1.0) -> Link:
    """One allreduce over every GPU, as NCCL's ring: inside one node over NVLink, across nodes at the slower of the
    node's link and NVLink (the ring crosses each node's link once each way)."""
    intra = cluster.intra_node_busbw_gbyte_s * 1e9
    if cluster.nodes == 1:
        return Link(NVLINK_LATENCY_S, intra * bandwidth, cluster.gpus, FUSION_COPY_BYTES_PER_S)
    inter = cluster.inter_node_gbit_s * 1e9 / 8 * NIC_EFFICIENCY
    return Link(NIC_LATENCY_S, min(intra, inter) * bandwidth, cluster.gpus, FUSION_COPY_BYTES_PER_S)


def overlapped_s(schedule: Schedule) -> float:
    """The averaging's seconds that ran while backward still did."""
    return sum(max(0.0, min(a.end_s, schedule.backward_end_s) - a.start_s) for a in schedule.allreduces)


def steps(cluster: Cluster, shape: dict[str, Any], fitted: Constants, measured: Host, *, step: float = 1.0,
          bandwidth: float = 1.0, host_share: float = 1.0, copy_s: float = 0.0) -> dict[str, Any]:
    """Each backend's step on the cluster, in seconds, with its parts. `copy_s`: what a benchmark adds to Horovod's
    step alone (published rows only)."""
    one = cluster.batch_per_gpu / cluster.one_gpu_images_per_s * step
    forward, backward, optimizer = (share * one for share in shape["split"])
    grads = [Gradient(forward + s * backward, shape["bytes"][i], i) for i, s in shape["shares"].items()]
    net = link(cluster, bandwidth)
    native = schedule_replay.ddp(grads, forward + backward, net)
    horovod = schedule_replay.horovod_over_phases(grads, forward + backward, net,
                                                  negotiation_s=NEGOTIATION_S if cluster.gpus > 1 else 0.0)
    # Horovod registers its hooks, and so walks handles at the step's end, only past one rank (optimizer.py)
    alone = cluster.gpus == 1  # one rank averages nothing: the one-GPU figure is its step, whatever DDP adds in it
    block = 0.0 if alone else fitted.step_end_scale * host_share * measured.at(len(grads))
    parts = {}
    for name, schedule, extra in (("native", native, 0.0), ("horovod", horovod, block + copy_s)):
        overlap = 0.0 if alone else fitted.overlap_cost * overlapped_s(schedule)
        wait = 0.0 if alone else schedule.wait_s
        total = one + wait + overlap + extra
        parts[name] = {"step_s": total, "wait_s": wait, "overlap_s": overlap,
                       "allreduces": len(schedule.allreduces), "cycles": schedule.notes.get("cycles", 0)}
    parts["horovod"]["host_block_s"] = block
    parts["horovod"]["copy_s"] = copy_s
    parts["one_gpu_step_s"] = one
    return parts


def predict(cluster: Cluster, shape: dict[str, Any], fitted: Constants, measured: Host,
            copy_s: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> dict[str, Any]:
    """native and horovod's img/s per GPU and scaling efficiency, native ÷ Horovod with its range, and what decides
    it. `copy_s`: a benchmark's extra copy in Horovod's arm, (low, middle, high)."""
    middle = steps(cluster, shape, fitted, measured, copy_s=copy_s[1])
    # Horovod's host work and a benchmark's copy add to its step alone: their ends bound the ratio's
    spread = [steps(cluster, shape, fitted, measured, step=k, bandwidth=b, host_share=h, copy_s=c)
              for k in STEP_RANGE for b in LINK_RANGE for h, c in ((measured.low, copy_s[0]),
                                                                   (measured.high, copy_s[2]))]
    ratios = [s["horovod"]["step_s"] / s["native"]["step_s"] for s in spread]
    batch, one_rate = cluster.batch_per_gpu, cluster.one_gpu_images_per_s
    out: dict[str, Any] = {}
    for name in BACKENDS:
        per_gpu = batch / middle[name]["step_s"]
        # the range of img/s per GPU holds the one-GPU figure's own spread: it is the steps' range, not the scaling's
        out[name] = {"images_per_s_per_gpu": per_gpu, "scaling_efficiency": per_gpu / one_rate,
                     "images_per_s_per_gpu_range": [min(batch / s[name]["step_s"] for s in spread),
                                                    max(batch / s[name]["step_s"] for s in spread)],
                     "step_ms": 1000 * middle[name]["step_s"], "wait_ms": 1000 * middle[name]["wait_s"],
                     "overlap_ms": 1000 * middle[name]["overlap_s"], "allreduces": middle[name]["allreduces"],
                     "cycles": middle[name]["cycles"]}
    out["horovod"]["host_block_ms"] = 1000 * middle["horovod"]["host_block_s"]
    out["horovod"]["benchmark_copy_ms"] = 1000 * middle["horovod"]["copy_s"]
    value = middle["horovod"]["step_s"] / middle["native"]["step_s"]
    out["native_over_horovod"] = {"value": value, "low": min(ratios), "high": max(ratios)}
    out["deciding"] = deciding(middle)
    out["one_gpu_step_ms"] = 1000 * middle["one_gpu_step_s"]
    return out


def deciding(parts: dict[str, Any]) -> str:
    """The largest of the terms that set Horovod's step apart from DDP's, in words."""
    native, horovod = parts["native"], parts["horovod"]
    terms = {
        "Horovod's step end (synchronize() holds the host while the GPU idles)": horovod["host_block_s"],
        "the averaging's wait after backward (Horovod's cycle and negotiation, DDP's last bucket)":
            horovod["wait_s"] - native["wait_s"],
        "the averaging beside backward, which slows it": horovod["overlap_s"] - native["overlap_s"],
        "the benchmark's own copy in Horovod's arm (pageable memory)": horovod["copy_s"],
    }
    name, value = max(terms.items(), key=lambda kv: abs(kv[1]))
    if abs(horovod["step_s"] - native["step_s"]) < 1e-4 * native["step_s"]:
        return "nothing: the two steps are the same within 0.01 %"
    return (f"{name}, {1000 * value:+.2f} ms to Horovod's step beside DDP's (+ where Horovod pays more; the steps "
            f"{1000 * horovod['step_s']:.1f} and {1000 * native['step_s']:.1f} ms)")

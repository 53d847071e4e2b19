"""Native ÷ Horovod on GPU clusters this project cannot build: each framework's schedule replayed
(experiments/schedule_replay.py) over a backward shaped as a measured one, at 1 to 64 GPUs, 8 a node over NVLink,
and 100, 200 or 400 Gbit/s between nodes. Trains nothing.

    python -m experiments.predict_gpus docs/results/schedule-models --output docs/results/gpu-prediction

Every input that was assumed rather than measured is named in the output (ASSUMED):
- the backward's shape, each gradient's readiness as a share of backward, and the step's split into forward,
  backward and optimizer: measured, on this machine's CPU runs (their `schedule` and `phases_s`), until a GPU machine
  records one (make gpu-check);
- the step's length on one GPU: published (STEPS), scaled to the model's batch;
- the links: published NCCL bus bandwidths and latencies (LINKS), each a flag.
The range of native ÷ Horovod spans the links at ±25 % and the GPU step at ±20 %, and Horovod's cycle at each phase.
"""

import argparse
import itertools
import json
import logging
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from analysis import plots, runs, text
from contract import models, results
from contract.config import ConfigError
from experiments import schedule_replay
from experiments.schedule_replay import Gradient, Link
from runtime import cli

log = logging.getLogger(__name__)
FILE = "gpu-prediction.json"
CLASSES = 1000
"""ImageNet's classes: the measured runs' 10-class heads are scaled to it (the head's weight and bias, the last two
parameters registered, grow with the classes)."""
GPUS = (1, 8, 16, 64)
GPUS_PER_NODE = 8
RATES_GBIT = (100, 200, 400)
STEPS = {
    "resnet50": {"images_per_s": 2470.0, "batch": 256, "gpu": "A100 80GB", "precision": "mixed (AMP)",
                 "source": "NVIDIA DeepLearningExamples, PyTorch ResNet50 v1.5 README, 'Training performance: "
                           "NVIDIA DGX A100 (8x A100 80GB)', 1 GPU, mixed precision"},
    "vit_b_16": {"images_per_s": 2470.0 * 4.1 / 17.6, "batch": 256, "gpu": "A100 80GB", "precision": "mixed (AMP)",
                 "source": "ResNet-50's figure above scaled by forward FLOPs per 224 px image, 4.1 G against "
                           "ViT-B/16's 17.6 G (the ViT paper, Dosovitskiy et al. 2021, Table 6): derived, not "
                           "measured"},
}
"""One GPU's step, published: images per second at a batch per GPU. Both on an A100: an H100's step is shorter,
which leaves less of backward to hide the averaging behind."""
LINKS = {
    "nvlink_bytes_per_s": 360e9, "nvlink_latency_s": 5e-6,
    "nic_efficiency": 0.9, "nic_latency_s": 10e-6, "negotiation_s": 100e-6,
}
"""Assumed: NVLink's allreduce bus bandwidth inside an 8-GPU H100 node (nccl-tests all_reduce_perf, bus bandwidth,
about 360-480 GB/s on HGX H100: the lower end), its per-hop latency; a node's network link at 90 % of its rate; its
per-hop latency; Horovod's negotiation per cycle with the response cache (a bit vector over its control plane)."""
PUBLISHED = ("the ml-benchmarks comparison of ResNet-50 on 8 GPUs, DDP 5,862 against Horovod 5,252 img/s (native ÷ "
             "Horovod 1.12, quoted as the project's issue 56 gives it, its source not held here); the Horovod paper "
             "(Sergeev and Del Balso, 2018, arXiv:1802.05799): 88-90 % scaling efficiency for Inception V3 and "
             "ResNet-101 on 128 GPUs")


def shape(folder: Path, model: str) -> dict[str, Any]:
    """The measured backward of `model` in a comparison folder (or a grid's): each gradient's readiness as a share
    of backward, its bytes, and the step's split into forward, backward and optimizer, medians over the native
    runs that recorded a schedule."""
    found = [p.parent for p in folder.glob(f"**/{runs.COMPARISON}")]
    for each in found:
        comparison = runs.load(each)
        if comparison["settings"]["config"]["model"] != model:
            continue
        shares: dict[int, list[float]] = {}
        split: list[tuple[float, float, float]] = []
        sizes = None
        for run in comparison["runs"]:
            if run["status"] != "ok" or run["backend"] != "native" or run["arm"].startswith("ceiling"):
                continue
            doc = results.read(each / run["results"])
            schedule, parts = doc.get("schedule"), doc["epochs"][-1].get("phases_s")
            if not schedule or not parts:
                continue
            sizes = schedule["gradient_bytes"]
            start = parts["forward"]  # readiness is timed from the forward's start: backward starts after it
            # backward's compute ends with its last gradient: DDP's backward() returns only once the buckets are
            # averaged, so its own end would count the wait as compute
            length = max(schedule["ready_s"].values()) - start
            for i, at in schedule["ready_s"].items():
                shares.setdefault(int(i), []).append(max(0.0, at - start) / length)
            split.append((parts["forward"], parts["backward"], parts["optimizer"]))
        if shares and sizes:
            total = [statistics.median(s[k] for s in split) for k in range(3)]
            head = CLASSES / comparison["settings"]["config"]["num_classes"]
            sizes = [int(b * head) if i >= len(sizes) - 2 else b for i, b in enumerate(sizes)]
            return {"model": model, "shares": {i: statistics.median(v) for i, v in shares.items()},
                    "bytes": sizes, "split": [t / sum(total) for t in total], "from": str(each)}
    raise ConfigError(f"no native run of {model} in {folder} recorded its schedule and its step's parts; compare "
                      f"--model {model} with this version first")


def gradients(measured: dict[str, Any], backward_s: float, forward_s: float) -> list[Gradient]:
    return [Gradient(forward_s + share * backward_s, measured["bytes"][i], i)
            for i, share in measured["shares"].items()]


def topology(gpus: int, rate_gbit: float, bandwidth: float = 1.0) -> Link:
    """One allreduce over `gpus`: inside a node, NVLink; across nodes a ring whose slowest hop is a node's link."""
    if gpus <= GPUS_PER_NODE:
        return Link(LINKS["nvlink_latency_s"], LINKS["nvlink_bytes_per_s"] * bandwidth, gpus,
                    copy_bytes_per_s=1e12)
    return Link(LINKS["nic_latency_s"], rate_gbit * 1e9 / 8 * LINKS["nic_efficiency"] * bandwidth, gpus,
                copy_bytes_per_s=1e12)


def predict(measured: dict[str, Any], gpus: int, rate_gbit: float) -> dict[str, Any]:
    """Each backend's step and samples/s per GPU at `gpus`, the ratio and its range, and what makes it."""
    published = STEPS[measured["model"]]
    step = published["batch"] / published["images_per_s"]
    outcomes = []
    for compute, bandwidth in itertools.product((0.8, 1.0, 1.2), (0.75, 1.0, 1.25)):
        forward, backward, optimizer = (share * step * compute for share in measured["split"])
        grads = gradients(measured, backward, forward)
        link = topology(gpus, rate_gbit, bandwidth)
        native = schedule_replay.ddp(grads, forward + backward, link)
        horovod = schedule_replay.horovod_over_phases(grads, forward + backward, link,
                                                      negotiation_s=LINKS["negotiation_s"] if gpus > 1 else 0.0)
        end = forward + backward + optimizer
        outcomes.append(((compute, bandwidth), end + native.wait_s, end + horovod.wait_s, native, horovod))
    middle = next(o for o in outcomes if o[0] == (1.0, 1.0))
    ratios = [o[2] / o[1] for o in outcomes]
    _, native_step, horovod_step, native, horovod = middle
    batch = published["batch"]
    return {"model": measured["model"], "gpus": gpus, "rate_gbit": rate_gbit if gpus > GPUS_PER_NODE else None,
            "native_step_ms": 1000 * native_step, "horovod_step_ms": 1000 * horovod_step,
            "native_per_gpu": batch / native_step, "horovod_per_gpu": batch / horovod_step,
            "native_per_gpu_range": [batch / max(o[1] for o in outcomes), batch / min(o[1] for o in outcomes)],
            "horovod_per_gpu_range": [batch / max(o[2] for o in outcomes), batch / min(o[2] for o in outcomes)],
            "ratio": horovod_step / native_step, "range": [min(ratios), max(ratios)],
            "native_wait_ms": 1000 * native.wait_s, "horovod_wait_ms": 1000 * horovod.wait_s,
            "buckets": len(native.allreduces), "fused_buffers": len(horovod.allreduces),
            "horovod_cycles": horovod.notes["cycles"]}


def render(folder: Path) -> str | None:
    """gpu-prediction.md and gpu-prediction.png again from the folder's gpu-prediction.json alone (make docs)."""
    if not (folder / FILE).is_file():
        return None
    doc = json.loads((folder / FILE).read_text())
    written = markdown(doc)
    (folder / "gpu-prediction.md").write_text(written)
    plot(doc, folder / "gpu-prediction.png")
    return written


def markdown(doc: dict[str, Any]) -> str:
    steps, links = doc["assumed"]["steps"], doc["assumed"]["links"]
    head = ["model", "GPUs", "between nodes", "DDP img/s per GPU", "Horovod img/s per GPU", "native ÷ Horovod (range)",
            "DDP's wait, ms (buckets)", "Horovod's wait, ms (fused buffers, cycles)"]
    rows = [[r["model"], r["gpus"],
             f"{r['rate_gbit']:g} Gbit/s" if r["rate_gbit"] else "NVLink (one node)" if r["gpus"] > 1 else "—",
             f"{r['native_per_gpu']:,.0f}", f"{r['horovod_per_gpu']:,.0f}",
             f"{r['ratio']:.3f} ({r['range'][0]:.3f}–{r['range'][1]:.3f})",
             f"{r['native_wait_ms']:.1f} ({r['buckets']})",
             f"{r['horovod_wait_ms']:.1f} ({r['fused_buffers']}, {r['horovod_cycles']})"] for r in doc["rows"]]
    assumed = [f"- **{model}'s step on one GPU** (assumed): {s['images_per_s']:,.0f} img/s at batch {s['batch']} "
               f"on an {s['gpu']}, {s['precision']}: {s['source']}." for model, s in steps.items()]
    return "\n".join([
        "# Native DDP or Horovod on GPU clusters: each framework's schedule, replayed (predicted)", "",
        f"Made by `{doc['command']}`. Each framework's averaging schedule (docs/cluster.md) replayed over a backward "
        "shaped as this machine's CPU runs measured it, scaled to a published GPU step, at 8 GPUs a node over "
        "NVLink and 100-400 Gbit/s between nodes. Nothing here was measured on a GPU: every input below that says "
        "assumed is one. The range spans the links at ±25 % and the GPU step at ±20 %.", "",
        f"**Checked first** on the waits this machine measures: {doc['validation']}", "", text.md_table(head, rows), "",
        "**Inputs**", "",
        f"- **The backward's shape** (measured, on CPU): each gradient's readiness as a share of backward and the "
        "step's forward : backward : optimizer, from the native runs of "
        f"{', '.join(doc['measured_shapes_from'].values())}; each head scaled to {CLASSES} classes.", *assumed,
        f"- **NVLink** (assumed): an allreduce bus bandwidth of {links['nvlink_bytes_per_s'] / 1e9:.0f} GB/s inside "
        f"an 8-GPU node (nccl-tests' all_reduce_perf on HGX H100 reports about 360-480 GB/s), "
        f"{1e6 * links['nvlink_latency_s']:g} µs a hop.",
        f"- **Between nodes** (assumed): the node's link at {100 * links['nic_efficiency']:.0f} % of its rate, "
        f"{1e6 * links['nic_latency_s']:g} µs a hop; Horovod's negotiation {1e6 * links['negotiation_s']:g} µs a "
        "cycle (its response cache's bit vector over its control plane).", "",
        f"**Beside published results**: {doc['published']}. Their inputs differ: real data and models at 224 px on "
        "older GPUs, tuned fusion and cycle times.", "",
        "**What would change the verdict**: a GPU step shorter than assumed (an H100 is faster than the A100 the "
        "steps are from) leaves less backward to hide the averaging behind, which Horovod's cycle and negotiation "
        "pay first; a slower link between nodes does the same; a backward whose last gradients come later than this "
        "CPU's shape says exposes more of DDP's last bucket.", ""])


def plot(doc: dict[str, Any], path: Path) -> None:
    """Predicted img/s per GPU against GPUs, one panel per model, a line per backend and link, the range shaded."""
    plt = plots.pyplot()
    names = list(doc["assumed"]["steps"])
    fig, axes = plt.subplots(1, len(names), figsize=(6 * len(names), 4.2), squeeze=False)
    for ax, model in zip(axes[0], names):
        rows = [r for r in doc["rows"] if r["model"] == model]
        for rate in sorted({r["rate_gbit"] for r in rows if r["rate_gbit"]}):
            line = [r for r in rows if r["rate_gbit"] in (None, rate)]
            gpus = [r["gpus"] for r in line]
            for backend, style in (("native", "-"), ("horovod", "--")):
                ax.plot(gpus, [r[f"{backend}_per_gpu"] for r in line], style, marker="o",
                        label=f"{'DDP' if backend == 'native' else 'Horovod'}, {rate:g} Gbit/s")
                ax.fill_between(gpus, [r[f"{backend}_per_gpu_range"][0] for r in line],
                                [r[f"{backend}_per_gpu_range"][1] for r in line], alpha=0.08)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs (8 a node)")
        ax.set_ylabel("img/s per GPU (predicted)")
        ax.set_title(f"{model}, 224 px")
        ax.legend(fontsize=7)
    plots.save(fig, path)


def parser() -> cli.Parser:
    out = cli.Parser(description=__doc__.split("\n\n")[0], prog="python -m experiments.predict_gpus",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    out.add_argument("measured", type=Path, help="a folder of comparisons (or grids) whose native runs recorded "
                                                 "a schedule: resnet50 and vit_b_16")
    out.add_argument("--validation", type=Path, help="schedule_check's report of the same machine, quoted")
    out.add_argument("--output", type=Path, required=True, help="the folder to write gpu-prediction.json into")
    return out


def main() -> int:
    args = parser().parse_args()
    shapes = [shape(args.measured, model) for model in STEPS]
    rows = [predict(measured, gpus, rate) for measured in shapes for gpus in GPUS
            for rate in (RATES_GBIT if gpus > GPUS_PER_NODE else RATES_GBIT[:1])]
    said = "not checked (no --validation given)"
    if args.validation:
        said = next((line.replace("**", "") for line in args.validation.read_text().splitlines()
                     if line.startswith("**The replay matched")), said)
        if found := re.search(r"matched (\d+) of (\d+)", said):
            passed, points = map(int, found.groups())
            said += (f" That is {passed / points:.0%} of the points, against the 80 % that would earn this prediction "
                     "trust: " + ("met." if passed >= 0.8 * points else "not met here. On 2 CPU cores a rank's "
                                  "averaging shares the cores with its own backward, which the replay's link does not "
                                  "model: read the prediction as each framework's schedule, not as a validated "
                                  "forecast (docs/cluster.md)."))
    doc = {"schema_version": 1, "command": "python -m experiments.predict_gpus " + " ".join(sys.argv[1:]),
           "rows": rows, "assumed": {"steps": STEPS, "links": LINKS}, "validation": said,
           "measured_shapes_from": {s["model"]: s["from"] for s in shapes}, "published": PUBLISHED,
           "parameters": {m: models.parameters(m, image_size=224, num_classes=CLASSES) for m in STEPS}}
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / FILE).write_text(json.dumps(doc, indent=1) + "\n")
    log.info("%s", render(args.output))
    return 0


if __name__ == "__main__":
    cli.run(main)

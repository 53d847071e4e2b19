"""Native ÷ Horovod on GPU clusters this project cannot build: each framework's schedule replayed
(schedule_replay.py) over a backward shaped as a measured one, at 1 to 64 GPUs, 8 a node over NVLink,
and 100, 200 or 400 Gbit/s between nodes. Trains nothing.

    python -m experiments.gpu_model.predict_gpus docs/results/schedule-models --output docs/results/gpu-prediction
    python -m experiments.gpu_model.predict_gpus --cluster my-cluster.json --output my-prediction

With --cluster, your own cluster instead (docs/cluster.md, "Your cluster, predicted"): FILE is JSON with the keys
model, image_size, batch_per_gpu, precision (fp32, tf32, amp, bf16), one_gpu_images_per_s, gpus_per_node, nodes,
intra_node_busbw_gbyte_s and inter_node_gbit_s, and optionally one_gpu_images_per_s_low and _high (how far the one-GPU
figure may be off); experiments/gpu_model/gpu_cluster.py predicts it, with the constants fitted on published GPU runs
(docs/results/published-gpu/check.md), and writes prediction.json and prediction.md.

The output names every input that was assumed rather than measured: the backward's shape is measured on this
machine's CPU runs, the one-GPU step is published (STEPS), the links are assumed (LINKS).
"""

import argparse
import json
import logging
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from analysis import plots, runs, text
from contract import models, results
from contract.config import BACKENDS, ConfigError
from experiments.gpu_model import gpu_cluster
from runtime import cli

log = logging.getLogger(__name__)
FILE = "gpu-prediction.json"
COMMAND = "python -m experiments.gpu_model.predict_gpus "
REPO = Path(__file__).resolve().parents[2]
SHAPES = REPO / "docs" / "results" / "schedule-models"
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
    "nvlink_bytes_per_s": 360e9, "nvlink_latency_s": gpu_cluster.NVLINK_LATENCY_S,
    "nic_efficiency": gpu_cluster.NIC_EFFICIENCY, "nic_latency_s": gpu_cluster.NIC_LATENCY_S,
    "negotiation_s": gpu_cluster.NEGOTIATION_S,
}
"""Assumed: NVLink's allreduce bus bandwidth inside an 8-GPU H100 node (nccl-tests all_reduce_perf, bus bandwidth,
about 360-480 GB/s on HGX H100: the lower end); the rest as experiments/gpu_model/gpu_cluster.py assumes them."""
PUBLISHED = ("ml-benchmarks' 8 paired ResNet-50 runs on 2 nodes x 4 GPUs (docs/results/published-gpu): DDP ahead in "
             "all 8, native ÷ Horovod 1.067-1.160, against which experiments/gpu_model/published_check.py checks this "
             "model")


def shape(folder: Path, model: str) -> dict[str, Any]:
    """The measured backward of `model` in a comparison folder (or a grid's): each gradient's readiness as a share
    of backward, its bytes, and the step's split into forward, backward and optimizer, medians over the native
    runs that recorded a schedule."""
    for each in (p.parent for p in folder.glob(f"**/{runs.COMPARISON}")):
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
                    "bytes": sizes, "split": [t / sum(total) for t in total], "from": _shown(each)}
    raise ConfigError(f"no native run of {model} in {folder} recorded its schedule and its step's parts; compare "
                      f"--model {model} with this version first")


def _shown(path: Path) -> str:
    """A folder as the repository names it, where it is inside it."""
    return str(path.resolve().relative_to(REPO)) if path.resolve().is_relative_to(REPO) else str(path)


def predict(measured: dict[str, Any], gpus: int, rate_gbit: float) -> dict[str, Any]:
    """Each backend's step and samples/s per GPU at `gpus`, the ratio and each scaling with its range, and what makes
    it: the cluster of experiments/gpu_model/gpu_cluster.py at the published one-GPU step, 8 GPUs a node over NVLink."""
    published = STEPS[measured["model"]]
    cluster = gpu_cluster.Cluster(
        model=measured["model"], image_size=224, batch_per_gpu=published["batch"], precision="amp",
        one_gpu_images_per_s=published["images_per_s"], gpus_per_node=min(gpus, GPUS_PER_NODE),
        nodes=max(1, gpus // GPUS_PER_NODE), intra_node_busbw_gbyte_s=LINKS["nvlink_bytes_per_s"] / 1e9,
        inter_node_gbit_s=rate_gbit)
    made = _predicted(cluster, measured)
    native, horovod, ratio = made["native"], made["horovod"], made["native_over_horovod"]
    return {"model": measured["model"], "gpus": gpus, "rate_gbit": rate_gbit if gpus > GPUS_PER_NODE else None,
            "native_step_ms": native["step_ms"], "horovod_step_ms": horovod["step_ms"],
            **{f"{name}_{key}": made[name].get(field) for name in BACKENDS for key, field in (
                ("per_gpu", "images_per_s_per_gpu"), ("per_gpu_range", "images_per_s_per_gpu_range"),
                ("scaling", "scaling_efficiency"), ("scaling_range", "scaling_range"))},
            "ratio": ratio["value"], "range": [ratio["low"], ratio["high"]],
            **{f"{name}_{key}": made[name][key] for key in ("wait_ms", "overlap_ms") for name in BACKENDS},
            "horovod_host_block_ms": horovod["host_block_ms"], "deciding": made["deciding"],
            "buckets": native["allreduces"], "fused_buffers": horovod["allreduces"],
            "horovod_cycles": horovod["cycles"], "host_bound": made["host_bound"],
            "beyond_checked": made["beyond_checked"]}


def _predicted(cluster: gpu_cluster.Cluster, measured: dict[str, Any]) -> dict[str, Any]:
    """gpu_cluster's prediction of `cluster` over every fit of the published check, as far as that check reaches."""
    checked = gpu_cluster.checked()
    return gpu_cluster.limits(cluster, gpu_cluster.predict(cluster, measured, checked.fits, gpu_cluster.host()),
                              checked)


def render(folder: Path) -> str | None:
    """gpu-prediction.md and gpu-prediction.png again from the folder's gpu-prediction.json alone (make docs)."""
    if not (folder / FILE).is_file():
        return None
    doc = json.loads((folder / FILE).read_text())
    written = markdown(doc)
    (folder / "gpu-prediction.md").write_text(written)
    plot(doc, folder / "gpu-prediction.png")
    return written


def _scaling(value: float | None, span: list[float] | None) -> str:
    return "none: host-bound" if value is None else f"{value:.3f} ({span[0]:.3f}–{span[1]:.3f})"


def markdown(doc: dict[str, Any]) -> str:
    steps, links = doc["assumed"]["steps"], doc["assumed"]["links"]
    head = ["model", "GPUs", "between nodes", "within what was checked", "DDP's scaling (range)",
            "Horovod's scaling (range)", "native ÷ Horovod (range)", "DDP's wait, ms (buckets)",
            "Horovod's wait, ms (fused buffers, cycles)", "averaging beside backward, ms added (DDP / Horovod)",
            "Horovod's step end, ms"]
    rows = [[r["model"], r["gpus"],
             f"{r['rate_gbit']:g} Gbit/s" if r["rate_gbit"] else "NVLink (one node)" if r["gpus"] > 1 else "—",
             "no: " + "; ".join(r["beyond_checked"]) if r["beyond_checked"] else "yes",
             _scaling(r["native_scaling"], r["native_scaling_range"]),
             _scaling(r["horovod_scaling"], r["horovod_scaling_range"]),
             f"{r['ratio']:.3f} ({r['range'][0]:.3f}–{r['range'][1]:.3f})",
             f"{r['native_wait_ms']:.1f} ({r['buckets']})",
             f"{r['horovod_wait_ms']:.1f} ({r['fused_buffers']}, {r['horovod_cycles']})",
             f"{r['native_overlap_ms']:.1f} / {r['horovod_overlap_ms']:.1f}", f"{r['horovod_host_block_ms']:.1f}"]
            for r in doc["rows"]]
    assumed = [f"- **{model}'s step on one GPU** (assumed): {s['images_per_s']:,.0f} img/s at batch {s['batch']} "
               f"on an {s['gpu']}, {s['precision']}: {s['source']}." for model, s in steps.items()]
    bound = sorted({r["model"] for r in doc["rows"] if r["host_bound"]})
    said = next((r["host_bound"] for r in doc["rows"] if r["host_bound"]), "")
    check = doc["published_check"]
    return "\n".join([
        "# Native DDP or Horovod on GPU clusters (predicted)", "",
        f"Made by `{doc['command']}`. experiments/gpu_model/gpu_cluster.py at 1 to 64 GPUs, 8 a node over NVLink and "
        "100-400 Gbit/s between nodes: each framework's averaging schedule (docs/cluster.md) replayed over a backward "
        "shaped as this machine's CPU runs measured it, scaled to a published GPU step, plus what a GPU host adds "
        "(the averaging beside backward slows it; Horovod's step end holds the host while the GPU idles). Nothing "
        "here was measured on a GPU: every input below that says assumed is one. Each range spans every fit of the "
        "published check (each cluster left out in turn, the links' bandwidths at ±25 % and latencies at half and "
        "twice) and the host's measured step end over its 95 % interval; the one-GPU step is the published one, "
        "as given.", "",
        f"**Checked against published GPU runs** ([check](../published-gpu/check.md)): {check}", "",
        f"**Bound by the host**: {', '.join(bound) if bound else 'no model'} past one GPU, where {said}: no scaling "
        "is given there, and native ÷ Horovod leaves out what each framework's host adds to such a step." if bound
        else "**Bound by the host**: no row.", "",
        f"**Checked on the waits this machine measures**: {doc['validation']}", "",
        text.md_table(head, rows), "",
        "**Inputs**", "",
        f"- **The backward's shape** (measured, on CPU): each gradient's readiness as a share of backward and the "
        "step's forward : backward : optimizer, from the native runs of "
        f"{', '.join(doc['measured_shapes_from'].values())}; each head scaled to {CLASSES} classes.", *assumed,
        f"- **NVLink** (assumed): an allreduce bus bandwidth of {links['nvlink_bytes_per_s'] / 1e9:.0f} GB/s inside "
        f"an 8-GPU node (nccl-tests' all_reduce_perf on HGX H100 reports about 360-480 GB/s), "
        f"{1e6 * links['nvlink_latency_s']:g} µs a hop.",
        f"- **Between nodes** (assumed): the node's link at {100 * links['nic_efficiency']:.0f} % of its rate, "
        f"{1e6 * links['nic_latency_s']:g} µs a hop of a ring (NCCL's trees, which it takes for small messages "
        "across many nodes, would cost fewer hops: at 64 GPUs Horovod's many small buffers pay this most); "
        f"Horovod's negotiation {1e6 * links['negotiation_s']:g} µs a cycle (its response cache's bit vector over "
        "its control plane).",
        "- **Fitted on published runs** (the calibration fit, docs/results/published-gpu): "
        + ", ".join(f"`{name}` {value:.3f}" for name, value in doc["constants"].items()) + "; the other fits the "
        "ranges span are on the check's page.", "",
        f"**Beside published results**: {doc['published']}.", "",
        f"**What decides each row**: {deciders(doc['rows'])}. Where Horovod's step end decides, a shorter GPU step (an "
        "H100 in place of the A100 the steps are from) raises native ÷ Horovod, since that end is host time that "
        "does not shrink with the GPU's; a slower link between nodes lowers both backends' scaling, the averaging "
        "beside backward costing each more. Where the averaging beside backward decides, Horovod's fused buffers "
        "are many and small and each pays a ring's latency across every GPU: that rests on `overlap_cost`, fitted "
        "on 2 nodes, and on the ring, which NCCL replaces with trees across many nodes (fewer hops), so those rows "
        "overstate DDP's lead. No row past 8 GPUs is within what a published row or measurement covers.", ""])


def deciders(rows: list[dict[str, Any]]) -> str:
    """Which term decides how many of the rows past one GPU, in words."""
    counts: dict[str, list[str]] = {}
    for r in rows:
        if r["gpus"] > 1:
            counts.setdefault(r["deciding"].split(",")[0].split(":")[0], []).append(f"{r['model']} at {r['gpus']}")
    return "; ".join(f"{name} on {len(where)} of them ({', '.join(sorted(set(where)))} GPUs)"
                     for name, where in counts.items())


def plot(doc: dict[str, Any], path: Path) -> None:
    """Predicted native ÷ Horovod against GPUs, one panel per model, a line per link, the range shaded."""
    plt = plots.pyplot()
    names = list(doc["assumed"]["steps"])
    fig, axes = plt.subplots(1, len(names), figsize=(6 * len(names), 4.2), squeeze=False)
    for ax, model in zip(axes[0], names):
        rows = [r for r in doc["rows"] if r["model"] == model]
        for rate in sorted({r["rate_gbit"] for r in rows if r["rate_gbit"]}):
            line = [r for r in rows if r["rate_gbit"] in (None, rate)]
            gpus = [r["gpus"] for r in line]
            ax.plot(gpus, [r["ratio"] for r in line], marker="o", label=f"{rate:g} Gbit/s between nodes")
            ax.fill_between(gpus, [r["range"][0] for r in line], [r["range"][1] for r in line], alpha=0.08)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs (8 a node)")
        ax.set_ylabel("native ÷ Horovod (predicted)")
        ax.set_title(f"{model}, 224 px")
        ax.legend(fontsize=7)
    plots.save(fig, path)


def published() -> tuple[str, dict[str, float]]:
    """The published check's validation in one sentence, and its calibration fit's constants, from its check.json."""
    check = json.loads(gpu_cluster.CHECK.read_text())
    v, bar = check["validation"], check["bar"]
    left = "; ".join(f"{name} left out, the fit on {o['fit']} put native ÷ Horovod within the bar on "
                     f"{o['met']['ratio']} of {o['paired']} and DDP's scaling on {o['met']['ddp_scaling']} of "
                     f"{o['rows']}" for name, o in check["left_out"].items())
    return (f"on the {v['rows']} validation rows the calibration fit saw none of (those bound by the host left out), "
            f"native ÷ Horovod within {100 * bar['ratio']:.0f} % on {v['met']['ratio']} of {v['paired']}, the "
            f"largest error {100 * v['worst']['ratio_error']:.1f} %; DDP's scaling within "
            f"{100 * bar['scaling']:.0f} points on {v['met']['ddp_scaling']} of {v['rows']}, the largest error "
            f"{100 * v['worst']['ddp_scaling_error']:.1f} points. Each cluster left out: {left}.",
            {name: c["value"] for name, c in check["fitted"].items()})


def cluster_page(doc: dict[str, Any]) -> str:
    """prediction.md: the same figures as prediction.json, for a reader."""
    c, ratio = doc["cluster"], doc["native_over_horovod"]
    rows = [[("DDP" if name == "native" else "Horovod"),
             _scaling(doc[name].get("scaling_efficiency"), doc[name].get("scaling_range")),
             f"{doc[name]['wait_ms']:.2f}", f"{doc[name]['overlap_ms']:.2f}",
             f"{doc[name].get('host_block_ms', 0.0):.2f}"] for name in BACKENDS]
    rates = [c.get("one_gpu_images_per_s_low"), c.get("one_gpu_images_per_s_high")]
    given = (f" ({rates[0] or c['one_gpu_images_per_s']:,.0f} to {rates[1] or c['one_gpu_images_per_s']:,.0f}, as "
             "you gave it)" if any(rates) else " (as given: the range does not vary it)")
    return "\n".join([
        f"# {c['model']} on {c['nodes']} x {c['gpus_per_node']} GPUs at batch {c['batch_per_gpu']}, "
        f"{c['precision']}: native DDP or Horovod (predicted)", "",
        f"Made by `{doc['command']}`. One GPU trains {c['one_gpu_images_per_s']:,.0f} img/s{given} at batch "
        f"{c['batch_per_gpu']} ({c['precision']}, {c['image_size']} px); inside a node NCCL's bus bandwidth is "
        f"{c['intra_node_busbw_gbyte_s']:g} GB/s, between nodes {c['inter_node_gbit_s']:g} Gbit/s.", "",
        *([f"**Beyond what was checked**: {'; '.join(doc['beyond_checked'])}. The figures below are the model's "
           "extrapolation, checked on nothing this large.", ""] if doc["beyond_checked"] else []),
        f"**native ÷ Horovod: {ratio['value']:.3f}** (range {ratio['low']:.3f}–{ratio['high']:.3f}). Deciding: "
        f"{doc['deciding']}.", "",
        *([f"**Bound by the host**: {doc['host_bound']}. No scaling is given: past that rate the host (the loader, "
           "the kernels' launches, each framework's hooks) bounds the step, which the model does not see, and "
           "native ÷ Horovod leaves out what each framework's host adds to it.", ""] if doc["host_bound"] else []),
        text.md_table(["backend", "scaling efficiency (range)", "wait after backward, ms",
                       "averaging beside backward, ms added", "host's step end, ms"], rows), "",
        "**How far to trust it**: the constants were fitted on ml-benchmarks' ResNet-50 runs on mahti (A100, 2 nodes "
        f"x 4). The published check (docs/results/published-gpu/check.md): {doc['checked_against']} The backward's "
        f"shape is this project's CPU run of "
        f"{c['model']} ({doc['shape_from']}). The ranges span every fit of the published check (each cluster left "
        "out in turn, the links' bandwidths at ±25 % and latencies at half and twice), your one-GPU figure as far "
        "as you gave its range, and the host's measured step end over its 95 % interval.", ""])


def cluster_main(args: argparse.Namespace) -> int:
    cluster = gpu_cluster.load(args.cluster)
    recorded = sorted(p.name.removeprefix("model-") for p in args.measured.glob("model-*"))
    if not recorded:
        raise ConfigError(f"{args.measured} holds no recorded backward (model-*/ folders of a comparison): name "
                          "docs/results/schedule-models, or leave it out")
    if cluster.model not in recorded:
        raise ConfigError(f"--cluster {args.cluster}: no backward of {cluster.model} is recorded in {args.measured}; "
                          f"model may be one of {', '.join(recorded)}")
    shape_of = shape(args.measured, cluster.model)
    said, constants = published()
    doc = {"schema_version": 2, "command": COMMAND + " ".join(sys.argv[1:]), "cluster": cluster.given(),
           **_predicted(cluster, shape_of), "shape_from": shape_of["from"], "constants": constants,
           "checked_against": said}
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "prediction.json").write_text(json.dumps(doc, indent=1) + "\n")
    page = cluster_page(doc)
    (args.output / "prediction.md").write_text(page)
    log.info("%s", page)
    return 0


def _folder(text: str) -> Path:
    if not text.strip():  # Path("") is the current folder: an empty --output is a slip, not a choice
        raise argparse.ArgumentTypeError("is empty: name a folder for the prediction")
    return Path(text)


def parser() -> cli.Parser:
    out = cli.Parser(description=__doc__.split("\n\n")[0], prog=COMMAND.strip(),
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    out.add_argument("measured", type=Path, nargs="?", default=SHAPES,
                     help="a folder of comparisons (or grids) whose native runs recorded a schedule: resnet50 and "
                          "vit_b_16 (default: the committed docs/results/schedule-models)")
    out.add_argument("--cluster", type=Path, help="your cluster as JSON (the keys above): predict it alone")
    out.add_argument("--validation", type=Path, help="schedule_check's report of the same machine, quoted")
    out.add_argument("--output", type=_folder, required=True, help="the folder to write the prediction into")
    return out


def main() -> int:
    args = parser().parse_args()
    if args.output.exists() and not args.output.is_dir():
        raise ConfigError(f"--output {args.output} is a file: name a folder for the prediction")
    if args.cluster:
        if args.validation:
            raise ConfigError("--validation checks the grid, not --cluster: a cluster's check is the published "
                              "runs' (docs/results/published-gpu/check.md); leave --validation out")
        return cluster_main(args)
    shapes = [shape(args.measured, model) for model in STEPS]
    rows = [predict(measured, gpus, rate) for measured in shapes for gpus in GPUS
            for rate in (RATES_GBIT if gpus > GPUS_PER_NODE else RATES_GBIT[:1])]
    said = "not checked (no --validation given)"
    if args.validation:
        if not args.validation.is_file():
            raise ConfigError(f"--validation {args.validation} is not a file: name schedule_check's report "
                              "(docs/results/schedule-check.md)")
        said = next((line.replace("**", "") for line in args.validation.read_text().splitlines()
                     if line.startswith("**The replay matched")), said)
        if re.search(r"matched (\d+) of (\d+)", said):
            said += (" The published GPU runs above are this prediction's check: on 2 CPU cores a rank's averaging "
                     "shares the cores with its own backward, and few waits here are measured precisely enough to "
                     "judge a model by (docs/cluster.md).")
    checked, constants = published()
    doc = {"schema_version": 1, "command": COMMAND + " ".join(sys.argv[1:]), "rows": rows,
           "assumed": {"steps": STEPS, "links": LINKS}, "validation": said,
           "measured_shapes_from": {s["model"]: s["from"] for s in shapes}, "published": PUBLISHED,
           "published_check": checked, "constants": constants,
           "parameters": {m: models.parameters(m, image_size=224, num_classes=CLASSES) for m in STEPS}}
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / FILE).write_text(json.dumps(doc, indent=1) + "\n")
    log.info("%s", render(args.output))
    return 0


if __name__ == "__main__":
    cli.run(main)

"""Render a comparison (report.md, loss.png, throughput.png) from comparison.json alone."""

import json
import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; no display on servers or in CI
import matplotlib.pyplot as plt  # noqa: E402

COMPARISON = "comparison.json"
ORDER = ("reference", "global-batch", "native", "horovod", "dataparallel")
BN_NOTE = (
    "BatchNorm buffers (running mean and variance) are not gradients, so neither backend averages them. "
    "DDP broadcasts rank 0's buffers at the start of every forward pass, so each rank ends with rank 0's "
    "buffers plus one update from its own last batch; Horovod broadcasts them once, before training, and each "
    "rank then keeps its own running statistics. Training losses do not depend on the buffers (training mode "
    "normalises with batch statistics), but evaluation does: every rank scores its share of the test set "
    "with its own buffers, so test loss and accuracy may differ slightly between the backends even though "
    "their parameters agree. The `buffers identical` column says whether the ranks' buffers matched at the end."
)


def load(run_dir: str | Path) -> dict[str, Any]:
    return json.loads((Path(run_dir) / COMPARISON).read_text())


def render(run_dir: str | Path) -> str:
    """Write report.md, loss.png and throughput.png into run_dir from its comparison.json; return the Markdown."""
    run_dir = Path(run_dir)
    comparison = load(run_dir)
    markdown = report_markdown(comparison)
    (run_dir / "report.md").write_text(markdown)
    plot_losses(comparison, run_dir / "loss.png")
    plot_throughput(comparison, run_dir / "throughput.png")
    return markdown


def rows(comparison: dict[str, Any], workers: int) -> list[dict[str, Any]]:
    """One row of figures per finished run at `workers`, the timing from its last epoch."""
    target = comparison["settings"]["target_accuracy"]
    single = {r["backend"]: total_rate(r) for r in comparison["runs"] if r["status"] == "ok" and r["workers"] == 1}
    out = []
    for run in comparison["runs"]:
        if run["workers"] != workers or run["status"] != "ok":
            continue
        last = run["epochs"][-1]
        elapsed, reached = 0.0, None
        for epoch in run["epochs"]:
            elapsed += epoch["epoch_time_s"]
            if reached is None and epoch["test_accuracy"] >= target:
                reached = elapsed
        base = single.get(run["backend"])
        distributed = run["backend"] in ("native", "horovod")
        out.append({
            "backend": run["backend"],
            "train_loss": last["train_loss"],
            "test_accuracy": last["test_accuracy"],
            "per_worker": (last["samples_per_s_per_worker"], last["samples_per_s_per_worker_ci95"]),
            "total": total_rate(run),
            "epoch_time_s": last["epoch_time_s"],
            "p50_ms": 1000 * last["step_time_p50_s"],
            "p95_ms": 1000 * last["step_time_p95_s"],
            "comm_share": last["comm_share"],
            "time_to_target_s": reached,
            "peak_rss_mb": max(run["peak_rss_mb_per_worker"]),
            "scaling": total_rate(run) / (workers * base) if distributed and base else None,
            "buffers_identical": run["buffers_identical_across_ranks"],
        })
    return out


def total_rate(run: dict[str, Any]) -> float:
    return run["epochs"][-1]["samples_per_s"]


def table(comparison: dict[str, Any], workers: int) -> str:
    target = comparison["settings"]["target_accuracy"]
    head = (f"| backend | final train loss | test accuracy | samples/s per worker (mean ± 1.96σ) | samples/s total "
            f"| epoch time | step p50 / p95 | comm share | time to {100 * target:g}% | peak RSS per worker "
            "| scaling efficiency | buffers identical |")
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in rows(comparison, workers):
        rate, ci = r["per_worker"]
        reached = f"{r['time_to_target_s']:.1f} s" if r["time_to_target_s"] is not None else "not reached"
        scaling = f"{100 * r['scaling']:.0f}%" if r["scaling"] is not None else "—"
        lines.append(
            f"| {r['backend']} | {r['train_loss']:.4f} | {100 * r['test_accuracy']:.2f}% | {rate:.0f} ± {ci:.0f} "
            f"| {r['total']:.0f} | {r['epoch_time_s']:.1f} s | {r['p50_ms']:.1f} / {r['p95_ms']:.1f} ms "
            f"| {100 * r['comm_share']:.1f}% | {reached} | {r['peak_rss_mb']:.0f} MB | {scaling} "
            f"| {'yes' if r['buffers_identical'] else 'no'} |"
        )
    return "\n".join(lines)


def report_markdown(comparison: dict[str, Any]) -> str:
    s = comparison["settings"]
    env = comparison["environment"]
    cfg = s["config"]
    out = [
        f"# Native DDP or Horovod? Comparison {comparison['run_id']}",
        "",
        f"Dataset **{cfg['dataset']}**, {cfg['epochs']} epoch(s), batch {cfg['batch_size']} per worker, SGD lr "
        f"{cfg['lr']} momentum {cfg['momentum']}, seed {cfg['seed']}, {cfg['threads_per_worker']} torch thread(s) "
        f"per worker; the same initial weights and DistributedSampler shards in every run.",
        "",
        f"Environment: Python {env['python']}, torch {env['torch']}, torchvision {env['torchvision']}, "
        f"Ray {env['ray']}, Horovod {env['horovod']}; CPU {env['cpu']} ({env['cpu_count']} cores); "
        f"GPU {env['gpu'] or 'none'}.",
        "",
        "`reference` is one process running each step's per-worker micro-batches one after another and averaging "
        "their gradients (with 1 worker: the tutorials' single-process baseline); `global-batch` is one forward "
        "pass over the same global batch (BatchNorm over all of it; information only). Timing columns are from the "
        f"last epoch with the first {cfg['warmup_steps']} steps of each epoch left out; comm share is the time "
        "spent waiting for averaged gradients after the local backward pass finished; time to target accuracy "
        "counts training time (no evaluation) up to the end of the first epoch that reached it. Scaling "
        "efficiency is total samples/s over workers × the same backend's 1-worker samples/s.",
    ]
    for workers in s["workers"]:
        out += ["", f"## {workers} worker(s)", "", table(comparison, workers)]
        parity = comparison["parity"].get(str(workers))
        if parity:
            out += ["", f"**Parity: {parity['verdict']}** — largest |step-loss difference| over the first "
                        f"{parity['steps']} steps, tolerance {parity['tolerance']:g}"
                        + (f" ({parity['why']})" if parity["why"] else "") + ":", ""]
            for pair, diff in parity["max_abs_step_loss_difference"].items():
                out.append(f"- {pair}: {diff:.3g}")
            for pair, diff in parity["informational"].items():
                out.append(f"- {pair} (information, not part of the verdict): {diff:.3g}")
    if comparison["not_applicable"]:
        out += ["", "## Not applicable here", ""]
        out += [f"- {n['backend']} with {n['workers']} worker(s): {n['reason']}" for n in comparison["not_applicable"]]
    failed = [r for r in comparison["runs"] if r["status"] != "ok"]
    if failed:
        out += ["", "## Failed runs", ""]
        out += [f"- {r['backend']} with {r['workers']} worker(s): {r['error']}" for r in failed]
    out += ["", "## BatchNorm buffers and evaluation", "", BN_NOTE, "",
            "Plots: `loss.png` (loss per step, every backend overlaid), `throughput.png` (samples/s by backend and "
            "worker count).", ""]
    return "\n".join(out)


def plot_losses(comparison: dict[str, Any], path: Path) -> None:
    counts = comparison["settings"]["workers"]
    fig, axes = plt.subplots(1, len(counts), figsize=(6 * len(counts), 4), squeeze=False)
    for ax, workers in zip(axes[0], counts):
        for run in comparison["runs"]:
            if run["workers"] == workers and run["status"] == "ok":
                ax.plot(range(1, len(run["step_losses"]) + 1), run["step_losses"], label=run["backend"],
                        linewidth=1, alpha=0.8)
        ax.set(title=f"{workers} worker(s): lines overlap where the losses agree", xlabel="step",
               ylabel="training loss (mean over ranks)", yscale="log")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_throughput(comparison: dict[str, Any], path: Path) -> None:
    counts = comparison["settings"]["workers"]
    finished = {r["backend"] for r in comparison["runs"] if r["status"] == "ok"}
    backends = [b for b in ORDER if b in finished]
    fig, ax = plt.subplots(figsize=(2 + 2 * len(counts) * max(1, len(backends)) / 2, 4))
    width = 0.8 / max(1, len(backends))
    by_count = [rows(comparison, workers) for workers in counts]
    for i, backend in enumerate(backends):
        xs, ys, errs = [], [], []
        for j, count_rows in enumerate(by_count):
            for r in count_rows:
                if r["backend"] == backend:
                    xs.append(j + i * width)
                    ys.append(r["total"])
                    rate, ci = r["per_worker"]
                    errs.append(ci * r["total"] / rate if rate and not math.isnan(ci) else 0)
        ax.bar(xs, ys, width, yerr=errs, label=backend, capsize=3)
    ax.set_xticks([j + width * (len(backends) - 1) / 2 for j in range(len(counts))], [f"{w} worker(s)" for w in counts])
    ax.set(ylabel="samples/s (total, last epoch)", title="Throughput by backend and worker count")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)

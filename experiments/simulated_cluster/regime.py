"""The regime report of a link sweep (link_sweep.py): for each link rate and model width, each backend's
steady-state throughput, comm share and achieved link rate, native ÷ Horovod, and where the winner changes; and
network.png. Read from the sweep's JSON alone, so `compare --render <sweep>` redraws it.
"""

import itertools
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from analysis import plots, report, runs, speed, stats, text, tuning
from contract.config import BACKENDS, ConfigError
from experiments.simulated_cluster import netsim

NETWORK = "network.json"
SCHEMA_VERSION = 1


def dumps(network: dict[str, Any]) -> str:
    return json.dumps(network, separators=(",", ":"))


def load(sweep_dir: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """network.json, and one entry per (rate, width) with its comparison: {rate, bits, width, comparison}."""
    sweep_dir = Path(sweep_dir)
    try:
        network = json.loads((sweep_dir / NETWORK).read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(f"{sweep_dir / NETWORK} cannot be read ({error}); pass a folder written by "
                          "compare --simulate-nodes") from None
    if not (isinstance(network, dict) and isinstance(network.get("rates"), list) and all(
            isinstance(r, dict) and {"folder", "link_rate", "link_bits_per_s"} <= set(r) for r in network["rates"])):
        raise ConfigError(f"{sweep_dir / NETWORK} is not a sweep's record (it lacks its rates, or a rate its folder); "
                          "pass a folder written by compare --simulate-nodes")
    for rate in network["rates"]:  # the fit reads the bits, the reports the name: they must say the same
        if not isinstance(rate["link_rate"], str) or rate["link_bits_per_s"] != netsim.bits_per_s(rate["link_rate"]):
            raise ConfigError(f"{sweep_dir / NETWORK} is damaged: its rate {rate['link_rate']!r} records "
                              f"{rate['link_bits_per_s']!r} bit/s, which is not that rate; rerun that sweep")
    cells = []
    for rate in network["rates"]:
        folder = sweep_dir / rate["folder"]
        if (folder / tuning.GRID).exists():
            grid, comparisons = tuning.load(folder)
            found = [(model_key(s), comparisons[s["folder"]]) for s in grid["settings"]]
        elif (folder / runs.COMPARISON).exists():
            comparison = runs.load(folder)
            found = [(model_key(comparison["settings"]["config"]), comparison)]
        else:
            found = []  # the run at this rate failed before it wrote anything; network.json keeps its exit code
        cells += [{"rate": rate["link_rate"], "bits": rate["link_bits_per_s"], "width": width,
                   "comparison": comparison} for width, comparison in found]
    return network, cells


def model_key(settings: dict[str, Any]) -> int | str:
    """A cell's model: the ConvNet's width, or a registry model's name."""
    model = settings.get("model", "convnet")
    return settings.get("model_width", 1) if model == "convnet" else model


def model_order(key: int | str) -> tuple[bool, str]:
    """ConvNet widths first, by size, then models by name."""
    return (isinstance(key, str), f"{key:>8}" if isinstance(key, int) else key)


def label(key: int | str) -> str:
    return f"width {key}" if isinstance(key, int) else key


def rate_order(network: dict[str, Any]) -> list[str]:
    """Slowest first, unshaped last."""
    return [r["link_rate"] for r in sorted(network["rates"], key=lambda r: r["link_bits_per_s"] or float("inf"))]


def rows(cells: list[dict[str, Any]], workers: int) -> list[dict[str, Any]]:
    out = []
    for cell in cells:
        by_arm = runs.finished(cell["comparison"], workers)
        answer = cell["comparison"]["speed"].get(str(workers))
        for backend in BACKENDS:
            arm_runs = by_arm.get(backend, [])
            if not arm_runs:
                continue
            mean, interval = stats.mean_interval([r[speed.METRIC] for r in arm_runs])
            last = [r["epochs"][-1] for r in arm_runs]
            link = [sent_per_node(r, r["epochs"][-1]) for r in arm_runs if "link" in r["epochs"][-1]]
            nodes = sorted({len({p["node_id"] for p in r.get("placement", [])}) for r in arm_runs})
            out.append({"rate": cell["rate"], "bits": cell["bits"], "width": cell["width"], "backend": backend,
                        "mean": mean, "ci95": interval, "runs": len(arm_runs),
                        "comm_share": statistics.fmean(e["comm_share"] for e in last),
                        "link_bytes_per_s": statistics.fmean(link) if link else None,
                        "nodes": nodes, "native_over_horovod": answer if backend == "native" else None})
    return out


def sent_per_node(run: dict[str, Any], epoch: dict[str, Any]) -> float:
    """Bytes per second each node sent on its link in the epoch, averaged over nodes. Every rank reads its network
    namespace's counter, which the ranks of one node share: each node is counted once, at its first rank."""
    first_rank: dict[str, int] = {}
    for place in run.get("placement") or [{"node_id": str(r), "rank": r} for r in range(run["workers"])]:
        first_rank.setdefault(place["node_id"], place["rank"])
    sent = epoch["link"]["sent_bytes_per_rank"]
    return statistics.fmean(sent[rank] for rank in first_rank.values()) / max(epoch["epoch_time_s"], 1e-12)


def table(cells: list[dict[str, Any]], workers: int, order: list[str]) -> str:
    head = ["link rate", "width", "backend", "steady samples/s, mean (95 % CI), runs", "comm share",
            "sent on the link, per node", "nodes used", "native ÷ Horovod, paired (95 % CI)", "verdict"]
    body = []
    for row in sorted(rows(cells, workers), key=lambda r: (model_order(r["width"]), order.index(r["rate"]),
                                                           BACKENDS.index(r["backend"]))):
        interval = (f"{row['mean']:.0f} ({row['ci95'][0]:.0f}–{row['ci95'][1]:.0f}), n={row['runs']}"
                    if row["ci95"] else f"{row['mean']:.0f}, n={row['runs']}")
        link = "—" if row["link_bytes_per_s"] is None else text.rate(row["link_bytes_per_s"] * 8)
        answer = row["native_over_horovod"]
        body.append([row["rate"], row["width"], row["backend"], interval, f"{100 * row['comm_share']:.0f} %", link,
                      ", ".join(map(str, row["nodes"])), report.ratio_text(answer) if answer else "",
                      report.decision(answer) if answer else ""])
    return text.md_table(head, body)


def winners(cells: list[dict[str, Any]], workers: int, order: list[str]) -> list[str]:
    """One sentence per width: the verdict at each rate, slowest first, and where it changes."""
    out = []
    for width in sorted({c["width"] for c in cells}, key=model_order):
        verdicts = []
        for rate in order:
            cell = next((c for c in cells if c["width"] == width and c["rate"] == rate), None)
            answer = cell and cell["comparison"]["speed"].get(str(workers))
            verdicts.append((rate, answer["verdict"] if answer else "not measured"))
        said = "; ".join(f"{rate}: {verdict}" for rate, verdict in verdicts)
        # The measured verdicts from the slowest link up, a run of equal verdicts named once with its rates.
        measured = [(rate, verdict) for rate, verdict in verdicts if verdict != "not measured"]
        stretches = [(verdict, [rate for rate, _ in run])
                     for verdict, run in itertools.groupby(measured, key=lambda pair: pair[1])]
        if not stretches:
            summary = "no rate was measured with both backends"
        elif len(stretches) > 1:
            summary = "the verdict changes with the link: " + " → ".join(
                f"{verdict} ({', '.join(rates)})" for verdict, rates in stretches)
        else:
            summary = f"the verdict is the same at every rate measured ({stretches[0][0]})"
        out.append(f"- {label(width)}: {said}. So {summary}.")
    return out


def markdown(network: dict[str, Any], cells: list[dict[str, Any]], sizes: Callable[[int], dict[str, int]]) -> str:
    """`sizes(width)`: the network's parameters and gradient bytes at that width (workload/model.py counts them, with
    torch, which this package does not import)."""

    order = rate_order(network)
    first = cells[0]["comparison"]["settings"] if cells else {"workers": [], "repeats": 0}
    widths = sorted({c["width"] for c in cells}, key=model_order)
    joined = ("joined by a veth pair" if network["nodes"] == 2 else "each joined by a veth pair to one bridge, as to "
              "a switch")
    out = [f"# Native DDP or Horovod across a link: sweep {network['sweep_id']}", "",
           f"{network['nodes']} simulated nodes, each a network namespace with one interface, {joined}; a token "
           "bucket (tc tbf) shapes each node's egress to the rate. The Ray head and the comparison's driver run in "
           "node 0. One comparison per rate (every arm "
           f"{first['repeats']} time(s), interleaved); the rates ran one after another, so compare rates by their "
           "intervals, and the backends within a rate by the paired ratio. Comm share: the time spent waiting for "
           "averaged gradients after the local backward pass (last epoch, mean over runs). Sent on the link: "
           "each node's bytes sent on its interface during the last epoch's training, from the kernel's counters, "
           "per second of that epoch, averaged over nodes and runs (warm-up steps and Ray's own traffic included). "
           "Nodes used: how many distinct Ray nodes the ranks of a run landed on.", "",
           "| width | parameters | bytes per allreduce (float32) |", "|---|---|---|"]
    out += [f"| {w} | {(s := sizes(w))['parameters']:,} | {s['gradient_bytes']:,} |" for w in widths]
    for workers in first["workers"]:
        out += ["", f"## {workers} worker(s)", "", table(cells, workers, order), "", "**Where the winner changes.**",
                *winners(cells, workers, order)]
    failed = [r for r in network["rates"] if r["exit_code"]]
    if failed:
        out += ["", "## Rates whose comparison failed", ""]
        out += [f"- {r['link_rate']}: exit code {r['exit_code']}; see {r['folder']}/" for r in failed]
    out += ["", "Link counters of node 0's interface over each rate's whole comparison (both directions, Ray's "
                "traffic included): " + "; ".join(
                    f"{r['link_rate']} {text.size(r['node0_link_bytes']['tx_bytes'])} sent, "
                    f"{text.size(r['node0_link_bytes']['rx_bytes'])} received" for r in network["rates"]) + ".", "",
            f"Plots: `{plots.VERDICTS}`, native ÷ Horovod per rate and width with its interval; `network.png`, steady "
            "samples/s against link rate, one line per backend and width. Each rate's "
            "own report is in its folder.", ""]
    return "\n".join(out)


def plot(network: dict[str, Any], cells: list[dict[str, Any]], path: Path) -> None:
    plt = plots.pyplot()
    order = rate_order(network)
    workers = max((w for c in cells for w in c["comparison"]["settings"]["workers"]), default=0)
    data = rows(cells, workers)
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for width in sorted({r["width"] for r in data}, key=model_order):
        for backend, style in zip(BACKENDS, ("-o", "--s")):
            points = sorted(((order.index(r["rate"]), r["mean"]) for r in data
                             if r["width"] == width and r["backend"] == backend))
            if points:
                ax.plot(*zip(*points), style, label=f"{backend}, {label(width)}")
    ax.set_xticks(range(len(order)), order)
    ax.set(xlabel="link rate between nodes (each node's egress)", ylabel="steady-state samples/s, total",
           title=f"Throughput against link rate, {workers} workers on {network['nodes']} simulated nodes")
    ax.set_ylim(bottom=0)
    if data:
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def render(sweep_dir: str | Path, sizes: Callable[[int], dict[str, int]]) -> str:
    """Write report.md and network.png into the sweep's folder; return the Markdown. `sizes`: as for markdown()."""
    network, cells = load(sweep_dir)
    written = markdown(network, cells, sizes)
    (Path(sweep_dir) / "report.md").write_text(written)
    plot(network, cells, Path(sweep_dir) / "network.png")
    plots.plot_intervals(intervals(network, cells), Path(sweep_dir) / plots.VERDICTS,
                         "native ÷ Horovod per link rate and width, with its 95 % interval")
    return written


def intervals(network: dict[str, Any], cells: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """One verdict-plot row per width, link rate (slowest first) and worker count with a native ÷ Horovod answer."""
    order = rate_order(network)
    out = []
    for cell in sorted(cells, key=lambda c: (model_order(c["width"]), order.index(c["rate"]))):
        for workers, answer in cell["comparison"]["speed"].items():
            out.append((f"{label(cell['width'])}, {cell['rate']}, {workers} worker(s)", answer))
    return out


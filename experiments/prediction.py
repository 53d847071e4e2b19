"""Native ÷ Horovod past this machine: the communication model (experiments/comm_model.py) fitted to 2-node link sweeps,
checked against the sweeps on more nodes, and its predictions over nodes × link rates × gradient sizes;
prediction.json, prediction.md and prediction.png. Torch-free: the caller says what each width's gradient is.
"""

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis import plots, text
from contract.config import BACKENDS, ConfigError
from experiments import comm_model
from experiments.comm_model import Fit, Gradient, Point
from runtime import space

SCHEMA_VERSION = 1
FIT_NODES = 2
GOOD_ENOUGH = 0.20  # the validation's bar: a prediction within 20 % of the measured step time


@dataclass(frozen=True)
class Grid:
    """What to predict: node counts, link rates (bit/s by name), the ConvNet's widths, gradients given in MB, and
    the compute per step for those (None: their comm time alone); the registry's models (at the compute their runs
    measured, else their comm time alone), and the models whose 2-node runs are held out of the fit to check it."""

    nodes: list[int]
    rates: dict[str, float]
    widths: list[int]
    megabytes: list[float]
    compute_ms: float | None
    bucket_mb: float
    models: tuple[str, ...] = ()
    held_out: tuple[str, ...] = ()


def build(sweeps: list[str], gradient: Callable[[int, float], Gradient], grid: Grid,
          burst: Callable[[float], int] = lambda bits: 0) -> dict[str, Any]:
    """The whole prediction document: the fit on the 2-node runs, the validation on the others, the predictions.
    `burst(bits)`: the simulated links' token bucket in bytes (none on the real links predicted)."""
    found, skipped = comm_model.points(sweeps, gradient, burst)
    fitted = [p for p in found if p.nodes == FIT_NODES and p.width not in grid.held_out]
    held_out = [p for p in found if p not in fitted]
    if not fitted:
        raise ConfigError(f"none of {', '.join(sweeps)} holds a finished 2-node run; the model is fitted on "
                          "2 nodes: pass a folder written by compare --simulate-nodes 2 --link-rates a,b")
    fits = {}
    for backend in BACKENDS:
        mine = [p for p in fitted if p.backend == backend]
        if not mine:
            raise ConfigError(f"the 2-node sweeps hold no finished {backend} run; pass a sweep of both backends")
        fits[backend] = comm_model.fit(backend, mine, gradient)
    # Compute per step as measured at 2 nodes, the held-out models' included: the check is of the communication.
    compute = {b: comm_model.compute_by_width([p for p in found if p.nodes == FIT_NODES and p.backend == b])
               for b in BACKENDS}
    parameters = {w: gradient(w, grid.bucket_mb).bytes // 4
                  for w in {*grid.widths, *grid.models, *compute["native"], *(p.width for p in held_out)}}
    measured_rates = sorted({p.bits_per_s for p in fitted if p.bits_per_s})
    return {
        "schema_version": SCHEMA_VERSION,
        "sweeps": sweeps,
        "fit_sweeps": sorted({p.sweep for p in fitted}),
        "validation_sweeps": sorted({p.sweep for p in held_out}),
        "fit": {b: fits[b].summary() for b in BACKENDS},
        "fitted_runs": [_point_dict(p, fits) for p in fitted],
        "skipped": skipped,
        "measured": {"nodes": sorted({p.nodes for p in found}), "fit_nodes": FIT_NODES,
                     "rates_bits_per_s": measured_rates, "unshaped": any(p.bits_per_s is None for p in fitted),
                     "widths": sorted({p.width for p in fitted}, key=comm_model.order),
                     "overlap_measured": all(p.alone_s is not None for p in fitted),
                     "held_out": list(grid.held_out)},
        "compute_s": {b: {str(w): s for w, s in compute[b].items()} for b in BACKENDS},
        "validation": validation(held_out, fits, compute, parameters, gradient),
        "predictions": predictions(fits, compute, parameters, gradient, grid, measured_rates),
        "grid": {"nodes": grid.nodes, "rates": grid.rates, "widths": grid.widths, "megabytes": grid.megabytes,
                 "compute_ms": grid.compute_ms, "bucket_mb": grid.bucket_mb, "models": list(grid.models)},
    }


def _point_dict(p: Point, fits: dict[str, Fit]) -> dict[str, Any]:
    fitted = fits[p.backend]
    return {"backend": p.backend, "rate": p.rate, "width": p.width, "step_s": p.step_s, "compute_s": p.compute_s,
            "waited_s": p.waited_s, "residual": fitted.residuals[fitted.points.index(p)]}


def validation(held_out: list[Point], fits: dict[str, Fit], compute: dict[str, dict[int, float]],
               parameters: dict[int, int], gradient: Callable[[int, float], Gradient]) -> list[dict[str, Any]]:
    """Per (nodes, rate, width) measured beyond the fit: each backend's mean step time against the prediction made
    with the 2-node compute (the model alone), and native ÷ Horovod against its prediction."""
    out = []
    keys = {(p.nodes, p.bits_per_s or float("inf"), p.rate, p.width, p.bucket_mb) for p in held_out}
    for key in sorted(keys, key=lambda k: (k[0], k[1], comm_model.order(k[3]))):
        nodes, order, rate, width, bucket_mb = key
        bits = None if order == float("inf") else order
        bucket = next(p.burst for p in held_out if (p.nodes, p.rate) == (nodes, rate))
        row: dict[str, Any] = {"nodes": nodes, "rate": rate, "width": width}
        steps = {}
        for backend in BACKENDS:
            mine = [p for p in held_out if (p.nodes, p.rate, p.width, p.backend) == (nodes, rate, width, backend)]
            if not mine:
                continue
            used, extrapolated = comm_model.compute_at(compute[backend], parameters, width) or (
                statistics.fmean(p.compute_s for p in mine), False)
            predicted, lo, hi = comm_model.step(fits[backend], gradient(width, bucket_mb), bucket_mb, nodes,
                                                bits, used, bucket)
            measured = statistics.fmean(p.step_s for p in mine)
            own_compute = statistics.fmean(p.compute_s for p in mine)
            own, _, _ = comm_model.step(fits[backend], gradient(width, bucket_mb), bucket_mb, nodes, bits, own_compute,
                                        bucket)
            steps[backend] = (measured, predicted)
            row[backend] = {"runs": len(mine), "measured_step_s": measured, "predicted_step_s": predicted,
                            "predicted_range_s": [lo, hi], "error": predicted / measured - 1,
                            "compute_used_s": used, "compute_extrapolated": extrapolated,
                            "compute_measured_s": own_compute, "predicted_with_measured_compute_s": own,
                            "error_with_measured_compute": own / measured - 1,
                            "waited_measured_s": statistics.fmean(p.waited_s for p in mine)}
        if len(steps) == len(BACKENDS):
            measured = steps["horovod"][0] / steps["native"][0]
            predicted, lo, hi = comm_model.ratio_range(fits, gradient(width, bucket_mb), bucket_mb, nodes, bits,
                                                       {b: row[b]["compute_used_s"] for b in BACKENDS}, bucket)
            row["native_over_horovod"] = {"measured": measured, "predicted": predicted, "predicted_range": [lo, hi],
                                          "error": predicted / measured - 1}
        out.append(row)
    return out


def predictions(fits: dict[str, Fit], compute: dict[str, dict[int, float]], parameters: dict[int, int],
                gradient: Callable[[int, float], Gradient], grid: Grid,
                measured_rates: list[float]) -> list[dict[str, Any]]:
    """One entry per gradient × nodes × rate. Extrapolated: beyond 2 nodes, outside the measured link rates, or at a
    width whose compute was not measured. A gradient given in MB without --compute-ms: the comm time alone."""
    gradients: list[tuple[Gradient, int | str | None]] = [(gradient(w, grid.bucket_mb), w)
                                                          for w in (*grid.widths, *grid.models)]
    gradients += [(comm_model.gradient_of_mb(mb, grid.bucket_mb), None) for mb in grid.megabytes]
    out = []
    for grad, width in gradients:
        used = {b: comm_model.compute_at(compute[b], parameters, width) for b in BACKENDS} if width is not None else {}
        if used and all(used.values()):
            step_compute = {b: used[b][0] for b in BACKENDS}
            compute_extrapolated = any(extrapolated for _, extrapolated in used.values())
        elif width is None and grid.compute_ms is not None:
            step_compute = {b: grid.compute_ms / 1e3 for b in BACKENDS}
            compute_extrapolated = False
        else:
            step_compute = {b: 0.0 for b in BACKENDS}  # no overlap, no compute: each backend's comm time per step
            compute_extrapolated = False
        for nodes in grid.nodes:
            for rate, bits in grid.rates.items():
                comm_only = not any(step_compute.values())
                entry: dict[str, Any] = {
                    "gradient": grad.name, "width": width, "gradient_bytes": grad.bytes, "nodes": nodes,
                    "rate": rate, "bits_per_s": bits, "comm_only": comm_only,
                    "compute_s": step_compute["native"] if width is None else step_compute,
                    "extrapolated": (nodes != FIT_NODES or not measured_rates or not
                                     min(measured_rates) <= bits <= max(measured_rates) or compute_extrapolated)}
                for backend in BACKENDS:
                    value, lo, hi = comm_model.step(fits[backend], grad, grid.bucket_mb, nodes, bits,
                                                    step_compute[backend])
                    entry[backend] = {"step_s": value, "range_s": [lo, hi]}
                    if not entry["comm_only"]:
                        entry[backend]["efficiency"] = step_compute[backend] / value
                        entry[backend]["efficiency_range"] = [step_compute[backend] / hi, step_compute[backend] / lo]
                ratio, lo, hi = comm_model.ratio_range(fits, grad, grid.bucket_mb, nodes, bits, step_compute)
                entry["native_over_horovod"] = {"value": ratio, "range": [lo, hi]}
                out.append(entry)
    return out


def write(doc: dict[str, Any], folder: Path) -> str:
    """prediction.json, prediction.md and prediction.png into `folder`; returns the Markdown."""
    space.write_json(folder / "prediction.json", doc)
    return _rendered(doc, folder)


def render(folder: Path) -> str | None:
    """prediction.md and prediction.png again from the folder's prediction.json alone (`make docs`); None where it
    holds none."""
    if not (folder / "prediction.json").is_file():
        return None
    return _rendered(json.loads((folder / "prediction.json").read_text()), folder)


def _rendered(doc: dict[str, Any], folder: Path) -> str:
    written = markdown(doc)
    (folder / "prediction.md").write_text(written)
    plot(doc, folder / "prediction.png")
    return written


def _constant(name: str, value: float | None, span: list[float | None]) -> str:
    scale, unit = {"alpha_s": (1e3, " ms"), "host_s_per_byte": (1e9, " ns/B"), "link_efficiency": (1, ""),
                   "overlap": (1, "")}[name]
    if value is None:
        return "not bounded"
    lo, hi = (f"{v * scale:.3g}" if v is not None else "∞" for v in span)
    return f"{value * scale:.3g}{unit} ({lo}–{hi})"


def markdown(doc: dict[str, Any]) -> str:
    """The prediction report: how the model was fitted, its check beyond the fit, the predictions, its limits."""
    measured = doc["measured"]
    rates = ", ".join(text.rate(b) for b in measured["rates_bits_per_s"]) + (", unshaped" if measured["unshaped"]
                                                                             else "")
    out = ["# Native DDP or Horovod past this machine: a fitted model of the allreduce", "",
           f"Fitted on the {len(doc['fitted_runs'])} finished 2-node runs of {', '.join(doc['fit_sweeps'])} (link rates "
           f"{rates}; {_models(measured['widths'])}). One step = the worker's compute + the part "
           "of the allreduce it waits for. Both backends average with Gloo's ring here: an allreduce of b bytes over "
           "N nodes is 2(N−1) messages and 2(N−1)/N·b bytes per node; per message α, per byte 8/(η·rate) on the "
           "link plus h on the host, less a share ω of compute that communication overlaps ("
           + ("fitted: α, η and h to each run's averaging alone, ω to the share of it backward hid, (alone − wait) ÷ "
              "compute" if measured.get("overlap_measured") else "fixed at 0: searched, it traded against h, so each "
              "backend's overlap shows in its effective η and h")
           + "). DDP sends one message per "
           "bucket and one broadcast of the BatchNorm buffers; Horovod one fused message per cycle. The 95 % "
           "ranges come from 200 bootstrap resamples of the runs, carried through every prediction.", "",
           "## The fit (2 nodes)", "",
           "| backend | runs | α per message | η, share of the link | h, host cost per byte | ω, overlap | "
           "residual of the step time, RMS (max) |", "|---|---|---|---|---|---|---|"]
    for backend in BACKENDS:
        f = doc["fit"][backend]
        out.append(f"| {backend} | {f['points']} | " + " | ".join(
            _constant(name, f[name], f["ci95"][name]) for name in ("alpha_s", "link_efficiency", "host_s_per_byte",
                                                                  "overlap"))
            + f" | {100 * f['residual_rms']:.1f} % ({100 * f['residual_max']:.1f} %) |")
    if apart := [f"{b} {doc['fit'][b]['rank']}" for b in BACKENDS if doc["fit"][b]["rank"] < 3]:
        out += ["", f"**The runs do not tell every constant apart** (independent terms of 3: {', '.join(apart)}): "
                "the runs did not vary their messages, link time and bytes independently (one gradient in one bucket "
                "count cannot part a message's cost α from a byte's h; unshaped links alone cannot measure η), so "
                "the split above is the fit's arbitrary choice, and predictions at other node counts or gradients "
                "depend on it. Add a 2-node sweep at another --bucket-mb, of another model, or at a shaped rate."]
    out += ["", "Compute per step measured at 2 nodes (s): " + "; ".join(
        f"{b} " + ", ".join(f"{_models([w])} {s:.4f}" for w, s in doc["compute_s"][b].items()) for b in BACKENDS) + "."]
    if measured.get("held_out"):
        out += ["", f"Held out of the fit, to check it at 2 nodes: {', '.join(measured['held_out'])} (below)."]
    if doc["skipped"]:
        out += ["", "Left out of the fit: " + "; ".join(doc["skipped"]) + "."]
    out += ["", "## Validation beyond the fit", ""]
    if doc["validation"]:
        out += validation_table(doc["validation"])
    else:
        out.append("No sweep on more than 2 nodes was given: pass one (compare --simulate-nodes 3 or 4) beside the "
                   "2-node sweep to check the model where it was not fitted.")
    out += ["", "## Predictions", "",
            "native ÷ Horovod in samples/s (above 1: native faster) with its 95 % range, then the scaling "
            "efficiency (compute ÷ step time) of native / Horovod. † extrapolated: beyond the 2 nodes fitted, "
            "outside the link rates measured, or at a width whose compute was not measured; every cell beyond 2 "
            "nodes is one. The compute of every node is the 2-node run's (here two workers shared 2 cores). Where a "
            "range spans 1, the model cannot say which backend is faster there; at Gbit/s rates the host cost h "
            "carries most of a large gradient's time, and h is the least certain constant of the fit (its range "
            "above)."]
    for name in dict.fromkeys(p["gradient"] for p in doc["predictions"]):
        out += prediction_table(doc, [p for p in doc["predictions"] if p["gradient"] == name], name)
    return "\n".join(out + limits(rates, measured))


def prediction_table(doc: dict[str, Any], cells: list[dict[str, Any]], name: str) -> list[str]:
    """One gradient's predictions: a row per node count, a cell per link rate."""
    first = cells[0]
    grid_rates = list(dict.fromkeys(p["rate"] for p in cells))
    what = (f"the ConvNet at width {first['width']}" if isinstance(first["width"], int) else
            first["width"] if first["width"] is not None else f"a {name} gradient")
    comm_only = first["comm_only"]
    out = ["", f"### {what} ({first['gradient_bytes'] / 1e6:.3g} MB per allreduce)"
            + (": comm only (pass --compute-ms for whole steps); each cell: Horovod's comm time ÷ native's, then "
               "each backend's comm time per step (native / Horovod)" if comm_only else ""), "",
            "| nodes | " + " | ".join(text.rate(doc["grid"]["rates"][r]) for r in grid_rates) + " |",
            "|---|" + "---|" * len(grid_rates)]
    for nodes in dict.fromkeys(p["nodes"] for p in cells):
        row = []
        for rate in grid_rates:
            p = next(c for c in cells if c["nodes"] == nodes and c["rate"] == rate)
            r = p["native_over_horovod"]
            cell = f"{r['value']:.2f} ({r['range'][0]:.2f}–{r['range'][1]:.2f})"
            if comm_only:
                cell += f", {text.seconds(p['native']['step_s'])} / {text.seconds(p['horovod']['step_s'])}"
            else:
                cell += f", {100 * p['native']['efficiency']:.0f} / {100 * p['horovod']['efficiency']:.0f} %"
            row.append(cell + (" †" if p["extrapolated"] else ""))
        out.append(f"| {nodes} | " + " | ".join(row) + " |")
    return out


def limits(rates: str, measured: dict[str, Any]) -> list[str]:
    return ["", "## What the model leaves out", "",
            "- **Latency.** This kernel has no netem: every measured link is a veth with tbf's rate limit and "
            "microseconds of delay, so α is this host's per-message cost, not a real network's; a 50 µs or 1 ms "
            "link adds 2(N−1) times its delay per message, which the predictions do not hold.",
            "- **GPUs and NCCL.** The fit is Gloo on CPUs; NCCL's rings and trees, GPU compute and GPUDirect change "
            "every constant.",
            "- **Hierarchical allreduce** (Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE, NCCL's trees) and several "
            "workers per node: the model is one flat ring, one worker per node.",
            "- **Stragglers and contention.** Every node's compute is taken as equal and constant; a slow node, a "
            "switch shared by every link, or Horovod's cycles spanning a step are in the fitted constants only as "
            "far as the 2-node runs showed them.",
            f"- **Where the measurements end.** Fitted at 2 nodes, link rates {rates}, {_models(measured['widths'])}; "
            "at the rates predicted (Gbit/s) the host cost h, this "
            "machine's copies and reductions, dominates; it would differ on another machine.", ""]


def _models(keys: list[int | str]) -> str:
    """`widths 1, 2; resnet18`: the ConvNet's widths, then the registry's models."""
    widths = [str(k) for k in keys if isinstance(k, int)]
    names = [k for k in keys if isinstance(k, str)]
    return "; ".join(part for part in (f"width{'s' if len(widths) > 1 else ''} {', '.join(widths)}" if widths else "",
                                       ", ".join(names)) if part)


def validation_table(rows: list[dict[str, Any]]) -> list[str]:
    out = ["Predicted from the 2-node fit alone (compute included: the 2-node run's at that width). Compute measured "
           "is the validation run's own: where it exceeds the 2-node figure, more workers shared this host's "
           "2 cores, which a real cluster would not; the last column puts that compute in, leaving the "
           "communication model's own error.", "",
           "| nodes | link rate | width | backend | step measured (s) | predicted (95 % range) | error | compute "
           "2-node / measured (s) | error with the measured compute |", "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        for backend in BACKENDS:
            if backend not in row:
                continue
            b = row[backend]
            out.append(f"| {row['nodes']} | {row['rate']} | {row['width']} | {backend} | {b['measured_step_s']:.3f} | "
                       f"{b['predicted_step_s']:.3f} ({b['predicted_range_s'][0]:.3f}–{b['predicted_range_s'][1]:.3f})"
                       f" | {text.signed_percent(b['error'])} | {b['compute_used_s']:.3f} / {b['compute_measured_s']:.3f} | "
                       f"{text.signed_percent(b['error_with_measured_compute'])} |")
        if "native_over_horovod" in row:
            r = row["native_over_horovod"]
            out.append(f"| {row['nodes']} | {row['rate']} | {row['width']} | native ÷ Horovod | {r['measured']:.3f} | "
                       f"{r['predicted']:.3f} ({r['predicted_range'][0]:.3f}–{r['predicted_range'][1]:.3f}) | "
                       f"{text.signed_percent(r['error'])} | | |")
    errors = [abs(row[k]["error"]) for row in rows for k in (*BACKENDS, "native_over_horovod") if k in row]
    own = [abs(row[k]["error_with_measured_compute"]) for row in rows for k in BACKENDS if k in row]
    within = sum(e <= GOOD_ENOUGH for e in errors)
    out += ["", f"{within} of {len(errors)} predictions within {100 * GOOD_ENOUGH:.0f} % of the measurement; the "
                f"largest error {100 * max(errors):.0f} %. With each run's measured compute, the step times' largest "
                f"error is {100 * max(own):.0f} %."]
    return out


def plot(doc: dict[str, Any], path: Path) -> None:
    plt = plots.pyplot()
    names = list(dict.fromkeys(p["gradient"] for p in doc["predictions"]))
    widths = len(doc["grid"]["widths"])
    # The narrowest and widest ConvNet and the next gradient (a model's, or one given in MB); without widths, three.
    shown = list(dict.fromkeys([names[0], names[max(widths - 1, 0)], names[min(widths, len(names) - 1)]] if widths
                               else names[:3]))
    fig, axes = plt.subplots(1, len(shown) + 1, figsize=(4.2 * (len(shown) + 1), 4.2))
    for ax, name in zip(axes, shown):
        cells = [p for p in doc["predictions"] if p["gradient"] == name]
        for rate in dict.fromkeys(p["rate"] for p in cells):
            line = sorted((p["nodes"], p["native_over_horovod"]) for p in cells if p["rate"] == rate)
            xs = [n for n, _ in line]
            ax.plot(xs, [r["value"] for _, r in line], "-o", markersize=3, label=text.rate(doc["grid"]["rates"][rate]))
            ax.fill_between(xs, [r["range"][0] for _, r in line], [r["range"][1] for _, r in line], alpha=0.2)
        ax.axhline(1.0, color="black", linewidth=1, linestyle="--")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter("{x:.2g}")
        ax.yaxis.set_minor_formatter("{x:.2g}")
        comm_only = cells[0]["comm_only"]
        megabytes = f"{cells[0]['gradient_bytes'] / 1e6:.3g} MB"
        ax.set(xlabel="nodes (one worker each)", ylabel="native ÷ Horovod" + (" (comm only)" if comm_only else ""),
               title=f"{name} ({megabytes}), 95 % range" if name != megabytes else f"{name} gradient, 95 % range")
        ax.legend(fontsize="small")
    ax = axes[-1]
    pairs = [(row[b]["measured_step_s"], row[b]["predicted_step_s"], row[b]["predicted_range_s"], b, row["nodes"])
             for row in doc["validation"] for b in BACKENDS if b in row]
    for backend, marker in zip(BACKENDS, ("o", "s")):
        mine = [p for p in pairs if p[3] == backend]
        if mine:
            ax.errorbar([p[0] for p in mine], [p[1] for p in mine],
                        yerr=[[p[1] - p[2][0] for p in mine], [p[2][1] - p[1] for p in mine]], fmt=marker,
                        capsize=3, label=backend)
    top = max([p[0] for p in pairs] + [p[2][1] for p in pairs] + [0.1])
    ax.plot([0, top], [0, top], "k--", linewidth=1)
    ax.fill_between([0, top], [0, top * (1 - GOOD_ENOUGH)], [0, top * (1 + GOOD_ENOUGH)], color="grey", alpha=0.15)
    ax.set(xlabel="measured step time (s)", ylabel="predicted (s)",
           title="validation: 3+ nodes" if pairs else "validation: no sweep beyond 2 nodes given")
    if pairs:
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)

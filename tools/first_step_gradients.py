"""Why parity past two workers is judged against a floor: the first step's averaged gradients of each backend beside
the reference's, element by element. Are they the same to the last bit, or within what reordering a float32 sum can
change?

    python tools/first_step_gradients.py --workers 3 --model resnet18 --output docs/results/first-step-gradients

DDP (under torchrun) and Horovod (under horovodrun) each average one step's gradients from the same weights and
shards as their arms (tools/first_step_gradients_rank.py). The reference computes each simulated worker's gradients
in one process and combines them as each backend would, in the order of workload/compression.py: `reference` (divide
by N, then sum workers 0, 1, …), `reference-reordered` (the same, last worker first) and `reference-horovod` (sum,
then scale by 1/N). Per backend and reference: the share of elements equal to the bit, the share within what two
summation orders can differ by, 2 N u sum_i |g_i / N| with u = 2^-24 (each order's error is at most
(N - 1) u sum_i |g_i / N|, the division or the scale one rounding more), the largest difference, and the largest
difference over that bound (1 or less: within it).
Writes first-step-gradients.json and .md into --output.
"""

import contextlib
import json
import logging
import os
import tempfile
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

from contract import results
from contract.config import ConfigError, TrainConfig
from launchers import arms
from runtime import cli, preflight, space, tied
from workload import compression, data
from workload.run import build_model
from workload.trainer import shard_loader

log = logging.getLogger(__name__)
RANK = Path(__file__).with_name("first_step_gradients_rank.py")
FILE = "first-step-gradients.json"
U = 2.0 ** -24
EMULATIONS = {"reference": ("native", False), "reference-reordered": ("native", True),
              "reference-horovod": ("horovod", False)}
"""Each reference's rounding (workload/compression.py) and whether it sums the workers last first."""


def per_worker(cfg: TrainConfig) -> list[list[torch.Tensor]]:
    """Each simulated worker's gradients from the same initial weights, kept apart, as the reference computes them."""
    torch.set_num_threads(cfg.threads_per_worker)  # as the reference and each rank: a kernel's own sums alike
    model = build_model(cfg, torch.device("cpu"))
    model.train()
    splits, out = data.load(cfg), []
    for rank in range(cfg.workers):
        loader = shard_loader(splits, cfg, rank, cfg.workers)
        loader.sampler.set_epoch(1)
        images, labels = next(iter(loader))
        images = data.inputs(images)  # synthetic images come as their bytes
        model.zero_grad()
        F.cross_entropy(model(images), labels).backward()
        out.append([p.grad.detach().clone() for p in model.parameters()])
    return out


def launch(backend: str, cfg: TrainConfig, scratch: Path) -> list[torch.Tensor]:
    launcher = "torchrun" if backend == "native" else "horovodrun"
    config, output = scratch / "config.json", scratch / f"{backend}.pt"
    config.write_text(json.dumps(cfg.to_dict()))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(RANK.parent.parent)}
    arms.run_launcher([*arms.launcher_head(launcher, cfg.workers), str(RANK), "--backend", backend, "--config",
                       str(config), "--output", str(output)], env, scratch / f"{backend}.log", launcher)
    return torch.load(output, weights_only=True)


def compared(got: list[torch.Tensor], grads: list[list[torch.Tensor]], rounding: str, reverse: bool) -> dict:
    """`got` beside the reference that rounds as `rounding` does, element by element."""
    n = len(grads)
    workers = grads[::-1] if reverse else grads
    same = within = total = 0
    worst = largest = 0.0
    for i, g in enumerate(got):
        want = compression.combine([w[i] for w in workers], "none", rounding)
        bound = 2 * n * U * sum((w[i] / n).abs() for w in grads)
        diff = (g - want).abs()
        same += int((g == want).sum())
        within += int((diff <= bound).sum())
        total += g.numel()
        largest = max(largest, float(diff.max()))
        differ = diff > 0
        worst = max(worst, float((diff[differ] / bound[differ]).max()) if differ.any() else 0.0)
    return {"elements": total, "identical": same / total, "within_reordering": within / total,
            "largest_abs": largest, "worst_over_bound": worst}


def main() -> int:
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    if args.workers < 2:
        raise ConfigError(f"--workers {args.workers}: an average needs 2 or more; pass --workers 3")
    # Everything checked before anything is made: the model, the cores, the launchers, the output folder and its room.
    cfg = TrainConfig(model=args.model, dataset="synthetic", workers=args.workers, output_dir=str(args.output),
                      data_dir=tempfile.gettempdir(), synthetic_train_size=32 * args.workers * 4,
                      synthetic_test_size=64)
    preflight.writable_dir(args.output, "--output")
    preflight.free_space(args.output, "--output", preflight.OUTPUT_BYTES, "its tables")
    preflight.check_config(cfg, horovod=False)  # Horovod's own defaults, no flag of ours: an export is recorded
    preflight.check_cores(args.workers)
    arms.check_available(["torchrun", "horovodrun"], ["native", "horovod"])
    # The data, the ranks' files and torch's caches, gone however this ends.
    with tied.folder("first-step-gradients-") as scratch, tied.temporary_root(scratch):
        cfg = data.resolve(replace(cfg, data_dir=str(scratch)))
        grads = per_worker(cfg)
        got = {backend: launch(backend, cfg, scratch) for backend in ("native", "horovod")}
    table = {backend: {name: compared(g, grads, rounding, reverse) for name, (rounding, reverse) in EMULATIONS.items()}
             for backend, g in got.items()}
    table["reference-reordered"] = {"reference": compared(
        [compression.combine([w[i] for w in grads[::-1]], "none", "native") for i in range(len(grads[0]))],
        grads, "native", False)}
    doc = {"workers": args.workers, "model": args.model, "batch_size": cfg.batch_size,
           "environment": results.environment(), "compared": table}
    write(args.output, doc)
    log.info("%s", render(doc))
    return 0


def write(folder: Path, doc: dict) -> None:
    """The JSON and its Markdown into `folder`, both or neither: a full disk is one line, and leaves no file."""
    made = [p for p in (folder, *folder.parents) if not p.exists()]
    try:
        space.write_json(folder / FILE, doc)
        text = render(doc)
        with space.atomic_file(folder / FILE.replace(".json", ".md"), len(text.encode())) as temporary:
            temporary.write_text(text)
    except BaseException:
        (folder / FILE).unlink(missing_ok=True)
        for each in made:  # the folders this write made, innermost first
            with contextlib.suppress(OSError):
                each.rmdir()
        raise


def render(doc: dict) -> str:
    out = [f"# The first step's averaged gradients, {doc['model']} at {doc['workers']} workers", "",
           f"Made by `python tools/first_step_gradients.py --workers {doc['workers']} --model {doc['model']}` on "
           f"{doc['environment']['cpu']}, torch {doc['environment']['torch']}; batch {doc['batch_size']} a worker, "
           "synthetic images. Within reordering: |difference| <= 2 N u sum_i |g_i / N|, u = 2^-24.", "",
           "| averaged by | against | elements | identical | within reordering | largest difference | worst ÷ bound |",
           "|---|---|---|---|---|---|---|"]
    for backend, against in doc["compared"].items():
        for name, c in against.items():
            out.append(f"| {backend} | {name} | {c['elements']:,} | {100 * c['identical']:.2f} % | "
                       f"{100 * c['within_reordering']:.3f} % | {c['largest_abs']:.3g} | {c['worst_over_bound']:.3g} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    cli.run(main)

"""What each framework's host does per gradient and at a step's end, measured: the two costs a GPU step pays beside
the averaging itself (docs/cluster.md, "What a GPU host adds"), on this machine's CPU, which is the host a GPU node
has too. A benchmark, not a test: rounds of both backends interleaved, each round a launch of 2 ranks
(tools/host_costs_rank.py) over models of N tiny parameters, and per backend and figure the mean over rounds with
its 95 % interval.

    python tools/host_costs.py --rounds 4 --output docs/results/host-costs
    python3 tools/host_costs.py --device cuda --model resnet50 --rounds 3 --output gpu-host-costs   # one GPU

Per round and backend, over N: the hook's cost a gradient, the slope of (backward - the plain model's backward); the
step's end, the slope a gradient and the fixed part of (step - the plain model's step), fitted by least squares.
Writes host-costs.json and host-costs.md into --output. On a GPU machine (--device cuda) each round is one rank a
backend on the first GPU, which averages nothing; --model times that model's whole steps too (host_costs_rank.py).
"""

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from analysis import stats, text
from contract import results
from contract.config import ConfigError
from launchers.arms import launcher_head
from runtime import cli

log = logging.getLogger(__name__)
FILE = "host-costs.json"
RANK = Path(__file__).with_name("host_costs_rank.py")
TENSORS = (20, 161, 640)
"""A small model's parameter count, ResNet-50's (161) and a large one's."""
ARMS = {"native": {}, "horovod": {}, "horovod-async": {"HOROVOD_ENABLE_ASYNC_COMPLETION": "1"}}
"""Each arm's environment beside its backend: on a GPU, Horovod also with async completion (its finalizer records an
event for the stream to wait on rather than waiting on the host: horovod/common/ops/gpu_operations.cc,
FinalizeGPUQueue)."""
COLUMNS = {"native": "DDP", "horovod": "Horovod", "horovod-async": "Horovod, HOROVOD_ENABLE_ASYNC_COMPLETION=1"}


def arms(device: str) -> tuple[str, ...]:
    return ("native", "horovod", "horovod-async") if device == "cuda" else ("native", "horovod")


def ranks(device: str) -> int:
    """2 ranks on CPUs; one on a GPU machine's first GPU (NCCL takes one rank a GPU)."""
    return 1 if device == "cuda" else 2


def launch(backend: str, tensors: tuple[int, ...], args: argparse.Namespace) -> list[dict[str, float]]:
    head = launcher_head("torchrun" if backend == "native" else "horovodrun", ranks(args.device))
    path = os.pathsep.join(filter(None, [str(RANK.parent.parent), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path, **ARMS[backend]}
    extra = ["--device", args.device, *(["--model", args.model, "--batch", str(args.batch)] if args.model else [])]
    argv = [str(RANK), "--backend", backend.split("-")[0], "--tensors", ",".join(map(str, tensors))]
    done = subprocess.run([*head, *argv, "--steps", str(args.steps), *extra], capture_output=True, text=True,
                          env=env, check=False)
    found = [json.loads(line[line.find('{"backend"'):])  # horovodrun prefixes each rank's line with its rank
             for line in done.stdout.splitlines() if '{"backend"' in line]
    if done.returncode or len(found) != len(tensors) + bool(args.model):
        raise RuntimeError(f"{backend} round failed ({done.returncode}): {done.stderr[-2000:]}")
    return found


def per_round(lines: list[dict[str, float]]) -> dict[str, float]:
    found = [line for line in lines if "tensors" in line]
    whole = {}
    for line in (line for line in lines if "model" in line):
        at = f"{line['model']}_b{line['batch']}"
        whole.update({f"plain_step_s_{at}": line["plain_step"], f"framework_step_s_{at}": line["step"],
                      f"step_extra_s_{at}": line["step"] - line["plain_step"]})
    counts = [r["tensors"] for r in found]
    hook, _ = statistics.linear_regression(counts, [r["backward"] - r["plain_backward"] for r in found])
    end_slope, end_fixed = statistics.linear_regression(counts, [r["step"] - r["plain_step"] for r in found])
    return {"hook_s_per_gradient": hook, "step_end_s_per_gradient": end_slope, "step_end_fixed_s": end_fixed,
            **{f"step_end_s_at_{r['tensors']}": r["step"] - r["plain_step"] for r in found},
            **{f"backward_extra_s_at_{r['tensors']}": r["backward"] - r["plain_backward"] for r in found}, **whole}


def summarize(rounds: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, dict[str, object]]]:
    def figure(values: list[float]) -> dict[str, object]:
        mean, interval = stats.mean_interval(values)
        low, high = interval or (None, None)
        return {"mean": mean, "low": low, "high": high, "rounds": values}

    return {backend: {key: figure([v[key] for v in values]) for key in values[0]} for backend, values in rounds.items()}


def markdown(doc: dict[str, object]) -> str:
    def cell(figure: dict[str, object]) -> str:
        us = 1e6 * figure["mean"]
        if figure["low"] is None:
            return f"{us:.1f}"
        return f"{us:.1f} ({1e6 * figure['low']:.1f} to {1e6 * figure['high']:.1f})"
    summary = doc["summary"]
    lo, hi = doc["tensors"][0], doc["tensors"][-1]

    def growth(backend: str) -> float:
        at = summary[backend]
        return 1e6 * (at[f"step_end_s_at_{hi}"]["mean"] - at[f"step_end_s_at_{lo}"]["mean"]) / (hi - lo)

    keys = [("hook_s_per_gradient", "a gradient's hook during backward, µs (the slope over the counts)"),
            *((f"step_end_s_at_{n}", f"the step's end at {n} gradients{' (ResNet-50)' if n == 161 else ''}, µs")
              for n in doc["tensors"])]
    shown = [arm for arm in COLUMNS if arm in summary]
    rows = [[label, *(cell(summary[arm][key]) for arm in shown)] for key, label in keys]
    for key in (key for key in summary["native"] if key.startswith(("plain_step_s_", "framework_step_s_",
                                                                     "step_extra_s_"))):
        what = {"plain": "the plain model's whole step", "framework": "the framework's whole step",
                "step": "what the framework adds to a whole step"}[key.split("_")[0]]
        model, batch = key.rsplit("_", 2)[-2:]
        rows.append([f"{what}, {model} at batch {batch[1:]} (224 px), µs",
                     *(cell(summary[arm][key]) for arm in shown)])
    ranks = doc.get("ranks", 2)
    pause = {"cpu": 50, "cuda": 10}[doc.get("device", "cpu")]
    return "\n".join([
        "# What each framework's host does per gradient and at a step's end (measured)", "",
        f"Made by `{doc['command']}` on {doc['machine']}, {doc['date']}: {doc['rounds']} rounds of both backends, "
        f"interleaved, each {ranks} rank{'s' if ranks > 1 else ''} over models of "
        f"{', '.join(map(str, doc['tensors']))} tiny parameters, {doc['steps']} steps each after 10 of warm-up; each "
        "figure is the mean over rounds with its 95 % interval, beyond what the same model costs with no framework in "
        f"the same process, each step timed after the same {pause} ms pause as the framework's. The step's end is "
        "timed once every allreduce has finished, so it is the host's own work, "
        f"not a wait for the network. Between {lo} and {hi} gradients Horovod's grows by {growth('horovod'):.1f} µs "
        f"a gradient, DDP's by {growth('native'):.1f} (below the plain model's own step at many gradients, which "
        "this benchmark does not take apart).", "",
        text.md_table(["figure", *(COLUMNS[arm] for arm in shown)], rows), "",
        "On a GPU the autograd thread that runs the hooks also launches backward's kernels, and the host is ahead of "
        "the GPU there, so the hooks are hidden while the host keeps ahead. Horovod's step end is not: its "
        "`optimizer.step()` calls `synchronize()`, which waits on the host for every allreduce and then runs the "
        "loop timed here, while the GPU has nothing queued; DDP's reducer makes the stream wait and returns. "
        "experiments/gpu_model/gpu_cluster.py adds it to Horovod's GPU step.", ""])


def parser() -> cli.Parser:
    out = cli.Parser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    out.add_argument("--rounds", type=int, default=4)
    out.add_argument("--steps", type=int, default=60)
    out.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                     help="cpu: 2 ranks on this machine's cores; cuda: one rank on the first GPU (default: cpu)")
    out.add_argument("--model", default="", help="on a GPU, also time this torchvision model's whole steps")
    out.add_argument("--batch", type=int, default=32, help="--model's batch per step (default: 32)")
    out.add_argument("--output", type=Path, required=True, help="the folder to write host-costs.json into")
    return out


def main() -> int:
    args = parser().parse_args()
    if args.rounds < 2 or args.steps < 10:
        raise ConfigError("--rounds must be 2 or more (an interval needs two) and --steps 10 or more")
    if args.model and args.device != "cuda":
        raise ConfigError("--model times whole GPU steps: give --device cuda with it, on a machine with a GPU")
    machine = f"{os.cpu_count()} cores, {results.environment()['cpu']}"
    if args.device == "cuda":  # the first GPU's name and torch's version
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("--device cuda needs a GPU torch can see (torch.cuda.is_available() is False here)")
        machine = f"{torch.cuda.get_device_name(0)} with {machine}, torch {torch.__version__}"
    rounds: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms(args.device)}
    for k in range(args.rounds):
        for backend in (list(rounds) if k % 2 == 0 else list(rounds)[::-1]):
            rounds[backend].append(per_round(launch(backend, TENSORS, args)))
            log.info("round %d %s: %s", k + 1, backend, rounds[backend][-1])
    doc = {"schema_version": 1, "command": "python tools/host_costs.py " + " ".join(sys.argv[1:]),
           "machine": machine, "device": args.device, "ranks": ranks(args.device),
           "date": time.strftime("%Y-%m-%d"), "rounds": args.rounds, "steps": args.steps, "tensors": list(TENSORS),
           "summary": summarize(rounds)}
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / FILE).write_text(json.dumps(doc, indent=1) + "\n")
    (args.output / "host-costs.md").write_text(markdown(doc))
    log.info("%s", markdown(doc))
    return 0


if __name__ == "__main__":
    cli.run(main)

"""What each framework's host does per gradient and at a step's end, measured: the two costs a GPU step pays beside
the averaging itself (docs/cluster.md, "What a GPU host adds"), on this machine's CPU, which is the host a GPU node
has too. A benchmark, not a test: rounds of both backends interleaved, each round a launch of 2 ranks
(tools/host_costs_rank.py) over models of N tiny parameters, and per backend and figure the mean over rounds with
its 95 % interval.

    python tools/host_costs.py --rounds 4 --output docs/results/host-costs

Per round and backend, over N: the hook's cost a gradient, the slope of (backward - the plain model's backward); the
step's end, the slope a gradient and the fixed part of (step - the plain model's step), fitted by least squares.
Writes host-costs.json and host-costs.md into --output.
"""

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from analysis import stats, text
from contract import results
from contract.config import ConfigError
from runtime import cli

log = logging.getLogger(__name__)
FILE = "host-costs.json"
RANK = Path(__file__).with_name("host_costs_rank.py")
TENSORS = (20, 161, 640)
"""A small model's parameter count, ResNet-50's (161) and a large one's."""


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares' (slope, intercept) of y on x."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return slope, my - slope * mx


def launch(backend: str, tensors: tuple[int, ...], steps: int) -> list[dict[str, float]]:
    here = Path(sys.executable)
    head = ([str(here.with_name("torchrun")), "--standalone", "--nproc-per-node", "2"] if backend == "native"
            else [str(here.with_name("horovodrun")), "-np", "2", "--gloo", sys.executable])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(RANK.parent.parent)}
    done = subprocess.run([*head, str(RANK), "--backend", backend, "--tensors", ",".join(map(str, tensors)),
                           "--steps", str(steps)], capture_output=True, text=True, env=env, check=False)
    found = []
    for line in done.stdout.splitlines():
        start = line.find('{"backend"')  # horovodrun prefixes each rank's line with its rank
        if start >= 0:
            found.append(json.loads(line[start:]))
    if done.returncode or len(found) != len(tensors):
        raise RuntimeError(f"{backend} round failed ({done.returncode}): {done.stderr[-2000:]}")
    return found


def per_round(found: list[dict[str, float]]) -> dict[str, float]:
    hook, _ = fit([(r["tensors"], r["backward"] - r["plain_backward"]) for r in found])
    end_slope, end_fixed = fit([(r["tensors"], r["step"] - r["plain_step"]) for r in found])
    return {"hook_s_per_gradient": hook, "step_end_s_per_gradient": end_slope, "step_end_fixed_s": end_fixed,
            **{f"step_end_s_at_{r['tensors']}": r["step"] - r["plain_step"] for r in found},
            **{f"backward_extra_s_at_{r['tensors']}": r["backward"] - r["plain_backward"] for r in found}}


def summarize(rounds: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, dict[str, object]]]:
    out: dict[str, dict[str, dict[str, object]]] = {}
    for backend, values in rounds.items():
        out[backend] = {}
        for key in values[0]:
            mean, interval = stats.mean_interval([v[key] for v in values])
            out[backend][key] = {"mean": mean, "low": interval[0] if interval else None,
                                 "high": interval[1] if interval else None, "rounds": [v[key] for v in values]}
    return out


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
    rows = [[label, cell(summary["native"][key]), cell(summary["horovod"][key])] for key, label in keys]
    return "\n".join([
        "# What each framework's host does per gradient and at a step's end (measured)", "",
        f"Made by `{doc['command']}` on {doc['machine']}, {doc['date']}: {doc['rounds']} rounds of both backends, "
        "interleaved, each 2 ranks over models of "
        f"{', '.join(map(str, doc['tensors']))} tiny parameters, {doc['steps']} steps each after 10 of warm-up; each "
        "figure is the mean over rounds with its 95 % interval, beyond what the same model costs with no framework in "
        "the same process, each step timed after the same 50 ms pause as the framework's. The step's end is timed "
        "once every allreduce has finished, so it is the host's own work, "
        f"not a wait for the network. Between {lo} and {hi} gradients Horovod's grows by {growth('horovod'):.1f} µs "
        f"a gradient, DDP's by {growth('native'):.1f} (below the plain model's own step at many gradients, which "
        "this benchmark does not take apart).", "",
        text.md_table(["figure", "DDP", "Horovod"], rows), "",
        "On a GPU the autograd thread that runs the hooks also launches backward's kernels, and the host is ahead of "
        "the GPU there, so the hooks are hidden while the host keeps ahead. Horovod's step end is not: its "
        "`optimizer.step()` calls `synchronize()`, which waits on the host for every allreduce and then runs the "
        "loop timed here, while the GPU has nothing queued; DDP's reducer makes the stream wait and returns. "
        "experiments/gpu_cluster.py adds it to Horovod's GPU step.", ""])


def parser() -> cli.Parser:
    out = cli.Parser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    out.add_argument("--rounds", type=int, default=4)
    out.add_argument("--steps", type=int, default=60)
    out.add_argument("--output", type=Path, required=True, help="the folder to write host-costs.json into")
    return out


def main() -> int:
    args = parser().parse_args()
    if args.rounds < 2 or args.steps < 10:
        raise ConfigError("--rounds must be 2 or more (an interval needs two) and --steps 10 or more")
    rounds: dict[str, list[dict[str, float]]] = {"native": [], "horovod": []}
    for k in range(args.rounds):
        for backend in (("native", "horovod") if k % 2 == 0 else ("horovod", "native")):
            rounds[backend].append(per_round(launch(backend, TENSORS, args.steps)))
            log.info("round %d %s: %s", k + 1, backend, rounds[backend][-1])
    doc = {"schema_version": 1, "command": "python tools/host_costs.py " + " ".join(sys.argv[1:]),
           "machine": f"{os.cpu_count()} cores, {results.environment()['cpu']}",
           "date": time.strftime("%Y-%m-%d"), "rounds": args.rounds, "steps": args.steps, "tensors": list(TENSORS),
           "summary": summarize(rounds)}
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / FILE).write_text(json.dumps(doc, indent=1) + "\n")
    (args.output / "host-costs.md").write_text(markdown(doc))
    log.info("%s", markdown(doc))
    return 0


if __name__ == "__main__":
    cli.run(main)

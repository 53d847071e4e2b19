"""Held against the frameworks' own benchmarks: this project's Horovod arm beside Horovod's
`examples/pytorch/pytorch_synthetic_benchmark.py`, and its native arm beside a plain DDP loop
(tools/plain_ddp_benchmark.py), at the same model, batch, image size and threads, interleaved and paired.

    python tools/framework_benchmarks.py --models resnet18,resnet50 --rounds 3 \\
        --horovod-benchmark ~/horovod/examples/pytorch/pytorch_synthetic_benchmark.py

Horovod's script is not shipped with its package: take it from a clone of github.com/horovod/horovod (tag v0.28.1).
It runs as written, so both sides take its shape: 3 x 224 x 224 images of 1000 classes, batch 32 per worker, plain
SGD (no momentum) at 0.01 x the world size, one torch thread per worker (OMP_NUM_THREADS=1, which its script reads).
With --image-size N (the comparison's default is 32, where a fixed cost per step weighs 30 times what it does at 224)
a copy of its script runs with its one `224, 224` made `N, N`, and nothing else changed.
Each figure is the median over a run's measured batches of total img/s: Horovod's script prints one rate per
iteration of --batches-per-iter batches, this project's arms one per step (steady_samples_per_s). The project's arms
also load each batch from a DataLoader over synthetic images, time every step and run the comm hook that times
DDP's buckets; the table gives their data-loading share, so that what that costs is seen.
--backends horovod (or native) runs one pair alone, where that pair's noise needs more rounds than both could take.
"""

import argparse
import json
import logging
import os
import re
import statistics
import subprocess
from pathlib import Path

from analysis import stats
from contract import results
from contract.config import MAX_IMAGE_SIZE, MIN_IMAGE_SIZE, ConfigError
from contract.errors import RunFailed
from launchers import arms
from runtime import cli, space

log = logging.getLogger(__name__)
ARMS = ("horovod: theirs", "horovod: ours", "native: plain DDP", "native: ours")
PAIRS = {"horovod": (ARMS[0], ARMS[1]), "native": (ARMS[2], ARMS[3])}
"""Each backend's (theirs, ours): --backends picks which pairs run, so one pair can take every round."""
PLAIN_DDP = Path(__file__).with_name("plain_ddp_benchmark.py")
ITER = re.compile(r"Iter #\d+: ([\d.]+) img/sec per")
THEIRS_SIZE, THEIRS_SHAPE = 224, "224, 224"
"""The image side Horovod's script is written for, and how its one line of random images says it."""


def parser() -> cli.Parser:
    out = cli.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    out.add_argument("--horovod-benchmark", type=Path, required=True,
                     help="Horovod's examples/pytorch/pytorch_synthetic_benchmark.py")
    out.add_argument("--models", default="resnet18,resnet50", help="torchvision models (default: resnet18,resnet50)")
    out.add_argument("--rounds", type=int, default=3, help="paired rounds per model (default: 3)")
    out.add_argument("--workers", type=int, default=2, help="processes per run (default: 2)")
    out.add_argument("--warmup-batches", type=int, default=3, help="batches left out (default: 3)")
    out.add_argument("--batches-per-iter", type=int, default=4, help="batches per Horovod iteration (default: 4)")
    out.add_argument("--iters", type=int, default=5, help="Horovod iterations measured (default: 5)")
    out.add_argument("--image-size", type=int, default=224, help="3 x this x this images on every side (default: 224, "
                     "Horovod's script as written)")
    out.add_argument("--backends", default="horovod,native",
                     help="which pairs run: horovod, native or both (default: horovod,native)")
    out.add_argument("--output-dir", default="results/framework-benchmarks", help="where runs and the table go")
    return out


def main() -> int:
    args = parser().parse_args()
    if not args.horovod_benchmark.is_file() or not args.horovod_benchmark.read_text(errors="replace").strip():
        raise ConfigError(f"--horovod-benchmark {args.horovod_benchmark} is not a file, or an empty one; take "
                          "examples/pytorch/pytorch_synthetic_benchmark.py from a clone of github.com/horovod/horovod")
    for name in ("rounds", "workers", "warmup_batches", "batches_per_iter", "iters"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be a positive integer")
    if not MIN_IMAGE_SIZE <= args.image_size <= MAX_IMAGE_SIZE:
        raise ConfigError(f"--image-size must be from {MIN_IMAGE_SIZE} to {MAX_IMAGE_SIZE}, got {args.image_size}")
    if args.image_size != THEIRS_SIZE and args.horovod_benchmark.read_text(errors="replace").count(THEIRS_SHAPE) != 1:
        raise ConfigError(f"--horovod-benchmark {args.horovod_benchmark} does not hold its image shape "
                          f"`{THEIRS_SHAPE}` once, so it cannot be resized; run at --image-size {THEIRS_SIZE}")
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    if not names or any(m not in ("resnet18", "resnet50", "vit_b_16") for m in names):
        raise ConfigError(f"--models takes resnet18, resnet50 or vit_b_16, got {args.models!r}")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not backends or any(b not in PAIRS for b in backends) or len(set(backends)) != len(backends):
        raise ConfigError(f"--backends takes horovod, native or horovod,native, got {args.backends!r}")
    root = Path(args.output_dir).resolve()
    found = {m: measure(m, args, root / m, backends) for m in names}
    space.write_json(root / "framework-benchmarks.json", found)
    log.info("\n%s", table(found))
    return 0


def measure(model: str, args: argparse.Namespace, folder: Path, backends: list[str]) -> dict[str, object]:
    """Every arm of `backends` `args.rounds` times in a balanced order; the paired ratios ours ÷ theirs."""
    chosen = tuple(arm for backend in backends for arm in PAIRS[backend])
    figures: dict[str, list[float]] = {arm: [] for arm in chosen}
    data_share: dict[str, list[float]] = {arm: [] for arm in chosen}
    for round_, arm in stats.balanced_order(chosen, args.rounds):
        out = folder / f"{arm.replace(': ', '-').replace(' ', '-')}-r{round_}"
        out.mkdir(parents=True, exist_ok=True)
        rate, share = run(arm, model, args, out)
        log.info("%s, round %d, %s: %.1f img/s", model, round_ + 1, arm, rate)
        figures[arm].append(rate)
        if share is not None:
            data_share[arm].append(share)
    answer = {"rounds": args.rounds, "img_per_s": figures}
    for backend in backends:
        theirs, ours = PAIRS[backend]
        estimate = stats.paired_ratio(figures[ours], figures[theirs])
        answer[backend] = {"ratio": estimate.ratio, "ci95": list(estimate.ci95) if estimate.ci95 else None,
                           "data_share": statistics.fmean(data_share[ours]) if data_share[ours] else None}
    return answer


def run(arm: str, model: str, args: argparse.Namespace, out: Path) -> tuple[float, float | None]:
    """One run: its median total img/s over the measured batches, and the project's data-loading share."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", **arms.TORCHRUN_ENV}
    horovodrun, torchrun = arms.launcher_head("horovodrun", args.workers), arms.launcher_head("torchrun", args.workers)
    batches = ["--num-warmup-batches", str(args.warmup_batches), "--num-batches-per-iter", str(args.batches_per_iter),
               "--num-iters", str(args.iters), "--model", model]
    steps = args.warmup_batches + args.batches_per_iter * args.iters
    size = str(args.image_size)
    ours = ["--model", model, "--image-size", size, "--num-classes", "1000", "--momentum", "0", "--scale-lr",
            "--epochs", "1", "--warmup-steps", str(args.warmup_batches), "--max-steps-per-epoch", str(steps),
            "--synthetic-train-size", str(32 * args.workers * steps), "--synthetic-test-size", "32",
            "--data-dir", str(out.parent.parent / "data"), "--output-dir", str(out), "--log-every", "1000"]
    command = {
        ARMS[0]: [*horovodrun, str(theirs(args, out)), "--no-cuda", *batches],
        ARMS[1]: [*horovodrun, "-m", "horovod_ddp.train", *ours],
        ARMS[2]: [*torchrun, str(PLAIN_DDP), *batches, "--image-size", size],
        ARMS[3]: [*torchrun, "-m", "native_ddp.train", *ours],
    }[arm]
    done = subprocess.run(command, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    (out / "output.log").write_text(done.stdout + done.stderr)
    if done.returncode:
        raise RunFailed(f"{arm} exited with {done.returncode}; see {out / 'output.log'}")
    if arm.endswith("ours"):
        doc = json.loads((out / results.FILENAME).read_text())
        return doc["epochs"][-1]["samples_per_s_median"], doc["epochs"][-1]["data_share"]
    if not (rates := ITER.findall(done.stdout)):
        raise RunFailed(f"{arm} printed no 'Iter #N: … img/sec per' line, so it measured nothing; is "
                        f"--horovod-benchmark Horovod's pytorch_synthetic_benchmark.py? (see {out / 'output.log'})")
    return args.workers * statistics.median(float(v) for v in rates), None


def theirs(args: argparse.Namespace, out: Path) -> Path:
    """Horovod's script as written, or at another --image-size a copy in `out` with its image shape alone changed."""
    if args.image_size == THEIRS_SIZE:
        return args.horovod_benchmark
    copy = out / args.horovod_benchmark.name
    copy.write_text(args.horovod_benchmark.read_text().replace(THEIRS_SHAPE, f"{args.image_size}, {args.image_size}"))
    return copy


def table(found: dict[str, dict[str, object]]) -> str:
    lines = ["| model | arm | total img/s per round | ours ÷ theirs, paired (95 % CI) | ours' data-loading share |",
             "|---|---|---|---|---|"]
    for model, answer in found.items():
        for backend, (theirs, ours) in PAIRS.items():
            if backend not in answer:
                continue
            ratio = answer[backend]
            interval = f"{ratio['ci95'][0]:.3f}–{ratio['ci95'][1]:.3f}" if ratio["ci95"] else "no interval"
            share = f"{100 * ratio['data_share']:.1f} %" if ratio["data_share"] is not None else "—"
            for arm in (theirs, ours):
                rates = ", ".join(f"{v:.1f}" for v in answer["img_per_s"][arm])
                cells = f"{ratio['ratio']:.3f} ({interval}) | {share}" if arm == ours else " | "
                lines.append(f"| {model} | {arm} | {rates} | {cells} |")
    return "\n".join(lines)


if __name__ == "__main__":
    cli.run(main)

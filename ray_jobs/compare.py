"""Native DDP or Horovod? Run both on Ray with the same settings, beside single-process references, and report.

    python -m ray_jobs.compare --workers 1,2 --epochs 2
    python -m ray_jobs.compare --render results/<run-id>     # re-render report.md and plots from comparison.json

Writes results/<run-id>/: each run's results.json, comparison.json, report.md, loss.png, throughput.png.
Exit code 1 when a run failed, or with --assert-parity when parity is FAIL.
"""

import argparse
import logging
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ray_jobs.cluster import RayRunOptions
from ray_jobs.train import BACKENDS as RAY_BACKENDS
from workload import cli, data, parity, reference, report, results
from workload.config import ConfigError, TrainConfig, check_backend_options

log = logging.getLogger(__name__)
BACKENDS = tuple(RAY_BACKENDS)
DEFAULT_TOLERANCE = 1e-4


def parse_workers(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise ConfigError(f"--workers takes a comma-separated list of positive integers, got {text!r}") from None
    if not counts or any(n <= 0 for n in counts) or len(set(counts)) != len(counts):
        raise ConfigError(f"--workers takes distinct positive integers, got {text!r}")
    return counts


def parse_backends(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in BACKENDS]
    if unknown or not names:
        named = ", ".join(unknown) or repr(text)
        raise ConfigError(f"unknown backend {named} in --backends; choose from {', '.join(BACKENDS)}")
    return names


def writable_root(path: str) -> Path:
    root = Path(path).expanduser().resolve()
    try:
        root.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=root).close()
    except OSError as error:
        raise ConfigError(f"--output-dir {root} is not writable ({error.strerror}); choose another folder") from None
    return root


def plan(workers: list[int], backends: list[str]) -> tuple[list[tuple[str, int]], list[dict[str, Any]]]:
    """The runs, in order, and what cannot run here with the reason."""
    runs, not_applicable = [], []
    for n in workers:
        runs.append(("reference", n))
        if n > 1:
            runs.append(("global-batch", n))
        runs += [(backend, n) for backend in backends]
        if n > 1:
            if reason := reference.dataparallel_unavailable(n):
                not_applicable.append({"backend": "dataparallel", "workers": n, "reason": reason})
            else:
                runs.append(("dataparallel", n))
    return runs, not_applicable


def execute(backend: str, cfg: TrainConfig) -> dict[str, Any]:
    if backend in RAY_BACKENDS:
        return RAY_BACKENDS[backend](cfg, RayRunOptions())
    return reference.train(cfg, mode=backend)


def compare(base: TrainConfig, workers: list[int], backends: list[str], root: Path, *, parity_steps: int,
            tolerance: float, target_accuracy: float) -> Path:
    """Run everything into root/<run-id>/ and render the report; returns that folder."""
    for backend in backends:
        check_backend_options(base, backend)
    base = data.resolve(base.with_absolute_paths())
    if backends:
        from ray_jobs.cluster import connect, require

        connect()  # one Ray cluster for every run
        require(max(workers), base.use_gpu)
    runs, not_applicable = plan(workers, backends)
    run_id = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    run_dir = root / run_id
    run_dir.mkdir(parents=True)
    started = time.monotonic()
    records = []
    for i, (backend, n) in enumerate(runs, 1):
        cfg = replace(base, workers=n, output_dir=str(run_dir / f"{backend}-{n}w"))
        log.info("[%d/%d] %s, %d worker(s): started at +%.0f s", i, len(runs), backend, n, time.monotonic() - started)
        try:
            doc = execute(backend, cfg)
            records.append({"backend": backend, "workers": n, "status": "ok", "error": None,
                            "results": str(Path(cfg.output_dir, results.FILENAME).relative_to(run_dir)),
                            **{k: doc[k] for k in ("epochs", "final", "step_losses", "peak_rss_mb_per_worker",
                                                   "parameters_identical_across_ranks",
                                                   "buffers_identical_across_ranks")}})
            log.info("[%d/%d] %s, %d worker(s): done, test accuracy %.2f%%, +%.0f s", i, len(runs), backend, n,
                     100 * doc["final"]["test_accuracy"], time.monotonic() - started)
        except Exception as error:  # noqa: BLE001 - a failed run is recorded in the report, and the rest go on
            message = " ".join(f"{type(error).__name__}: {error}".split())[:500]
            records.append({"backend": backend, "workers": n, "status": "failed", "error": message})
            log.error("[%d/%d] %s, %d worker(s): FAILED: %s", i, len(runs), backend, n, message)
    verdicts = {}
    for n in workers:
        losses = {r["backend"]: r["step_losses"] for r in records if r["workers"] == n and r["status"] == "ok"}
        verdicts[str(n)] = parity.verdict(losses, parity_steps, tolerance)
    comparison = {
        "schema_version": 1,
        "run_id": run_id,
        "settings": {"config": base.to_dict(), "workers": workers, "backends": backends,
                     "parity_steps": parity_steps, "tolerance": tolerance, "target_accuracy": target_accuracy},
        "environment": results.environment(),
        "wall_time_s": time.monotonic() - started,
        "runs": records,
        "not_applicable": not_applicable,
        "parity": verdicts,
    }
    results.write_json(run_dir / report.COMPARISON, comparison)
    return run_dir


def main() -> int:
    parser = cli.Parser(description=__doc__, prog="python -m ray_jobs.compare",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="1,2", help="worker counts to compare (default: 1,2)")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="distributed backends (default: native,horovod)")
    parser.add_argument("--output-dir", default="results", help="each comparison goes into <output-dir>/<run-id>/")
    parser.add_argument("--parity-steps", type=int, default=50, help="steps compared for parity (default: 50)")
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                        help=f"largest |step-loss difference| that passes (default: {DEFAULT_TOLERANCE:g})")
    parser.add_argument("--target-accuracy", type=float, default=0.95, help="for time to accuracy (default: 0.95)")
    parser.add_argument("--assert-parity", action="store_true", help="exit 1 unless parity is PASS everywhere")
    parser.add_argument("--render", metavar="DIR", help="only re-render DIR's report from its comparison.json")
    cli.add_config_flags(parser, exclude=("workers", "output_dir"))
    parser.set_defaults(epochs=2)
    args = parser.parse_args()
    if args.render:
        if not (Path(args.render) / report.COMPARISON).exists():
            raise ConfigError(f"{Path(args.render) / report.COMPARISON} does not exist; pass a results/<run-id> folder")
        log.info("%s", report.render(args.render))
        return 0
    workers = parse_workers(args.workers)
    backends = parse_backends(args.backends)
    if args.parity_steps <= 0 or not args.tolerance >= 0 or not 0 < args.target_accuracy <= 1:
        raise ConfigError("--parity-steps must be > 0, --tolerance >= 0 and --target-accuracy in (0, 1]")
    base = cli.config_from_args(args, workers=1, output_dir=".")
    run_dir = compare(base, workers, backends, writable_root(args.output_dir), parity_steps=args.parity_steps,
                      tolerance=args.tolerance, target_accuracy=args.target_accuracy)
    markdown = report.render(run_dir)
    comparison = report.load(run_dir)
    log.info("\n%s\nreport: %s", markdown, run_dir / "report.md")
    failed = [r for r in comparison["runs"] if r["status"] != "ok"]
    failing_parity = [n for n, v in comparison["parity"].items() if v["verdict"] != "PASS"]
    if failed:
        log.error("%d run(s) failed; see the report", len(failed))
        return 1
    if args.assert_parity and failing_parity:
        log.error("parity FAIL at %s worker(s)", ", ".join(failing_parity))
        return 1
    return 0


if __name__ == "__main__":
    cli.run(main)

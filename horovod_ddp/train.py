"""Horovod under horovodrun: the shared workload with hvd.DistributedOptimizer.

    horovodrun -np 2 --gloo python -m horovod_ddp.train --epochs 2

Each rank runs horovod_ddp/worker.py. Started without horovodrun it trains as a single worker. On Ray, use
python -m ray_jobs.train --backend horovod.
"""

import argparse
import os

from contract import options
from runtime import cli, flags, gpus, preflight, run_folder
from workload import data

# torch and Horovod are imported by the worker once the flags are good: --help and a refused flag answer at once.


def parser() -> cli.Parser:
    out = cli.Parser(description=__doc__, prog="horovodrun -np N python -m horovod_ddp.train",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    flags.add(out, exclude=("workers", *options.DDP_ONLY, *options.RAY_ONLY),
              defaults={"output_dir": run_folder.DEFAULT})
    return out


def main() -> int:
    args = parser().parse_args()
    output_dir = run_folder.resolve(args.output_dir, "horovod", "horovodrun")
    cfg = flags.from_args(args, output_dir=output_dir).with_absolute_paths()
    preflight.check_config(cfg)  # again with the world size once Horovod is up
    gpus.check(cfg.use_gpu, int(os.environ.get("HOROVOD_LOCAL_SIZE", "1")), horovod=True)  # horovodrun sets it
    data.check_known(cfg)  # data of a known size: refused before the group forms
    run_folder.announce(args.output_dir, output_dir)
    from horovod_ddp.worker import run_horovodrun

    return run_horovodrun(cfg)


if __name__ == "__main__":
    cli.run(main)

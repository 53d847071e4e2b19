"""Train one backend on a Ray cluster: the tutorials' ConvNet by default, or any model of the registry (--model).

    ray start --head
    ray job submit --address http://127.0.0.1:8265 --working-dir . -- \
        python -m ray_jobs.train --backend native --workers 2

Inside a Ray job (ray job submit) it joins the job's cluster; run directly it joins RAY_ADDRESS if set, else a
cluster started with ray start on this machine, else starts a Ray of its own for the run.
"""

import argparse

from contract import summary
from contract.config import BACKENDS
from launchers import on_ray
from launchers.ray_failures import RayRunOptions
from runtime import cli, flags, launch, run_folder

# torch and Ray are imported where a run needs them, not here: `--help` and a refused flag answer at once.


def parser() -> cli.Parser:
    out = cli.Parser(description=__doc__, prog="python -m ray_jobs.train",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    out.add_argument("--backend", choices=sorted(BACKENDS), default="native", help="native DDP or Horovod")
    flags.add(out, defaults={"output_dir": run_folder.DEFAULT})
    out.add_argument("--name", help="run name; the same name and storage path resume from the last checkpoint")
    out.add_argument("--storage-path", help="where Ray keeps checkpoints (default: ~/ray_results)")
    out.add_argument("--max-failures", type=int, default=0, help="restarts after a worker failure (default: 0)")
    return out


def main() -> int:
    args = parser().parse_args()
    start = launch.process_started()  # end to end, as the user waits: the process's start, imports included
    cfg = flags.from_args(args, output_dir=run_folder.resolve(args.output_dir, args.backend, "ray"))
    options = RayRunOptions(name=args.name, storage_path=args.storage_path, max_failures=args.max_failures)
    doc = on_ray.run(args.backend, cfg, options)
    doc = launch.finish(doc["config"]["output_dir"], start)
    summary.announce(doc)
    return 0


if __name__ == "__main__":
    cli.run(main)

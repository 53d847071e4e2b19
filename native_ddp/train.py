"""Native DDP under torchrun: the shared workload wrapped in DistributedDataParallel.

    torchrun --standalone --nproc-per-node 2 -m native_ddp.train --epochs 2

torchrun gives each rank its place; the worker (native_ddp/worker.py) creates the process group from it (gloo on
CPU, NCCL on GPU). On Ray, use python -m ray_jobs.train --backend native.
"""

import argparse
import os

from contract import options
from contract.config import ConfigError
from runtime import cli, flags, gpus, preflight, run_folder
from workload import data

# torch is imported by the worker once the flags are good: --help and a refused flag answer at once.


def parser() -> cli.Parser:
    out = cli.Parser(description=__doc__, prog="torchrun --nproc-per-node N -m native_ddp.train",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    flags.add(out, exclude=("workers", *options.HOROVOD_ONLY, *options.RAY_ONLY),
              defaults={"output_dir": run_folder.DEFAULT})
    return out


def main() -> int:
    args = parser().parse_args()
    output_dir = run_folder.resolve(args.output_dir, "native", "torchrun")
    cfg = flags.from_args(args, output_dir=output_dir).with_absolute_paths()
    if "LOCAL_RANK" not in os.environ:
        raise ConfigError("start this module with torchrun --nproc-per-node N -m native_ddp.train, "
                          "or use python -m ray_jobs.train --backend native")
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and int(os.environ["TORCHELASTIC_MAX_RESTARTS"]):
        # torch keeps the agent's rendezvous store for every attempt and its keys carry no attempt number, so
        # restarted ranks can read the dead ranks' gloo addresses: "Connection refused", or a hang in
        # connectFullMesh (pytorch#135712). The static rendezvous (torchrun's default) always shares it.
        raise ConfigError("torchrun --max-restarts restarts reliably only with a fresh store per attempt: run "
                          "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone (or --rdzv-backend c10d "
                          "--rdzv-endpoint HOST:PORT) ... (docs/faults.md)")
    preflight.check_config(cfg, horovod=False)  # again with the world size once the group exists
    gpus.check(cfg.use_gpu, int(os.environ.get("LOCAL_WORLD_SIZE", "1")), horovod=False)
    data.check_known(cfg)  # data of a known size: refused before the group forms
    run_folder.announce(args.output_dir, output_dir)
    from native_ddp.worker import run_launched

    return run_launched(cfg, "torchrun")


if __name__ == "__main__":
    cli.run(main)

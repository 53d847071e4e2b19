"""--use-gpu, checked before anything starts: a GPU for every rank this host runs, and a Horovod whose GPU
collectives are NCCL's (a Gloo-only Horovod would stage every allreduce through host memory, a fight about the
build rather than the framework). torch and Horovod are imported only when --use-gpu asks."""

from contract.config import ConfigError
from runtime import preflight

REBUILD = ("rebuild it with NCCL: `.venv/bin/python tools/build_horovod.py` on a machine with a CUDA toolkit (nvcc) "
           "and NCCL, where torch sees the GPUs (docs/install.md)")


def check(use_gpu: bool, ranks: int, horovod: bool) -> None:
    """Room for each of the `ranks` this host starts: with --use-gpu a GPU each, and for Horovod a build with NCCL;
    else cores (preflight.check_cores)."""
    if not use_gpu:
        preflight.check_cores(ranks)
        return
    import torch

    if (have := torch.cuda.device_count()) < ranks:
        raise ConfigError(f"--use-gpu gives every rank a GPU of its own: {ranks} rank(s) on this host need {ranks} "
                          f"GPU(s), and torch sees {have} here; drop --use-gpu or start fewer ranks")
    if horovod:
        check_horovod_nccl()


def check_horovod_nccl() -> None:
    """A Horovod that averages GPU tensors with NCCL, as DDP does."""
    try:
        import horovod.torch as hvd
    except ImportError:
        return  # the run itself says how to install Horovod (horovod_ddp/adapter.py)
    if not hvd.nccl_built():
        raise ConfigError(f"--use-gpu: this Horovod was built without NCCL (Gloo alone), so its GPU gradients would go "
                          f"through host memory while DDP's go over NCCL; {REBUILD}")

"""Horovod's worker entry points: one horovodrun rank, and the function horovod.ray.RayExecutor runs on each Ray
worker. Each runs the Horovod adapter (horovod_ddp/adapter.py) inside the rank's life (workload/lifecycle.py).

`run_horovodrun` is one rank of `horovodrun -np 4 python -m horovod_ddp.train [flags]` (Gloo here; NCCL where
Horovod is built for GPUs); `ray_worker` is one of `python -m ray_jobs.train --backend horovod`.
"""

import logging
import os
from dataclasses import replace
from typing import Any, NoReturn

from contract.config import TrainConfig
from horovod_ddp.adapter import init, lost_peer, shutdown, train
from runtime import preflight
from workload import data, placement
from workload.distributed import DistContext
from workload.lifecycle import Framework, leave_without_teardown, run_rank
from workload.run import on_main, resolve_dataset, resume_state

log = logging.getLogger(__name__)
# Horovod: hvd.init() forms the ring under either launcher, and hvd.shutdown() leaves it.
HOROVOD = Framework(init=init, lost_peer=lost_peer, shutdown=shutdown)


def ray_worker(config: dict[str, Any], restarts: int = 0,
               exported: dict[str, str] | None = None) -> dict[str, Any] | None:
    """The function horovod.ray.RayExecutor runs on each Ray worker; `restarts`: earlier failed attempts;
    `exported`: the driver's interface settings that the executor overwrote (framework_env.KEPT_ON_RAY)."""
    cfg = TrainConfig.from_dict(config)
    os.environ.update(exported or {})  # Horovod: the executor set NCCL_SOCKET_IFNAME to what it detected
    if interface := placement.link_interface():
        # Horovod: RayExecutor picks the interface from the workers' hostnames, and where they are all alike
        # (nodes simulated on one host) it picks loopback, which crosses no link; the interface the node names for
        # gloo, which DDP's gloo takes, wins, so that both backends talk over the same link. (Horovod 0.28.1's
        # process-set device ignores this and resolves the hostname: the simulated cluster gives each node its own.)
        os.environ["HOROVOD_GLOO_IFACE"] = interface
    return run_rank(HOROVOD, "ray", cfg, lambda ctx, watchdog: train(ctx, cfg, "ray", watchdog, restarts))


def run_horovodrun(cfg: TrainConfig) -> NoReturn:
    """One horovodrun rank (or a single worker when started without it), `cfg` already checked by
    horovod_ddp.train."""

    def body(ctx: DistContext, watchdog) -> dict[str, Any] | None:
        rank_cfg = replace(cfg, workers=ctx.world_size)
        preflight.check_config(rank_cfg)  # every rank checks alike, so a refusal ends them all before any collective
        data.check_known(rank_cfg)
        on_main(ctx, lambda: resume_state(rank_cfg, "horovod", "horovodrun"))  # refused before any data is written
        rank_cfg = resolve_dataset(ctx, rank_cfg)  # its `dataset:` line is the run's first
        if ctx.world_size == 1 and "HOROVOD_RANK" not in os.environ:  # Horovod: horovodrun -np 1 sets it too
            log.info("not started by horovodrun: running as a single worker "
                     "(use horovodrun -np N python -m horovod_ddp.train for N)")
        return train(ctx, rank_cfg, "horovodrun", watchdog)

    run_rank(HOROVOD, "horovodrun", cfg, body)
    leave_without_teardown()

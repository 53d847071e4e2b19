"""Run as `horovodrun -np 2 python -m tests.stalled_peer SECONDS`: rank 1 never joins the allreduce, as a hung or deadlocked peer would not.

Used by the stall test: the shared watchdog must end the job within its bound instead of hanging.
"""

import sys
import time

import torch

from contract.config import TrainConfig
from horovod_ddp.adapter import init
from workload.watchdog import Watchdog

ctx = init(TrainConfig())
with Watchdog(float(sys.argv[1])):
    if ctx.rank == 1:
        time.sleep(600)
    else:
        ctx.all_reduce(torch.ones(1), "sum")

"""One rank of tools/host_costs.py: what each framework's host does per gradient and at a step's end, on a model of
N tiny parameters (its compute negligible), beside the same model with no framework in the same process.

    torchrun --standalone --nproc-per-node 2 tools/host_costs_rank.py --backend native --tensors 20,161,640
    horovodrun -np 2 --gloo python tools/host_costs_rank.py --backend horovod --tensors 20,161,640

Per step, on rank 0: backward (DDP: its reducer's hooks and its bucket's allreduce; Horovod: a Python hook per
gradient that enqueues it), and the step's end: DDP's optimizer.step(); Horovod's optimizer.step() once every
allreduce has finished (50 ms after backward, in both arms), so what it times is the host's own work, its
synchronize() loop over the handles, not a wait for the network. The plain model's backward and step are timed in
the same step. Rank 0 prints one JSON line per N: the medians, in seconds.
"""

import argparse
import json
import statistics
import time

import torch

WIDTH = 16
"""Each parameter's elements: small enough that its compute and its bytes are negligible beside the host's work."""
SETTLE_S = 0.05
"""Slept after each backward, the plain model's too: Horovod's allreduces of a few kB (one fused buffer, a 1 ms cycle)
are done by then, so the step that follows times the host's work and not the network's."""

parser = argparse.ArgumentParser()
parser.add_argument("--backend", choices=("native", "horovod"), required=True)
parser.add_argument("--tensors", default="20,161,640", help="the models' parameter counts, comma-separated")
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--warmup", type=int, default=10)
args = parser.parse_args()
torch.set_num_threads(1)


class Tiny(torch.nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.weights = torch.nn.ParameterList(torch.nn.Parameter(torch.randn(WIDTH)) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum((x * w).sum() for w in self.weights)


if args.backend == "horovod":
    import horovod.torch as hvd
    hvd.init()  # Horovod: rank and size from horovodrun
    rank = hvd.rank()
else:
    import torch.distributed as dist
    dist.init_process_group("gloo")  # DDP: rank and world size from torchrun's environment
    rank = dist.get_rank()


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


for n in (int(t) for t in args.tensors.split(",")):
    torch.manual_seed(0)
    plain, framework = Tiny(n), Tiny(n)
    plain_opt = torch.optim.SGD(plain.parameters(), lr=0.01)
    if args.backend == "horovod":
        hvd.broadcast_parameters(framework.state_dict(), root_rank=0)  # Horovod: rank 0's weights everywhere
        opt = hvd.DistributedOptimizer(torch.optim.SGD(framework.parameters(), lr=0.01),
                                       named_parameters=framework.named_parameters())
        model = framework
    else:
        model = torch.nn.parallel.DistributedDataParallel(framework)  # DDP: broadcasts rank 0's weights
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(WIDTH)
    found: dict[str, list[float]] = {"backward": [], "step": [], "plain_backward": [], "plain_step": []}
    for step in range(args.warmup + args.steps):
        plain_opt.zero_grad()
        loss = plain(x)
        plain_back = timed(loss.backward)
        time.sleep(SETTLE_S)  # as before the framework's step: a step after a sleep starts with colder caches
        plain_step = timed(plain_opt.step)
        opt.zero_grad()
        loss = model(x)
        back = timed(loss.backward)
        time.sleep(SETTLE_S)
        end = timed(opt.step)
        if step >= args.warmup:
            for key, value in zip(found, (back, end, plain_back, plain_step)):
                found[key].append(value)
    if rank == 0:
        print(json.dumps({"backend": args.backend, "tensors": n,
                          **{key: statistics.median(values) for key, values in found.items()}}), flush=True)

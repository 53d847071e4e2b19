"""One rank of tools/host_costs.py: what each framework's host does per gradient and at a step's end, on a model of
N tiny parameters (its compute negligible), beside the same model with no framework in the same process.

    torchrun --standalone --nproc-per-node 2 tools/host_costs_rank.py --backend native --tensors 20,161,640
    horovodrun -np 2 --gloo python tools/host_costs_rank.py --backend horovod --tensors 20,161,640
    torchrun --standalone --nproc-per-node 1 tools/host_costs_rank.py --backend native --device cuda --model resnet50

Per step, on rank 0: backward (DDP: its reducer's hooks and its bucket's allreduce; Horovod: a Python hook per
gradient that enqueues it), and the step's end: DDP's optimizer.step(); Horovod's optimizer.step() once every
allreduce has finished (a pause after backward, in both arms), so what it times is the host's own work, its
synchronize() loop over the handles, not a wait for the network. The plain model's backward and step are timed in
the same step. Rank 0 prints one JSON line per N: the medians, in seconds.

On a GPU (--device cuda) the times are the host's: a kernel's launch, not its run. --model then also times whole
steps of that torchvision model back to back, the plain copy's and the framework's in alternating blocks, each block
ended by a synchronize: what the framework adds to a GPU step, its wait on the device included, and the plain copy's
rate, one GPU's with no framework (torch's defaults: TF32 convolutions, cuDNN's autotuner off):

    torchrun --standalone --nproc-per-node 1 tools/host_costs_rank.py --backend native --device cuda --tensors "" \
        --model resnet50 --batch 256 --amp bf16
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch

WIDTH = 16
"""Each parameter's elements: small enough that its compute and its bytes are negligible beside the host's work."""
SETTLE_S = {"cpu": 0.05, "cuda": 0.01}
"""Slept after each backward, the plain model's too: Horovod's allreduces of a few kB (one fused buffer, a 1 ms cycle)
are done by then, so the step that follows times the host's work and not the network's."""

parser = argparse.ArgumentParser()
parser.add_argument("--backend", choices=("native", "horovod"), required=True)
parser.add_argument("--tensors", default="20,161,640", help="the models' parameter counts, comma-separated (or \"\")")
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--warmup", type=int, default=10)
parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
parser.add_argument("--model", default="", help="a torchvision model whose whole steps are timed too (e.g. resnet50)")
parser.add_argument("--batch", type=int, default=32, help="--model's batch (224 px images)")
parser.add_argument("--blocks", type=int, default=6, help="--model's timed blocks per arm, alternating")
parser.add_argument("--amp", choices=("none", "bf16"), default="none", help="--model's forward in bf16 autocast")
args = parser.parse_args()
if args.device == "cuda" and not torch.cuda.is_available():
    print("error: --device cuda measures a GPU, and torch sees none here: run it on a machine with an NVIDIA GPU, or "
          "leave --device cuda out", file=sys.stderr)
    raise SystemExit(2)
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
    rank, local = hvd.rank(), hvd.local_rank()
else:
    import torch.distributed as dist
    # DDP: rank and world size from torchrun's environment
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    rank, local = dist.get_rank(), int(os.environ["LOCAL_RANK"])
if args.device == "cuda":
    torch.cuda.set_device(local)
device = torch.device(args.device, local) if args.device == "cuda" else torch.device("cpu")


def synchronize() -> None:
    if args.device == "cuda":
        torch.cuda.synchronize()


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def pair(make) -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.nn.Module, torch.optim.Optimizer]:
    """Two copies of `make()` from the same seed: the plain one with its optimizer, and the framework's model and
    optimizer around the other."""
    torch.manual_seed(0)
    plain, module = make().to(device), make().to(device)
    plain_opt = torch.optim.SGD(plain.parameters(), lr=0.01)
    if args.backend == "horovod":
        hvd.broadcast_parameters(module.state_dict(), root_rank=0)  # Horovod: rank 0's weights everywhere
        opt = hvd.DistributedOptimizer(torch.optim.SGD(module.parameters(), lr=0.01),
                                       named_parameters=module.named_parameters())
        if hvd.size() == 1:
            opt._register_hooks()  # Horovod: it hooks only past one rank; one GPU times its hooks as two would
        return plain, plain_opt, module, opt
    ids = [local] if args.device == "cuda" else None
    model = torch.nn.parallel.DistributedDataParallel(module, device_ids=ids)  # DDP: broadcasts rank 0's weights
    return plain, plain_opt, model, torch.optim.SGD(model.parameters(), lr=0.01)


def tiny(n: int) -> dict[str, float]:
    plain, plain_opt, model, opt = pair(lambda: Tiny(n))
    x = torch.randn(WIDTH, device=device)
    found: dict[str, list[float]] = {"backward": [], "step": [], "plain_backward": [], "plain_step": []}

    def times(net: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[float, float]:
        optimizer.zero_grad()
        back = timed(net(x).backward)
        time.sleep(SETTLE_S[args.device])  # in both arms: a step after a sleep has colder caches
        return back, timed(optimizer.step)

    for step in range(args.warmup + args.steps):
        plain_back, plain_step = times(plain, plain_opt)
        back, end = times(model, opt)
        if step >= args.warmup:
            for key, value in zip(found, (back, end, plain_back, plain_step)):
                found[key].append(value)
    return {"tensors": n, **{key: statistics.median(values) for key, values in found.items()}}


def whole_steps(name: str) -> dict[str, object]:
    """Seconds a step of `name`, plain and under the framework, medians over alternating blocks of back-to-back
    steps."""
    import torchvision

    plain, plain_opt, model, opt = pair(lambda: torchvision.models.get_model(name, weights=None))
    x = torch.randn(args.batch, 3, 224, 224, device=device)
    y = torch.randint(0, 1000, (args.batch,), device=device)
    loss_fn = torch.nn.CrossEntropyLoss()

    def block(net: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int) -> float:
        synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            optimizer.zero_grad()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.amp == "bf16"):
                loss = loss_fn(net(x), y)
            loss.backward()
            optimizer.step()
        synchronize()
        return (time.perf_counter() - start) / steps

    block(plain, plain_opt, args.warmup), block(model, opt, args.warmup)
    plain_s, framework_s = [], []
    for _ in range(args.blocks):
        plain_s.append(block(plain, plain_opt, args.steps))
        framework_s.append(block(model, opt, args.steps))
    return {"model": name, "batch": args.batch, "amp": args.amp, "plain_step": statistics.median(plain_s),
            "step": statistics.median(framework_s), "plain_blocks": plain_s, "blocks": framework_s,
            "plain_images_per_s": args.batch / statistics.median(plain_s)}


found = [tiny(int(t)) for t in args.tensors.split(",") if t]
if args.model:
    found.append(whole_steps(args.model))
if rank == 0:
    for line in found:
        print(json.dumps({"backend": args.backend, **line}), flush=True)

"""A plain DDP loop: Horovod's `examples/pytorch/pytorch_synthetic_benchmark.py` with DistributedDataParallel in
place of DistributedOptimizer, and nothing of this project's code, the baseline the native arm is held against.

    torchrun --standalone --nproc-per-node 2 tools/plain_ddp_benchmark.py --model resnet18 --num-iters 5

Like Horovod's script: a torchvision model (weights=None), one fixed batch of 3 x 224 x 224 random images (or
--image-size) of 1000 classes, SGD at 0.01 x the world size, warm-up batches left out, then img/sec per iteration of
a few batches; rank 0 prints them as Horovod's script does, so one parser reads both.
"""

import argparse
import timeit

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torchvision import models

parser = argparse.ArgumentParser(description="A plain DDP synthetic benchmark",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
parser.add_argument("--model", type=str, default="resnet50", help="model to benchmark")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size")
parser.add_argument("--num-warmup-batches", type=int, default=10, help="warm-up batches left out")
parser.add_argument("--num-batches-per-iter", type=int, default=10, help="batches per benchmark iteration")
parser.add_argument("--num-iters", type=int, default=10, help="benchmark iterations")
parser.add_argument("--image-size", type=int, default=224, help="images are 3 x this x this")
args = parser.parse_args()

dist.init_process_group("gloo")  # DDP: rank and world size from torchrun's environment
model = DistributedDataParallel(getattr(models, args.model)())  # DDP: broadcasts rank 0's weights
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * dist.get_world_size())
data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
target = torch.LongTensor(args.batch_size).random_() % 1000


def benchmark_step() -> None:
    optimizer.zero_grad()
    F.cross_entropy(model(data), target).backward()  # DDP: averages the gradients inside backward
    optimizer.step()


def log(text: str) -> None:
    if dist.get_rank() == 0:
        print(text, flush=True)


log(f"Model: {args.model}")
log(f"Batch size: {args.batch_size}")
log(f"Number of CPUs: {dist.get_world_size()}")
timeit.timeit(benchmark_step, number=args.num_warmup_batches)
img_secs = []
for x in range(args.num_iters):
    img_sec = args.batch_size * args.num_batches_per_iter / timeit.timeit(benchmark_step,
                                                                          number=args.num_batches_per_iter)
    log(f"Iter #{x}: {img_sec:.1f} img/sec per CPU")
    img_secs.append(img_sec)
mean, conf = np.mean(img_secs), 1.96 * np.std(img_secs)
log(f"Img/sec per CPU: {mean:.1f} +-{conf:.1f}")
log(f"Total img/sec on {dist.get_world_size()} CPU(s): {dist.get_world_size() * mean:.1f} "
    f"+-{dist.get_world_size() * conf:.1f}")
dist.destroy_process_group()

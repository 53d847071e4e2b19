"""One rank of tools/first_step_gradients.py: the first step's averaged gradients, as the project's DDP or Horovod arm
averages them (DDP's default buckets; Horovod's DistributedOptimizer, op=Average, its default fusion), from the same
model, seed and shard the arm trains on. Rank 0 saves them, one tensor per parameter, to --output.

    torchrun --standalone --nproc-per-node 3 tools/first_step_gradients_rank.py --backend native --config C --output G
    horovodrun -np 3 --gloo python tools/first_step_gradients_rank.py --backend horovod --config C --output G
"""

import argparse
import json

import torch
import torch.nn.functional as F

from contract.config import TrainConfig
from workload import data
from workload.run import build_model
from workload.trainer import shard_loader

parser = argparse.ArgumentParser()
parser.add_argument("--backend", choices=("native", "horovod"), required=True)
parser.add_argument("--config", required=True, help="a TrainConfig as JSON (TrainConfig.to_dict)")
parser.add_argument("--output", required=True)
args = parser.parse_args()
cfg = TrainConfig.from_dict(json.loads(open(args.config).read()))
torch.set_num_threads(1)
if args.backend == "native":
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
else:
    import horovod.torch as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
model = build_model(cfg, torch.device("cpu"))
loader = shard_loader(data.load(cfg), cfg, rank, size)
loader.sampler.set_epoch(1)  # the trainer's first epoch
images, labels = next(iter(loader))
images = data.inputs(images)  # synthetic images come as their bytes
model.train()
if args.backend == "native":
    net = torch.nn.parallel.DistributedDataParallel(model)  # DDP: the arm's defaults
    F.cross_entropy(net(images), labels).backward()
else:
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=cfg.lr),
                                         named_parameters=model.named_parameters(), op=hvd.Average)
    F.cross_entropy(model(images), labels).backward()
    optimizer.synchronize()  # Horovod: every gradient averaged, as its step would see them
if rank == 0:
    torch.save([p.grad.detach().clone() for p in model.parameters()], args.output)

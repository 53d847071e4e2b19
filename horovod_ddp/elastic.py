"""Horovod's elastic mode, inside a rank: hvd.elastic.run, a TorchState committed in memory, ElasticSampler
resharding on a reset. A lost peer rolls back to the last commit; a host that came back joins at the next check,
from the state as it is now. What is shared with the other modes: workload/elastic.py."""

import torch

from contract.config import TrainConfig
from horovod_ddp.adapter import HorovodGradientSync
from workload import data, elastic
from workload.trainer import build_optimizer

CHECK_EVERY = 10
"""Steps between Horovod's checks for a host that came back (check_host_updates: it grows without a rollback)."""


def horovod_fn(values: dict) -> int:
    """The function RayExecutor runs on each worker; its rank."""
    import horovod.torch as hvd
    from horovod.torch.elastic import ElasticSampler

    hvd.init()
    cfg = TrainConfig.from_dict(values)
    module, splits = elastic.setup(cfg)
    # Horovod: its optimizer averages the gradients; the broadcast of the state is TorchState's on every reset.
    optimizer = hvd.DistributedOptimizer(build_optimizer(module, cfg, 1), named_parameters=module.named_parameters())
    sampler = ElasticSampler(splits.train, shuffle=True, seed=cfg.seed)  # Horovod: reshards what is left on a reset
    state = hvd.elastic.TorchState(model=module, optimizer=optimizer, train_sampler=sampler, epoch=0)  # Horovod
    loader = torch.utils.data.DataLoader(splits.train, batch_size=cfg.batch_size, sampler=sampler)
    trainer = elastic.trainer(cfg, module, module, optimizer,
                              HorovodGradientSync(optimizer, module, hvd.Compression.none, None), splits)

    @hvd.elastic.run  # Horovod: a lost peer restores the last commit, a returning host interrupts at a check
    def train(state) -> None:
        rank, world = hvd.rank(), hvd.size()
        if rank == 0:
            elastic.note(cfg, "start", world=world, epoch=state.epoch, offset=state.train_sampler.processed_num)
        while state.epoch < cfg.epochs:
            for i, (images, labels) in enumerate(loader, 1):
                trainer.train_step([[(data.inputs(images), labels)]])
                state.train_sampler.record_batch(i, cfg.batch_size)
                if rank == 0:
                    elastic.note(cfg, "step", world=world, epoch=state.epoch, n=len(labels) * world,
                                 offset=min(state.train_sampler.processed_num, len(splits.train)))
                if i % CHECK_EVERY == 0:
                    state.check_host_updates()  # Horovod: a host came back: grow now, without a rollback
            state.epoch += 1
            state.train_sampler.set_epoch(state.epoch)
            state.commit()  # Horovod: in memory, on every rank
        if rank == 0:
            elastic.note(cfg, "done", accuracy=elastic.accuracy(trainer))

    train(state)
    return hvd.rank()

"""Lose a node and get it back: Ray Train V2 elastic, Horovod elastic on Ray and torchrun --nnodes 1:2, side by side.

    python experiments/elastic/probe.py --trials 2 --return-after-s 60      # as root; about 6 min a round

Each framework's own elastic mechanism in plain framework code, none of this project's training code: the
simulated cluster (experiments/simulated_cluster/netsim.py) only gives the two nodes, one worker each. After step 10 of epoch 1 at full
size, every process of node 1 is SIGKILLed (Ray's raylet and worker, or the torchrun agent and its rank); after
--return-after-s the node comes back (`ray start --address`, or a new agent). Modes are interleaved, trial by trial.

- ray-train: TorchTrainer, ScalingConfig(num_workers=(1, 2), elastic_resize_monitor_interval_s=5),
  FailureConfig(max_failures=5), a checkpoint through train.report every 10 steps.
  RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S is 15 (default 60): the controller decides on 2 workers again before the
  GCS has marked the node dead (~20 s), and with the default it waits a minute for the lost node instead of going
  on with one.
- horovod-ray: RayExecutor(min_workers=1, max_workers=2, cooldown_range=[10, 30]), hvd.elastic.run, TorchState
  committed every 10 steps (in memory). Without cooldown_range a host that failed stays blacklisted for good and the
  job never grows back.
- torchrun: one agent per node, --nnodes 1:2, the c10d rendezvous on node 0, --max-restarts 5,
  TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (pytorch#135712), a file checkpoint every 10 steps; torch's defaults otherwise.

Data: the epoch's shuffled order is cut from the resumed sample offset into global steps of world x 100 samples, so
a change of world size reshards the rest of the epoch (no sample skipped or seen twice in an epoch, except the steps
since the last saved state, which are trained again: "samples trained twice"). The learning rate is fixed; the global
batch follows the world size. The step is a small MLP plus a fixed 50 ms (a stand-in for compute): the times
measure the frameworks' membership handling, not the model. Rank 0 writes every step to <trial>/timeline.jsonl.
"""

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from experiments.elastic import node_loss

MODES = ("ray-train", "horovod-ray", "torchrun")
BATCH, STEP_S, SAVE_EVERY, LR = 100, 0.05, 10, 0.01
KILL_EPOCH, KILL_STEP = node_loss.KILL_EPOCH, node_loss.KILL_STEP
FULL, TRIAL_TIMEOUT_S = 2, 600


# --- inside a rank: the same step, data order and timeline under every framework ---

def _note(ev: str, **fields) -> None:
    with open(Path(os.environ["EP_DIR"]) / "timeline.jsonl", "a") as out:
        out.write(json.dumps({"ev": ev, "t": time.time(), **fields}) + "\n")


def _setup():
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    samples = int(os.environ["EP_SAMPLES"])
    generator = torch.Generator().manual_seed(1)
    data = (torch.randn(samples, 784, generator=generator), torch.randint(0, 10, (samples,), generator=generator))
    return model, data


def _steps(epoch: int, offset: int, world: int, rank: int, samples: int):
    """The epoch's order from `offset` on, in global steps of world x BATCH: (offset after, step size, my indices)."""
    import torch
    order = torch.randperm(samples, generator=torch.Generator().manual_seed(epoch))
    while offset < samples:
        take = min(world * BATCH, samples - offset)
        yield offset + take, take, order[offset + rank:offset + take:world]
        offset += take


def _train_step(model, optimizer, data, mine) -> None:
    import torch
    loss = torch.nn.functional.cross_entropy(model(data[0][mine]), data[1][mine])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    time.sleep(STEP_S)


def _next(epoch: int, offset: int, samples: int) -> tuple[int, int]:
    return (epoch, offset) if offset < samples else (epoch + 1, 0)


def _state(model, optimizer, epoch: int, offset: int) -> dict:
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch, "offset": offset}


def _resume(model, optimizer, state: dict) -> tuple[int, int]:
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["epoch"], state["offset"]


def _train(model, optimizer, data, rank: int, world: int, epoch: int, offset: int, save) -> None:
    """Every epoch from (epoch, offset) on (Ray Train's and torchrun's loop); `save(epoch, offset)` every SAVE_EVERY
    steps and at each epoch's end, with the position to resume from."""
    samples, epochs = int(os.environ["EP_SAMPLES"]), int(os.environ["EP_EPOCHS"])
    if rank == 0:
        _note("start", world=world, epoch=epoch, offset=offset)
    for e in range(epoch, epochs):
        for i, (done, take, mine) in enumerate(_steps(e, offset if e == epoch else 0, world, rank, samples), 1):
            _train_step(model, optimizer, data, mine)
            if rank == 0:
                _note("step", world=world, epoch=e, offset=done, n=take)
            if i % SAVE_EVERY == 0 or done == samples:
                save(*_next(e, done, samples))
    if rank == 0:
        _note("done")


def ray_train_loop(config: dict) -> None:
    import torch
    from ray import train
    from ray.train import Checkpoint
    context = train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    model, data = _setup()
    model = train.torch.prepare_model(model)  # DDP when world > 1
    plain = getattr(model, "module", model)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    epoch = offset = 0
    if checkpoint := train.get_checkpoint():
        with checkpoint.as_directory() as folder:
            epoch, offset = _resume(plain, optimizer, torch.load(Path(folder) / "state.pt"))

    def save(epoch: int, offset: int) -> None:  # every rank reports; rank 0's report carries the checkpoint
        with tempfile.TemporaryDirectory() as folder:
            if rank == 0:
                torch.save(_state(plain, optimizer, epoch, offset), Path(folder) / "state.pt")
                train.report({"epoch": epoch}, checkpoint=Checkpoint.from_directory(folder))
            else:
                train.report({"epoch": epoch})

    _train(model, optimizer, data, rank, world, epoch, offset, save)


def horovod_fn() -> int:
    import torch
    import horovod.torch as hvd
    hvd.init()
    model, data = _setup()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR),
                                         named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, epoch=0, offset=0)
    samples, epochs = int(os.environ["EP_SAMPLES"]), int(os.environ["EP_EPOCHS"])

    @hvd.elastic.run
    def train(state) -> None:
        rank, world = hvd.rank(), hvd.size()
        if rank == 0:
            _note("start", world=world, epoch=state.epoch, offset=state.offset)
        while state.epoch < epochs:
            for i, (done, take, mine) in enumerate(_steps(state.epoch, state.offset, world, rank, samples), 1):
                _train_step(model, optimizer, data, mine)
                state.offset = done
                if rank == 0:
                    _note("step", world=world, epoch=state.epoch, offset=done, n=take)
                if i % SAVE_EVERY == 0 and done < samples:
                    state.commit()
            state.epoch, state.offset = state.epoch + 1, 0
            state.commit()
        if rank == 0:
            _note("done")

    train(state)
    return hvd.rank()


def torchrun_main() -> None:
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model, data = _setup()
    model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    path = Path(os.environ["EP_DIR"]) / "checkpoint.pt"
    epoch, offset = _resume(model.module, optimizer, torch.load(path)) if path.exists() else (0, 0)

    def save(epoch: int, offset: int) -> None:
        if rank == 0:
            torch.save(_state(model.module, optimizer, epoch, offset), path.with_suffix(".tmp"))
            path.with_suffix(".tmp").replace(path)

    _train(model, optimizer, data, rank, world, epoch, offset, save)
    dist.destroy_process_group()


# --- the drivers, inside node 0 ---

def _ray_init() -> None:
    import ray
    # Ray's workers start from the raylet's environment, not the driver's: the trial's settings go with the job.
    ray.init(runtime_env={"env_vars": {k: os.environ[k] for k in ("EP_DIR", "EP_EPOCHS", "EP_SAMPLES",
                                                                   "OMP_NUM_THREADS")}})


def ray_train_driver() -> int:
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    _ray_init()
    trainer = TorchTrainer(ray_train_loop,
                           scaling_config=ScalingConfig(num_workers=(1, FULL), use_gpu=False,
                                                        elastic_resize_monitor_interval_s=5),
                           run_config=RunConfig(name="probe", storage_path=str(Path(os.environ["EP_DIR"]) / "ray"),
                                                failure_config=FailureConfig(max_failures=5)))
    return 0 if trainer.fit().error is None else 1


def horovod_ray_driver() -> int:
    from horovod.ray import RayExecutor
    _ray_init()
    settings = RayExecutor.create_settings(timeout_s=30, nics={os.environ["HOROVOD_GLOO_IFACE"]})  # the harness's
    executor = RayExecutor(settings, min_workers=1, max_workers=FULL, cpus_per_worker=1, use_gpu=False,
                           override_discovery=True, cooldown_range=[10, 30])
    executor.start()
    try:
        executor.run(horovod_fn)
    finally:
        executor.shutdown()
    return 0


# --- the harness, on the host ---

def trial(mode: str, folder: Path, args: argparse.Namespace) -> dict:
    from experiments.elastic import report as elastic
    from experiments.elastic import node_loss
    env = {"EP_DIR": str(folder), "EP_EPOCHS": str(args.epochs), "EP_SAMPLES": str(args.samples),
           "OMP_NUM_THREADS": "1"}
    if mode == "torchrun":
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    run = node_loss.run(
        folder, nodes=FULL, env=env, timeout_s=TRIAL_TIMEOUT_S, return_after_s=args.return_after_s,
        kill_when=lambda e: e["world"] == FULL and e["epoch"] >= KILL_EPOCH and e["offset"] >= KILL_STEP * FULL * BATCH,
        driver=None if mode == "torchrun" else [sys.executable, __file__, "--role", mode],
        agent=lambda sim, node: node_loss.torchrun_agent(sim, node, 1, [__file__, "--role", "torchrun"]))
    result = {"mode": mode, "exit": run["exit"], "killed": run["killed"], "returned": run["returned"],
              **elastic.figures(run["events"], run["killed"], run["returned"], args.epochs, args.samples, FULL)}
    result.pop("accuracy")
    result["finished"] = result["finished"] and run["exit"] == 0
    return result


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    out.add_argument("--role", choices=MODES, help=argparse.SUPPRESS)
    out.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, from {', '.join(MODES)}")
    out.add_argument("--trials", type=int, default=1, help="trials per mode (default: 1)")
    out.add_argument("--return-after-s", type=float, default=60,
                     help="seconds from the loss to node 1's return (default: 60)")
    out.add_argument("--epochs", type=int, default=30, help="epochs per run (default: 30)")
    out.add_argument("--samples", type=int, default=6000, help="samples per epoch, a multiple of 200 "
                                                               "(default: 6000)")
    out.add_argument("--output-dir", default="results/elastic-probe")
    return out


def main() -> int:
    args = parser().parse_args()
    if args.role:
        if args.role == "torchrun":
            torchrun_main()
            return 0
        return ray_train_driver() if args.role == "ray-train" else horovod_ray_driver()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    problem = ("--modes takes distinct names from " + ", ".join(MODES)
               if not modes or set(modes) - set(MODES) or len(set(modes)) != len(modes) else
               "--trials must be >= 1" if args.trials < 1 else
               "--return-after-s must be > 0" if args.return_after_s <= 0 else
               f"--epochs must be > {KILL_EPOCH + 1}" if args.epochs <= KILL_EPOCH + 1 else
               f"--samples must be a multiple of {FULL * BATCH}, at least {2 * KILL_STEP * FULL * BATCH}"
               if args.samples < 2 * KILL_STEP * FULL * BATCH or args.samples % (FULL * BATCH) else "")
    from experiments.simulated_cluster import netsim
    from contract.config import ConfigError
    try:
        netsim.check_host(2)
    except ConfigError as error:
        problem = problem or str(error)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    os.environ["RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"] = "15"
    os.environ["HOROVOD_GLOO_IFACE"] = netsim.INTERFACE
    root = Path(args.output_dir).resolve() / datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    results = []
    for index in range(1, args.trials + 1):
        for mode in modes:  # interleaved
            result = trial(mode, root / f"{mode}-{index}", args)
            print(f"{mode} trial {index}: {json.dumps({k: v for k, v in result.items() if k != 'mode'})}",
                  flush=True)
            results.append(result)
    (root / "elastic_probe.json").write_text(json.dumps({"return_after_s": args.return_after_s,
                                                         "trials": results}, indent=1))
    print(f"\nNode 1 lost after step {KILL_STEP} of epoch {KILL_EPOCH}, back after {args.return_after_s:g} s:\n")
    from experiments.elastic import report as elastic
    print(elastic.table(results, modes))
    return 0 if all(r["finished"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

"""What a GPU run does that a CPU run does not, held without a GPU: the averaging alone timed with the device
synchronised, one rule for where each backend's wait begins, and the same deterministic kernels in every run (the run
itself: ray_jobs/gpu_check.py, tests/test_gpu_check.py)."""

import os

import pytest
import torch

from horovod_ddp.adapter import HorovodGradientSync
from native_ddp.adapter import DDPGradientSync
from workload import distributed, run
from workload.distributed import DistContext

GPU = torch.device("cuda", 0)


@pytest.fixture
def synchronised(monkeypatch):
    """torch.cuda.synchronize, recorded instead of called."""
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(("synchronize", device)))
    return calls


def test_the_averaging_alone_is_timed_with_the_device_synchronised_before_and_after_each_trial(synchronised):
    seconds = distributed.timed_alone(lambda: synchronised.append("barrier"), lambda: synchronised.append("average"),
                                      lambda t: t, distributed.device_sync(GPU))
    trial = ["barrier", ("synchronize", GPU), "average", ("synchronize", GPU)]
    assert synchronised == trial * distributed.ALONE_TRIALS and seconds >= 0


def test_a_cpu_run_synchronises_nothing(synchronised):
    distributed.timed_alone(lambda: None, lambda: None, lambda t: t, distributed.device_sync(torch.device("cpu")))
    assert synchronised == []


class Event:
    """A CUDA event whose elapsed time to any later event is known."""

    def __init__(self, ms: float = 0.0, **kwargs) -> None:
        self.ms, self.recorded, self.waited = ms, False, False

    def record(self) -> None:
        self.recorded = True

    def synchronize(self) -> None:
        self.waited = True

    def elapsed_time(self, end: "Event") -> float:
        assert end.recorded and end.waited, "the end is read only once the device has reached it"
        return self.ms


def test_ddp_s_wait_on_a_gpu_begins_where_its_last_bucket_was_computed_on_the_device(monkeypatch):
    sync = DDPGradientSync.__new__(DDPGradientSync)
    sync.last_bucket_at, sync.last_bucket_ready = 100.0, Event(ms=12.5)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    # the host clock would say 900 s; the device says 12.5 ms from the bucket to the synchronised end of backward
    assert sync.wait(backward_end=1000.0) == pytest.approx(0.0125)
    sync.last_bucket_ready = None  # a CPU: the host clock is the device's
    assert sync.wait(backward_end=100.25) == pytest.approx(0.25)


def test_horovod_s_wait_on_a_gpu_ends_with_the_device_synchronised_after_synchronize(synchronised):
    order = []

    class Optimizer:
        def synchronize(self) -> None:
            order.append("hvd.synchronize")

    ctx = DistContext(rank=0, world_size=1, local_rank=0, device=GPU, all_reduce=lambda t, op: t)
    HorovodGradientSync(Optimizer(), torch.nn.Linear(1, 1), None, ctx).wait(backward_end=0.0)
    assert order == ["hvd.synchronize"] and synchronised == [("synchronize", GPU)]


@pytest.fixture
def torch_math():
    """torch's global math settings and CUBLAS_WORKSPACE_CONFIG, as they were, after the test."""
    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
             torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             os.environ.get("CUBLAS_WORKSPACE_CONFIG"), torch.utils.deterministic.fill_uninitialized_memory)
    yield
    torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[2], saved[3]
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[4], saved[5]
    torch.utils.deterministic.fill_uninitialized_memory = saved[7]
    if saved[6] is None:
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    else:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = saved[6]


def test_every_gpu_run_asks_for_deterministic_kernels_and_float32_without_tf32_and_records_it(torch_math,
                                                                                             monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    torch.backends.cudnn.allow_tf32 = True  # torch's default for convolutions
    run.deterministic_gpu()
    assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    assert not torch.utils.deterministic.fill_uninitialized_memory  # determinism does not need every empty() filled
    recorded = run.gpu_math(GPU)
    assert run.gpu_math(torch.device("cpu")) is None
    assert (recorded["deterministic_algorithms"], recorded["tf32"], recorded["cublas_workspace_config"]) == (
        True, False, ":4096:8")

"""Gradient compression: Horovod's bf16 compressor rounds as DDP's bf16 hook does, and the reference's emulation of
each backend's rounding order is the arithmetic those backends perform."""

import os

import pytest
import torch
import torch.distributed as dist

from contract import options
from contract.config import TrainConfig
from tests.helpers import free_port
from workload import compression


class _Bucket:
    """What DDP's compress hooks read from a GradBucket: its flat buffer."""

    def __init__(self, buffer: torch.Tensor) -> None:
        self._buffer = buffer

    def buffer(self) -> torch.Tensor:
        return self._buffer


def test_the_bf16_compressor_round_trips_a_tensor_as_ddps_bf16_hook_does():
    torch.manual_seed(0)
    # Normal values, values that round up and down, ties, and tiny gradients.
    tensor = torch.cat([torch.randn(4096), torch.randn(1024) * 1e-6, torch.tensor([1 + 2**-8, 1 + 3 * 2**-9, 0.0])])
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        ddp = default_hooks.bf16_compress_hook(None, _Bucket(tensor.clone())).wait()
    finally:
        dist.destroy_process_group()
    sent, ctx = compression.BF16Compressor.compress(tensor)
    assert sent.dtype == torch.float32  # Horovod 0.28.1 allreduces no bfloat16: the values travel as float32
    assert torch.equal(compression.BF16Compressor.decompress(sent, ctx), ddp)
    assert not torch.equal(ddp, tensor)  # it did round


def test_integers_pass_the_bf16_compressor_untouched():
    steps = torch.arange(5)
    sent, ctx = compression.BF16Compressor.compress(steps)
    assert torch.equal(compression.BF16Compressor.decompress(sent, ctx), steps)


def test_the_two_rounding_orders_differ_where_halving_a_float16_is_not_exact():
    tiny = torch.tensor([2.0**-24])  # the smallest float16 subnormal
    # DDP divides first: 2^-25 rounds to 0 (a tie, to even), and 0 + 0 = 0.
    assert compression.combine([tiny, tiny], "fp16", "native").item() == 0.0
    # Horovod sums first: 2^-23, then scales by 1/2 exactly.
    assert compression.combine([tiny, tiny], "fp16", "horovod").item() == 2.0**-24
    normal = torch.tensor([0.1, -3.0, 1e-3])
    # Where halving is exact the orders agree, in both precisions.
    for name in ("fp16", "bf16"):
        assert torch.equal(compression.combine([normal, 2 * normal], name, "native"),
                           compression.combine([normal, 2 * normal], name, "horovod"))


def test_without_compression_both_orders_are_the_float32_average():
    a, b = torch.tensor([1.0, 2.0**-3]), torch.tensor([3.0, 1.0])
    for rounding in ("native", "horovod"):
        assert torch.equal(compression.combine([a, b], "none", rounding), (a + b) / 2)


def test_each_backend_records_its_own_value_and_the_other_s_options_as_not_applicable():
    cfg = TrainConfig(compression="bf16", bucket_mb=4.0, static_graph=True, cycle_time_ms=5.0, grad_accumulation=2)
    native, horovod = options.effective(cfg, "native"), options.effective(cfg, "horovod")
    assert native["cycle_time_ms"] == native["autotune"] == "not applicable" and native["static_graph"] is True
    assert horovod["static_graph"] == horovod["gradient_as_bucket_view"] == "not applicable"
    assert horovod["bucket_mb"] == "4 MiB (HOROVOD_FUSION_THRESHOLD=4194304)" and "bucket_cap_mb" in native["bucket_mb"]
    assert "no_sync()" in native["grad_accumulation"] and "backward_passes_per_step=2" in horovod["grad_accumulation"]
    assert "float32 on the wire" in horovod["compression"] and "bfloat16 on the wire" in native["compression"]
    defaults = options.effective(TrainConfig(), "horovod")
    assert defaults["bucket_mb"].startswith("128 MiB") and defaults["cycle_time_ms"].startswith("1 ms")
    reference = options.effective(cfg, "reference-horovod")
    assert reference["bucket_mb"] == "not applicable" and "emulating horovod" in reference["compression"]


@pytest.mark.parametrize("backend, expected", [("native", {"static_graph": True, "cycle_time_ms": 0.0}),
                                               ("horovod", {"static_graph": False, "cycle_time_ms": 5.0}),
                                               ("reference", {"static_graph": False, "bucket_mb": 0.0})])
def test_compare_hands_each_backend_only_its_own_options(backend, expected):
    cfg = options.for_backend(TrainConfig(static_graph=True, cycle_time_ms=5.0, bucket_mb=2.0, trace=True), backend)
    assert {name: getattr(cfg, name) for name in expected} == expected

"""Gradient compression on the wire: DDP's hooks, Horovod's compressors (with the bf16 one Horovod 0.28.1 lacks),
and the single-process emulation of each backend's rounding that the reference runs.

The two frameworks round in a different order. DDP's `fp16_compress_hook` casts each rank's gradient, divides it by
N in float16, and sums in float16. Horovod's `Compression.fp16` casts, sums in float16, and then scales by 1/N in
float16 (its Average is a post-scale). Each float16 or bfloat16 operation computes in float32 and rounds once, in
torch, in gloo and in Horovod's gloo ops alike, so the emulation below reproduces each order exactly where the sum
order is known: with 2 ranks a sum is one addition. With more, gloo's ring adds the ranks in an order that differs
per chunk of the buffer, which the emulation does not reproduce.
"""

import torch
from torch import Tensor

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


class BF16Compressor:
    """Horovod's `Compressor` interface (compress returns the tensor and a context; decompress takes both) for
    bfloat16, which Horovod 0.28.1 does not have.

    Horovod 0.28.1 allreduces no bfloat16 tensor ("Tensor type torch.BFloat16Tensor is not supported"), so the
    values are rounded to bfloat16 and sent as float32: DDP's bf16 hook's numbers, not its bytes. After the sum
    (float32) and Horovod's 1/N scale, decompress rounds to bfloat16 again, as DDP's bfloat16 sum does.
    """

    @staticmethod
    def compress(tensor: Tensor) -> tuple[Tensor, torch.dtype | None]:
        if not tensor.dtype.is_floating_point:
            return tensor, None
        return tensor.to(torch.bfloat16).to(torch.float32), tensor.dtype

    @staticmethod
    def decompress(tensor: Tensor, ctx: torch.dtype | None) -> Tensor:
        if ctx is None:
            return tensor
        return tensor.to(torch.bfloat16).to(ctx)


def horovod_compressor(hvd, compression: str):
    """The Horovod compressor for `--compression`."""
    return {"none": hvd.Compression.none, "fp16": hvd.Compression.fp16, "bf16": BF16Compressor}[compression]


def ddp_hook(compression: str):
    """The DDP comm hook for `--compression`: the stock hook for that dtype."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    return {"none": default_hooks.allreduce_hook, "fp16": default_hooks.fp16_compress_hook,
            "bf16": default_hooks.bf16_compress_hook}[compression]


def combine(grads: list[Tensor], compression: str, rounding: str) -> Tensor:
    """The averaged gradient that `rounding`'s backend ("native" or "horovod") computes from the per-rank `grads`,
    rank 0's first and the ranks summed in order."""
    n = len(grads)
    if compression == "none":
        if rounding == "native":  # allreduce_hook: divide each rank's bucket by N, then sum
            return sum_in_order([g / n for g in grads])
        return sum_in_order(grads) * _scale(n)  # Horovod Average: sum, then a float post-scale of 1/N
    dtype = DTYPES[compression]
    if rounding == "native":  # _compress_hook: buffer.to(dtype).div_(N), allreduce sum in dtype, copy back
        return sum_in_order([g.to(dtype).div_(n) for g in grads]).to(grads[0].dtype)
    if compression == "fp16":  # Compression.fp16: cast, sum in float16, post-scale in float16, cast back
        return (sum_in_order([g.to(dtype) for g in grads]) * _scale(n)).to(grads[0].dtype)
    # BF16Compressor: bfloat16 values summed and scaled in float32, then rounded to bfloat16 again
    summed = sum_in_order([BF16Compressor.compress(g)[0] for g in grads]) * _scale(n)
    return BF16Compressor.decompress(summed, grads[0].dtype)


def sum_in_order(tensors: list[Tensor]) -> Tensor:
    total = tensors[0].clone()
    for t in tensors[1:]:
        total += t  # rounds to the tensors' dtype after each addition, as gloo's sum does
    return total


def _scale(n: int) -> Tensor:
    """Horovod's post-scale 1/N: a double cast to float, applied in float and rounded to the buffer's dtype (torch
    keeps a float16 tensor float16 when multiplied by a 0-dim float32 one, computing in float32)."""
    return torch.tensor(1.0 / n, dtype=torch.float32)

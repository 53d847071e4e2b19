"""One GPU's training rate for ResNet-50 at 224 px, as a team measures it before any framework: torchvision's
resnet50 (weights none), SGD, synthetic data already on the GPU, torch's defaults (TF32 convolutions, cuDNN's
autotuner off), batch 32 and 256, float32 and bf16 autocast. The one-GPU figure that experiments.predict_gpus takes
(`one_gpu_images_per_s`), without a loader.

    python3 tools/one_gpu_rate.py

Per batch and precision: 8 warm-up steps, then 3 blocks of 10 steps, each ended by a synchronize; prints each
block's images per second.
"""

import logging
import time

import torch
import torchvision

log = logging.getLogger(__name__)


def rates(model: torch.nn.Module, batch: int, amp: str, blocks: int = 3, steps: int = 10) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")

    def step() -> None:
        opt.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp == "bf16"):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(8):
        step()
    out = []
    for _ in range(blocks):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        out.append(steps * batch / (time.perf_counter() - start))
    return out


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not torch.cuda.is_available():
        log.error("error: this measures a GPU, and torch sees none here: run it on a machine with an NVIDIA GPU")
        return 2
    torch.backends.cudnn.benchmark = False
    model = torchvision.models.resnet50(weights=None).cuda()
    log.info("%s, torch %s", torch.cuda.get_device_name(0), torch.__version__)
    for batch in (32, 256):
        for amp in ("fp32", "bf16"):
            found = rates(model, batch, amp)
            log.info("resnet50 batch %d %s (torch defaults: TF32 convolutions, cudnn.benchmark off): img/s per block "
                     "%s", batch, amp, [round(r) for r in found])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

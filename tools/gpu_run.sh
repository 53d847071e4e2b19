#!/usr/bin/env bash
# The GPU check's run on a lent GPU machine, in one device call: carry .gpu (make gpu-bundle), then
#   bash tools/gpu_run.sh            # $OUT: results.tgz and the two logs (docs/install.md, "The GPU check, offline")
# Horovod's build and the default check first (within their 7-minute budget), then the Ray arm on resnet50.
set -uo pipefail
out=${OUT:-/tmp/gpu-out}
mkdir -p "$out" /tmp/gpu
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.txt" 2>&1
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/ray/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
export HOROVOD_SDIST=$(ls .gpu/horovod-*.tar.gz)
SECONDS=0
python3 -m ray_jobs.gpu_check --output-dir /tmp/gpu/check 2>&1 | tee "$out/check.log"
echo "check: ${SECONDS} s" | tee -a "$out/check.log"
SECONDS=0
python3 -m ray_jobs.gpu_check --launchers ray --models resnet50 --amp none,bf16 --budget-min 3 \
    --output-dir /tmp/gpu/ray 2>&1 | tee "$out/ray.log"
echo "ray arm: ${SECONDS} s" | tee -a "$out/ray.log"
tar czf "$out/results.tgz" -C /tmp gpu

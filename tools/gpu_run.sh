#!/usr/bin/env bash
# The GPU check's first run on an offline GPU machine, from the source tree with .gpu beside it (make gpu-bundle):
#   bash tools/gpu_run.sh OUTPUT_DIR [WORK_DIR]   # results.tgz (WORK_DIR's check folders, /tmp/gpu unless given),
#                                                # the logs and steps.txt (docs/install.md, "The GPU check, offline")
# Horovod's build and the default check first (within their 7-minute budget), then the Ray arm on resnet50.
# Every step runs; steps.txt names each one's exit code, and the script exits 1 naming the steps that failed.
set -uo pipefail
out=${1:?usage: bash tools/gpu_run.sh OUTPUT_DIR [WORK_DIR]}
work=${2:-/tmp/gpu}
mkdir -p "$out" "$work" || exit 1
case "$(cd "$out" && pwd -P)/" in
    "$(cd "$work" && pwd -P)"/*) echo "error: $out is inside $work, which results.tgz packs: name another" >&2; exit 2 ;;
esac
rm -f "$out"/{gpu.txt,install.log,check.log,ray.log,results.tgz}  # a rerun's logs are its own
: > "$out/steps.txt"
failed=()

step() {  # step NAME LOG COMMAND...: the command's output to LOG and the terminal, its exit code to steps.txt
    local name=$1 log=$2 code
    shift 2
    SECONDS=0
    "$@" 2>&1 | tee -a "$log"  # pipefail: the pipeline's status is the command's
    code=$?
    echo "$name: exit $code, ${SECONDS} s" | tee -a "$out/steps.txt"
    ((code == 0)) || failed+=("$name")
    return "$code"
}

step gpu "$out/gpu.txt" nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
step ray-install "$out/install.log" python3 -m pip install -q --no-index --no-deps --target "$work/site" \
    .gpu/ray/*.whl
installed=$?
export PYTHONPATH=$work/site:$PWD PATH=$work/site/bin:$PATH PYTHONUNBUFFERED=1
sdist=$(compgen -G '.gpu/horovod-*.tar.gz' | head -n 1)
if [[ -n $sdist ]]; then
    export HOROVOD_SDIST=$sdist
    step check "$out/check.log" python3 -m ray_jobs.gpu_check --output-dir "$work/check"
else
    echo "check: not run (no .gpu/horovod-*.tar.gz: make gpu-bundle first)" | tee -a "$out/steps.txt"
    failed+=(check)
fi
if ((installed == 0)); then
    step ray-arm "$out/ray.log" python3 -m ray_jobs.gpu_check --launchers ray --models resnet50 --amp none,bf16 \
        --budget-min 3 --output-dir "$work/ray"
else
    echo "ray-arm: not run (Ray did not install)" | tee -a "$out/steps.txt"
    failed+=(ray-arm)
fi
step results "$out/steps.txt" tar czf "$out/results.tgz" --exclude site -C "$(dirname "$work")" "$(basename "$work")"
if ((${#failed[@]})); then
    echo "failed: ${failed[*]} (each step's exit code: $out/steps.txt)" | tee -a "$out/steps.txt" >&2
    exit 1
fi
echo "every step ok: $out/steps.txt"

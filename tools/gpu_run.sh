#!/usr/bin/env bash
# The GPU check's first run on an offline GPU machine, from the source tree with .gpu beside it (make gpu-bundle):
#   bash tools/gpu_run.sh OUTPUT_DIR [WORK_DIR]   # results.tgz (WORK_DIR's check folders, /tmp/gpu unless given),
#                                                # the logs and steps.txt (docs/install.md, "The GPU check, offline")
# One GPU's ResNet-50 rate with no framework (tools/host_costs_rank.py's plain copy, batch 32 and 256, float32 and
# bf16); Horovod built with NCCL; what each framework's
# host adds to a GPU step (tools/host_costs.py: the per-gradient hook, the step's end, ResNet-50's whole step); the
# check on ResNet-50 at 224 px, batch 32 (the published runs' setting), fp32 and bf16; then, where .gpu/ray holds Ray,
# the Ray arm. About 10 min on one H200 with 16 cores (build 130 s, host costs 293 s). Every step runs that can;
# steps.txt names each one's exit code, and the script exits 1 naming the steps that failed.
set -uo pipefail
refuse() { echo "error: $*" >&2; exit 2; }  # bad input: one line, exit 2, nothing made
(($# == 1 || $# == 2)) || refuse "usage: bash tools/gpu_run.sh OUTPUT_DIR [WORK_DIR]"
out=$1
work=${2:-/tmp/gpu}
case "$(realpath -m "$out")/" in
    "$(realpath -m "$work")"/*) refuse "$out is inside $work, which results.tgz packs: name another" ;;
esac
for dir in "$out" "$work"; do  # the folder, or the nearest one above it that exists, must take new files
    near=$(realpath -m "$dir")
    while [[ ! -e $near ]]; do near=$(dirname "$near"); done
    [[ -d $near && -w $near ]] || refuse "$dir cannot be written here ($near is read-only or not a folder): name another"
done
mkdir -p "$out" "$work" || exit 1
rm -f "$out"/{gpu.txt,one-gpu.txt,build.log,host.log,check.log,install.log,ray.log,results.tgz}  # a rerun's own
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

skip() {  # skip NAME WHY: a step that could not run, named as failed
    echo "$1: not run ($2)" | tee -a "$out/steps.txt"
    failed+=("$1")
}

export PYTHONUNBUFFERED=1
step gpu "$out/gpu.txt" nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
one_gpu() {  # the plain copy's rate at each batch and precision: one GPU's with no framework
    for batch in 32 256; do
        for amp in none bf16; do
            torchrun --standalone --nproc-per-node 1 tools/host_costs_rank.py --backend native --device cuda \
                --tensors "" --model resnet50 --batch "$batch" --amp "$amp" --blocks 3 --steps 10 || return
        done
    done
}
step one-gpu "$out/one-gpu.txt" one_gpu
sdist=$(compgen -G '.gpu/horovod-*.tar.gz' | head -n 1)
built=1
if [[ -n $sdist ]]; then
    export HOROVOD_SDIST=$sdist
    step build "$out/build.log" python3 tools/build_horovod.py --sdist "$sdist" --target "$work/horovod"
    built=$?
else
    skip build "no .gpu/horovod-*.tar.gz: make gpu-bundle first"
fi
check=(python3 -m ray_jobs.gpu_check --models resnet50 --image-size 224 --amp none,bf16 --synthetic-test-size 64
       --budget-min 4)
if ((built == 0)); then
    step host-costs "$out/host.log" env PYTHONPATH="$work/horovod:$PWD" PATH="$work/horovod/bin:$PATH" \
        timeout 300 python3 tools/host_costs.py --device cuda --model resnet50 --rounds 3 --steps 20 \
        --output "$work/host-costs"
    step check "$out/check.log" env PYTHONPATH="$PWD" "${check[@]}" --batch-size 32 --synthetic-train-size 1920 \
        --output-dir "$work/check"
else
    for name in host-costs check; do skip "$name" "Horovod did not build"; done
fi
if compgen -G '.gpu/ray/*.whl' > /dev/null; then
    step ray-install "$out/install.log" python3 -m pip install -q --no-index --no-deps --target "$work/site" \
        .gpu/ray/*.whl
    if (($? == 0 && built == 0)); then
        step ray-arm "$out/ray.log" env PYTHONPATH="$work/site:$PWD" PATH="$work/site/bin:$PATH" \
            python3 -m ray_jobs.gpu_check --launchers ray --models resnet50 --amp none,bf16 --budget-min 3 \
            --output-dir "$work/ray"
    else
        skip ray-arm "Ray did not install or Horovod did not build"
    fi
else
    echo "ray-arm: not run (no .gpu/ray: make gpu-bundle carries Ray; the other steps need none)" \
        | tee -a "$out/steps.txt"
fi
step results "$out/steps.txt" tar czf "$out/results.tgz" --exclude site --exclude horovod \
    -C "$(dirname "$work")" "$(basename "$work")"
if ((${#failed[@]})); then
    echo "failed: ${failed[*]} (each step's exit code: $out/steps.txt)" | tee -a "$out/steps.txt" >&2
    exit 1
fi
echo "every step ok: $out/steps.txt"

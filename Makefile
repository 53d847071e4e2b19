# The README's two commands: `make compare` and `make test`. Each installs what it needs into .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PIP := $(BIN)/python -m pip --disable-pip-version-check -q

.PHONY: install test test-fast compare bench faults docs gpu-check gpu-rehearsal gpu-bundle stress clean

# Reinstalls only when the declared dependencies or the Horovod build recipe change.
$(STAMP): pyproject.toml tools/build_horovod.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -e '.[test,build]'
	$(BIN)/python tools/build_horovod.py
	touch $@

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The unit tier alone: no cluster, no launcher, no fault trial, no re-render of docs/results (under a minute here).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not cluster and not faults and not docs" $(PYTEST_ARGS)

# The default answer: rounds until native ÷ Horovod is known to ±3 %, within 9 minutes in all; ARGS go on top of it
# (their --target-ci or --budget-min win; a --repeats below the pilot of 3, or --target-ci 0, runs a fixed --repeats).
compare: $(STAMP)
	$(BIN)/python -m ray_jobs.compare --make-target-ci 3 --budget-min 9 $(ARGS)

# Ray beside torchrun, mp.spawn and horovodrun, repeated: prints the ratio table with its goals (a benchmark, not a test).
bench: $(STAMP)
	$(BIN)/python -m ray_jobs.bench $(ARGS)

# Kill a worker under every launcher, N trials each: prints the survival table (a benchmark, not a test).
faults: $(STAMP)
	$(BIN)/python -m ray_jobs.fault_trials $(ARGS)

# Before a submission, not part of make test: the fault, signal and stall tiers 5 times with one core kept busy.
stress: $(STAMP)
	$(BIN)/python tools/stress.py $(ARGS)

# Every picture and report under docs/results, made again from its committed JSON, the snapshots side by side, the
# schedule replay checked against the committed runs, the GPU model against published GPU runs, and its GPU clusters'
# prediction, with 2 x 8 H200s at batch 32 and 256 from what one H200 measured.
SNAPSHOTS := $(foreach s,models vit_b_16,\
	docs/results/$(s)-epyc-2026-11-26 docs/results/$(s)-epyc-2026-11-27 docs/results/$(s)-xeon-2026-11-25)
SCHEDULES := docs/results/schedule-models docs/results/schedule-fused docs/results/schedule-options \
	docs/results/schedule-sim-2-nodes \
	docs/results/schedule-sim-3-nodes
H200_CLUSTERS := docs/results/gpu-prediction/h200-2x8-b32 docs/results/gpu-prediction/h200-2x8-b256
docs: $(STAMP)
	$(BIN)/python -m experiments.gpu_model.schedule_check $(SCHEDULES) --output docs/results/schedule-check.md
	$(BIN)/python -m experiments.gpu_model.published_check docs/results/published-gpu
	$(BIN)/python -m experiments.gpu_model.predict_gpus docs/results/schedule-models --validation \
		docs/results/schedule-check.md --output docs/results/gpu-prediction
	for c in $(H200_CLUSTERS); do $(BIN)/python -m experiments.gpu_model.predict_gpus --cluster $$c/cluster.json \
		--output $$c || exit 1; done
	$(BIN)/python -m ray_jobs.compare --render docs/results
	$(BIN)/python -m ray_jobs.replicate $(SNAPSHOTS) --output docs/results/replication.md

# On a GPU machine, offline, with no .venv and no Ray: Horovod built with NCCL from HOROVOD_SDIST, then both backends
# on every GPU per model and precision (ray_jobs/gpu_check.py). Without a GPU: one line, exit 2.
gpu-check:
	$(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON)) -m ray_jobs.gpu_check $(ARGS)

# The GPU check's first run rehearsed here, offline, without a GPU (tools/gpu_rehearsal.py): the package index once,
# then Horovod built with NCCL, the check's plan on CPUs and its Ray arm, from an environment of the GPU machine's
# packages only. Not part of make test.
gpu-rehearsal: $(STAMP)
	$(BIN)/python tools/gpu_rehearsal.py $(ARGS)

# What a GPU machine without network needs beside the source tree, in .gpu/ (ignored by git, carried to it):
# Horovod's sdist and Ray stripped for its Python (docs/install.md, "The GPU check, offline").
gpu-bundle: $(STAMP)
	rm -rf .gpu && mkdir -p .gpu
	$(BIN)/python -m pip download -q --no-deps --no-binary :all: horovod==0.28.1 -d .gpu
	$(BIN)/python tools/ray_bundle.py --python 3.12 --out .gpu/ray

clean:
	rm -rf $(VENV) results data

"""make gpu-rehearsal: the GPU check's first run (make gpu-check), rehearsed on a machine without a GPU, with the
network cut and from a Python environment that holds only what the GPU machine holds. Not part of make test.

    make gpu-rehearsal
    .venv/bin/python tools/gpu_rehearsal.py --steps 8 --keep /tmp/rehearsal

Online first, once (the package index, cached in --cache): torch 2.11 and torchvision 0.26 with their CUDA libraries,
the CUDA toolkit's wheels in the GPU machine's versions (CUDA 13.0's nvcc, nvvm, crt headers, runtime and CCCL, and
NCCL 2.28.9, torch 2.11's), Horovod's sdist, and Ray stripped to what the project uses with the dependencies the GPU
machine lacks (tools/ray_bundle.py). Then, each with the network cut (`unshare -n`, loopback up):

1. **environment**: a venv that sees only the GPU machine's packages (GPU_MACHINE), linked from .venv but for
   torch 2.11 and torchvision 0.26 (TORCH, the GPU machine's, from the cache): no Ray, no cffi, no Horovod;
2. **check**: `python -m ray_jobs.gpu_check --cpu-stand-in`: Horovod built with NCCL from the sdist for sm_90
   exactly as on the GPU machine, `hvd.nccl_built()` checked, then the check's whole plan, CPU runs in place of GPU
   ones, and what the exit code does not say (as_on_the_gpu);
3. **ray**: the stripped Ray installed into a folder of its own (pip --no-index --target, as tools/gpu_run.sh
   installs it), and the check's Ray arm (`--launchers ray`: TorchTrainer and RayExecutor) from the same environment.

Prints each step's time and result, and the logs' folder. Exit 1 when a step fails (its log's last lines say why);
exit 2, in one line and before anything is fetched, where the network cannot be cut here (unshare -n needs root).
--steps caps every epoch so that the CPU stand-ins take minutes, not hours (they stand in for the plan; their
figures mean nothing for a GPU).
"""

import argparse
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tools"), str(REPO)]
import ray_bundle  # noqa: E402 - a sibling tool, not a package
from runtime import tied  # noqa: E402 - the project's, from the tree this tool is in

TORCH = ("torch==2.11.0", "torchvision==0.26.0")
"""The GPU machine's torch and torchvision, installed with their CUDA 13.0 libraries into the cache: the rehearsal's
environment takes them in place of .venv's, so that Horovod builds against them as it does there (C++17)."""
TORCH_NAMES = ("torch", "torchvision", "triton", "nvidia", "cuda")
"""Top-level names the rehearsal's torch brings (its CUDA libraries under nvidia/ and cuda/): .venv's are not linked."""
TOOLKIT = ("nvidia-cuda-nvcc==13.0.88", "nvidia-nvvm==13.0.88", "nvidia-cuda-crt==13.0.88",
           "nvidia-cuda-runtime==13.0.96", "nvidia-cuda-cccl==13.0.85", "nvidia-nccl-cu13==2.28.9")
"""The GPU machine's CUDA 13.0 toolkit, as the package index ships it, and the NCCL its torch 2.11 was built with."""
HOROVOD_SDIST = "horovod==0.28.1"
CAPABILITIES = "90"
"""An H100's or H200's compute capability: what the GPU machine's build compiles Horovod's kernels for."""
GPU_MACHINE = """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers
flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize
hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib
kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py
markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind
narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc
nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir
onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging
pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11
py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham
simplejson six sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore
threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics
torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig
werkzeug wheel wrapt xarray xxhash yarl zipp""".split()
"""The Python packages of the GPU machine's image ('cuda'), as that machine's package list gave them (read 2026-11-17).
Its Python is 3.12 with torch 2.11; the rehearsal's Python is this machine's (3.11), its torch 2.11 (TORCH)."""
OFFLINE = 'ip link set lo up && exec "$@"'
"""Inside `unshare -n`: a network namespace of its own with only loopback, brought up (gloo and Ray talk over it)."""


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    out.add_argument("--cache", default=str(Path.home() / ".cache" / "ddp-vs-horovod" / "gpu-rehearsal"),
                     help="where the fetched wheels and sdist stay between rehearsals (default: %(default)s)")
    out.add_argument("--steps", type=int, default=8, help="steps per epoch of every CPU stand-in (default: 8)")
    out.add_argument("--keep", default="", help="write the logs and results here (default: a new folder in /tmp)")
    return out


def main(argv: list[str] | None = None) -> int:
    tied.die_with_parent()  # make killed with SIGKILL ends the rehearsal, and it the check it runs (tied.run)
    args = parser().parse_args(argv)
    if args.steps < 6:
        return refuse(f"--steps must leave a step after the 5 warm-up steps: give at least 6, got {args.steps}")
    if (cut := subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True)).returncode:
        return refuse(f"cannot cut the network here (`unshare -n true` said: {cut.stderr.strip()[:200] or 'nothing'});"
                      " the rehearsal runs offline as the GPU machine does: run it as root on Linux")
    work = Path(args.keep or tempfile.mkdtemp(prefix="gpu-rehearsal-"))
    if work.exists() and any(work.iterdir()):
        if not {path.name for path in work.iterdir()} <= WRITTEN:
            return refuse(f"--keep {work} holds files no rehearsal wrote; name a new folder")
        shutil.rmtree(work)  # an earlier rehearsal's, finished or killed: this one starts it afresh
    work.mkdir(parents=True, exist_ok=True)
    cache = Path(args.cache)
    steps: list[tuple[str, float, bool]] = []
    ok = step(steps, "fetch (online, cached)", lambda: fetch(cache))
    ok = ok and step(steps, "environment", lambda: gpu_like_env(work / "env", cache / "torch"))
    toolkit = cache / "toolkit" / "nvidia"
    common = {"CUDA_HOME": str(toolkit / "cu13"), "NCCL_HOME": str(toolkit / "nccl"),
              "HOROVOD_BUILD_CUDA_CC_LIST": CAPABILITIES, "HOROVOD_WHEEL_CACHE": str(work / "wheels"),
              "PYTHONPATH": str(REPO)}
    check = ["-m", "ray_jobs.gpu_check", "--cpu-stand-in", "--sdist", str(next(cache.glob("horovod-*.tar.gz"), "")),
             "--max-steps-per-epoch", str(args.steps), "--budget-min", "120"]
    ok = ok and step(steps, "check: Horovod built with NCCL offline, the plan on CPUs", lambda: offline(
        work / "env", [*check, "--output-dir", str(work / "check")], common, work / "check.log")
        and as_on_the_gpu(work / "check"))
    ray_site = work / "ray-site"
    ok = ok and step(steps, "ray: the stripped Ray installed offline, the check's Ray arm", lambda: offline(
        work / "env", ["-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(ray_site),
                       *map(str, sorted((cache / "ray").glob("*.whl")))], common, work / "ray-install.log") and offline(
        work / "env", [*check, "--launchers", "ray", "--models", "convnet,resnet50", "--amp", "none",
                       "--output-dir", str(work / "ray")],
        {**common, "PYTHONPATH": f"{ray_site}{os.pathsep}{REPO}",
         "PATH": f"{ray_site / 'bin'}{os.pathsep}{os.environ['PATH']}"}, work / "ray.log"))
    print("\n| step | time | result |\n|---|---|---|")
    for name, seconds, passed in steps:
        print(f"| {name} | {seconds / 60:.1f} min | {'ok' if passed else 'FAILED'} |")
    print(f"logs and results: {work}")
    return 0 if ok else 1


WRITTEN = {"env", "check", "check.log", "wheels", "ray-site", "ray-install.log", "ray", "ray.log"}
"""What a rehearsal writes into its folder: a --keep folder holding only these is an earlier rehearsal's, reused."""


def refuse(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def step(steps: list[tuple[str, float, bool]], name: str, body) -> bool:
    print(f"{name} …", flush=True)
    began = time.monotonic()
    passed = bool(body())
    steps.append((name, time.monotonic() - began, passed))
    return passed


def fetch(cache: Path) -> bool:
    """The toolkit installed into cache/toolkit, Horovod's sdist and the Ray bundle into cache; what is there stays."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    if not (cache / "toolkit" / "nvidia" / "cu13" / "bin" / "nvcc").exists():
        shutil.rmtree(cache / "toolkit", ignore_errors=True)
        subprocess.run([*pip, "install", "--no-deps", "--target", str(cache / "toolkit"), *TOOLKIT], check=True)
    if not (cache / "torch" / "torch" / "__init__.py").exists():
        shutil.rmtree(cache / "torch", ignore_errors=True)
        subprocess.run([*pip, "install", "--no-warn-conflicts", "--target", str(cache / "torch"), *TORCH], check=True)
    if not any(cache.glob("horovod-*.tar.gz")):
        subprocess.run([*pip, "download", "--no-deps", "--no-binary", ":all:", HOROVOD_SDIST, "-d", str(cache)],
                       check=True)
    if not any((cache / "ray").glob("ray-*.whl")):
        shutil.rmtree(cache / "ray", ignore_errors=True)
        ray_bundle.main(["--out", str(cache / "ray")])
    return True


def gpu_like_env(env: Path, torch_dir: Path) -> bool:
    """A venv whose only other packages are GPU_MACHINE's: torch, torchvision and their CUDA libraries from
    `torch_dir` (TORCH), the rest linked from this Python's site-packages (.venv's), with their commands (torchrun) in
    its bin/ running its own Python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    site = env / "gpu-machine"
    site.mkdir()
    wanted, linked = {normal(name) for name in GPU_MACHINE}, set()
    for dist in importlib.metadata.distributions():
        if normal(dist.metadata["Name"]) not in wanted:
            continue
        for top in {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
            if top in TORCH_NAMES or top.split("-")[0] in TORCH_NAMES:
                continue  # the GPU machine's versions, from torch_dir
            source = Path(dist.locate_file(top))
            if source.exists() and not (site / top).exists():
                (site / top).symlink_to(source)
                linked.add(top)
        for script in dist.entry_points.select(group="console_scripts"):
            module, _, function = script.value.partition(":")
            (env / "bin" / script.name).write_text(
                f"#!{env / 'bin' / 'python'}\nimport sys\nfrom {module} import {function}\nsys.exit({function}())\n")
            (env / "bin" / script.name).chmod(0o755)
    purelib = next((env / "lib").glob("python*/site-packages"))
    (purelib / "gpu-machine.pth").write_text(f"{torch_dir}\n{site}\n")
    print(f"  {len(linked)} top-level names of {len(wanted)} GPU-machine packages linked from {sys.prefix}, torch "
          f"{version(torch_dir, 'torch')} and torchvision {version(torch_dir, 'torchvision')} from {torch_dir}",
          flush=True)
    return True


def version(folder: Path, name: str) -> str:
    return next(importlib.metadata.distributions(path=[str(folder)], name=name)).version


RESULTS_LIMIT_MB = 16
"""What a check's results may weigh: 16 MiB a file (a tar of the folder), what a copy back from an offline GPU machine
may hold."""


def as_on_the_gpu(results: Path) -> bool:
    """What the GPU run would get wrong that the run's exit code does not say: no Horovod build in the results (it
    would come back with them), no run under horovodrun that thinks it was not, the one-rank wording."""
    size = sum(path.stat().st_size for path in results.rglob("*") if path.is_file()) / 2**20
    said = [path for path in results.rglob("*.log") if "not started by horovodrun" in path.read_text()]
    reports = [path.read_text() for path in results.glob("*/report.md")]
    wrong = ([f"the results weigh {size:.1f} MiB, over {RESULTS_LIMIT_MB}"] if size > RESULTS_LIMIT_MB else []) + \
        [f"a Horovod build in the results: {path}" for path in results.rglob("horovod") if path.is_dir()] + \
        [f"{path} says it was not started by horovodrun" for path in said] + \
        (["the grid's report does not say that one rank averaged nothing"]
         if not reports or not all("no gradient averaging was measured" in text for text in reports) else [])
    for line in wrong:
        print(f"  {line}", flush=True)
    if not wrong:
        print(f"  results {size:.1f} MiB, no Horovod among them; every run knew its launcher; one rank said so",
              flush=True)
    return not wrong


def normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def offline(env: Path, argv: list[str], extra: dict[str, str], log: Path) -> bool:
    """`env`'s Python with `argv`, in a network namespace of its own, its output into `log`; its last lines shown
    where it fails."""
    with log.open("w") as out:
        code = tied.run(["unshare", "-n", "sh", "-c", OFFLINE, "sh", str(env / "bin" / "python"), *argv], cwd=REPO,
                        stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **extra})
    if code:
        print(f"  exit {code}; the last lines of {log}:\n" + "\n".join(
            "    " + line for line in log.read_text(errors="replace").splitlines()[-15:]), flush=True)
    return code == 0


if __name__ == "__main__":
    sys.exit(main())

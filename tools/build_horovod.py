"""Install Horovod with PyTorch and Gloo into this environment, building the official sdist once per machine.

Horovod 0.28.1 (the latest release) compiles as C++14, but PyTorch's headers need C++17 (torch 2.1-2.13) or
C++20 (torch >= 2.14). This script takes the official sdist from the package index, raises the C++ standard
in its CMake files (upstream fix #3998, never released), builds a wheel and caches it outside the clone, keyed
by Horovod, torch and Python versions, so a later clone on the same machine installs it in seconds.

Run it with the interpreter of the environment to install into: `.venv/bin/python tools/build_horovod.py`.
"""

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from pathlib import Path

HOROVOD_VERSION = "0.28.1"


def main() -> int:
    if horovod_ready():
        print(f"horovod {HOROVOD_VERSION} with PyTorch and Gloo is already installed")
        return 0
    import torch

    torch_version = torch.__version__
    cache = wheel_cache() / f"horovod-{HOROVOD_VERSION}-torch-{torch_version}-py{sys.version_info[0]}.{sys.version_info[1]}"
    wheels = sorted(cache.glob("horovod-*.whl"))
    if not wheels:
        wheels = [build_wheel(torch_version, cache)]
    pip("install", "--no-deps", "--force-reinstall", str(wheels[0]))
    if not horovod_ready():
        print("error: the installed Horovod lacks PyTorch or Gloo support; delete " + str(cache) + " and rerun",
              file=sys.stderr)
        return 1
    return 0


def horovod_ready() -> bool:
    """True when horovod.torch imports and was built with Gloo (what horovodrun --check-build reports)."""
    code = "import horovod.torch as hvd; raise SystemExit(0 if hvd.gloo_built() else 1)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def wheel_cache() -> Path:
    if os.environ.get("HOROVOD_WHEEL_CACHE"):
        return Path(os.environ["HOROVOD_WHEEL_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ddp-vs-horovod" / "wheels"


def cxx_standard(torch_version: str) -> int:
    major, minor = (int(part) for part in re.match(r"(\d+)\.(\d+)", torch_version).groups())
    return 20 if (major, minor) >= (2, 14) else 17


def build_wheel(torch_version: str, cache: Path) -> Path:
    standard = cxx_standard(torch_version)
    print(f"building horovod {HOROVOD_VERSION} against torch {torch_version} as C++{standard} "
          "(a few minutes on 2 cores, once per machine)", flush=True)
    with tempfile.TemporaryDirectory(prefix="horovod-build-") as tmp:
        work = Path(tmp)
        pip("download", "--no-deps", "--no-binary", ":all:", f"horovod=={HOROVOD_VERSION}", "-d", str(work))
        with tarfile.open(next(work.glob("horovod-*.tar.gz"))) as sdist:
            sdist.extractall(work, filter="data")
        source = work / f"horovod-{HOROVOD_VERSION}"
        patch_cxx_standard(source, standard)
        pip("wheel", "--no-build-isolation", "--no-deps", "-w", str(work / "dist"), str(source), env=build_env())
        built = next((work / "dist").glob("horovod-*.whl"))
        cache.mkdir(parents=True, exist_ok=True)
        # Copy then rename, so a concurrent or interrupted build never leaves a half-written wheel in the cache.
        partial = cache / (built.name + ".partial")
        shutil.copyfile(built, partial)
        os.replace(partial, cache / built.name)
    return cache / built.name


def patch_cxx_standard(source: Path, standard: int) -> None:
    replacements = {
        source / "CMakeLists.txt": [
            ("set(CMAKE_CXX_STANDARD 14)", f"set(CMAKE_CXX_STANDARD {standard})"),
            ('"set(CMAKE_CXX_STANDARD 17)\\n"', f'"set(CMAKE_CXX_STANDARD {standard})\\n"'),
        ],
        source / "horovod" / "torch" / "CMakeLists.txt": [
            ("set(CMAKE_CXX_STANDARD 14)", f"set(CMAKE_CXX_STANDARD {standard})"),
        ],
    }
    for path, pairs in replacements.items():
        text = path.read_text()
        for old, new in pairs:
            if old not in text:
                raise SystemExit(f"error: {path.name} no longer contains {old!r}; the sdist changed, update this patch")
            text = text.replace(old, new)
        path.write_text(text)


def build_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HOROVOD_WITH_PYTORCH="1",
        HOROVOD_WITH_GLOO="1",
        HOROVOD_WITHOUT_MPI="1",
        HOROVOD_WITHOUT_TENSORFLOW="1",
        HOROVOD_WITHOUT_MXNET="1",
        # CMake 4.x rejects the cmake_minimum_required of the bundled gloo without this.
        CMAKE_POLICY_VERSION_MINIMUM="3.5",
        MAKEFLAGS=f"-j{os.cpu_count() or 2}",
    )
    # The venv's bin first: its cmake is the one pyproject pins.
    env["PATH"] = str(Path(sysconfig.get_path("scripts"))) + os.pathsep + env.get("PATH", "")
    cuda_home = env.get("CUDA_HOME") or find_cuda_home()
    if cuda_home:
        # A CUDA build of torch makes Horovod's CMake look for a CUDA toolkit even for a CPU-only Horovod.
        # CMake's FindCUDAToolkit starts from the first nvcc on PATH, which may be a wrapper script outside
        # the toolkit (/usr/local/bin/nvcc here): point it at the toolkit itself.
        env["CUDA_HOME"] = cuda_home
        env["CUDAToolkit_ROOT"] = cuda_home
        if (Path(cuda_home) / "bin" / "nvcc").exists():
            env["PATH"] = str(Path(cuda_home) / "bin") + os.pathsep + env["PATH"]
    return env


def find_cuda_home() -> str | None:
    nvcc = shutil.which("nvcc")
    for candidate in (Path("/usr/local/cuda"), Path(nvcc).resolve().parent.parent if nvcc else None):
        if candidate and (candidate / "include" / "cuda_runtime.h").exists():
            return str(candidate)
    # torch's own nvidia wheels carry the runtime headers and libcudart, for machines with no toolkit.
    for candidate in Path(sysconfig.get_path("purelib"), "nvidia").glob("cu*"):
        if (candidate / "include" / "cuda_runtime.h").exists():
            return str(candidate)
    return None


def pip(*args: str, env: dict[str, str] | None = None) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args], check=True, env=env)


if __name__ == "__main__":
    sys.exit(main())

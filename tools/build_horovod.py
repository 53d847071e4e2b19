"""Install Horovod with PyTorch and Gloo into this environment, building the official sdist once per machine; with
NCCL for GPU tensors where a CUDA toolkit, NCCL and GPUs (or a list of their compute capabilities) are found.

Horovod 0.28.1 (the latest release) compiles as C++14, but PyTorch's headers need C++17 (torch 2.1-2.13) or
C++20 (torch >= 2.14). This script takes the official sdist from the package index (or the one `--sdist` or
HOROVOD_SDIST names), raises the C++ standard in its CMake files (upstream fix #3998, never released), builds a wheel
and caches it outside the clone, keyed by Horovod, torch and Python versions (and CUDA, NCCL and the compute
capabilities for a GPU build), so a later clone on the same machine installs it in seconds.

    .venv/bin/python tools/build_horovod.py                      # into this environment
    python3 tools/build_horovod.py --sdist horovod-0.28.1.tar.gz --target /tmp/hvd   # offline, into a folder

The GPU build (HOROVOD_GPU_OPERATIONS=NCCL, Gloo kept for CPU tensors) needs nvcc (CUDA_HOME, /usr/local/cuda, PATH,
or the nvidia-cuda-nvcc wheels in site-packages), NCCL (NCCL_HOME, or the nvidia-nccl wheel torch brings) and the GPUs'
compute capabilities (those torch sees, or HOROVOD_BUILD_CUDA_CC_LIST=90,...); without any of them it builds as on a
CPU machine and says which was missing. A toolkit laid out as the package index ships it (lib/ but no lib64/,
libcudart.so.13 but no libcudart.so) is given those links in a scratch copy; the build never fetches anything once it
has the sdist (setup.py's setup_requires, cffi, is patched away: the wheel is installed with --no-deps).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

HOROVOD_VERSION = "0.28.1"


@dataclass(frozen=True, slots=True)
class Nccl:
    include: Path
    """The folder holding nccl.h."""
    lib: Path
    """The folder holding libnccl.so (or only libnccl.so.2, as the nvidia-nccl wheel ships it)."""
    version: str
    """From nccl.h, e.g. 2.30.7."""


@dataclass(frozen=True, slots=True)
class Build:
    """What to build: Gloo alone, or NCCL for GPU tensors beside it; and why."""

    gpu: bool
    why: str
    cuda_home: str | None = None
    cuda_version: str | None = None
    nccl: Nccl | None = None
    capabilities: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    """Horovod's build variables on top of the CPU build's."""

    def cache_name(self, torch_version: str) -> str:
        python = f"py{sys.version_info[0]}.{sys.version_info[1]}"
        if not self.gpu:
            return f"horovod-{HOROVOD_VERSION}-torch-{torch_version}-{python}"
        return (f"horovod-{HOROVOD_VERSION}-torch-{torch_version}-cuda-{self.cuda_version}-nccl-{self.nccl.version}"
                f"-sm{'.'.join(self.capabilities)}-{python}")


TOOLKIT_PARTS = {
    "bin/nvcc": "nvidia-cuda-nvcc",
    "nvvm/bin/cicc": "nvidia-nvvm",
    "include/crt/host_config.h": "nvidia-cuda-crt",
    "include/cuda_runtime.h": "nvidia-cuda-runtime",
    "lib*/libcudart.so*": "nvidia-cuda-runtime",
    "lib*/libcudadevrt.a": "nvidia-cuda-runtime",
    "include/cccl|include/cuda/std": "nvidia-cuda-cccl",
}
"""What Horovod's CUDA kernels need of a toolkit (a part: globs, `|` between alternatives: CUDA 13 keeps CCCL in
include/cccl, CUDA 12 in include/cuda), and the package-index wheel, of the toolkit's CUDA version, that ships each
part where the toolkit came from pip (CUDA 13's nvcc wheel holds no headers)."""


def toolkit_missing(cuda_home: str) -> list[str]:
    """The parts of TOOLKIT_PARTS the toolkit at `cuda_home` lacks, each as `part (wheel)`."""
    root = Path(cuda_home)
    return [f"{part.split('|')[0]} ({wheel})" for part, wheel in TOOLKIT_PARTS.items()
            if not any(any(root.glob(each)) for each in part.split("|"))]


def choose(cuda_home: str | None, nvcc: bool, nccl: Nccl | None, capabilities: list[str],
           cuda_version: str | None = None, missing: list[str] | None = None) -> Build:
    """The build for what was found: NCCL only with a toolkit that has nvcc and the rest of TOOLKIT_PARTS (`missing`
    lists what it lacks), NCCL itself, and compute capabilities to compile its kernels for; otherwise Gloo alone, with
    the first thing missing named."""
    if not capabilities:
        return Build(False, "no GPU seen and HOROVOD_BUILD_CUDA_CC_LIST unset: Gloo alone")
    if not (cuda_home and nvcc):
        return Build(False, "GPUs seen but no CUDA toolkit with nvcc (set CUDA_HOME): Gloo alone, so --use-gpu will "
                            "refuse Horovod")
    if missing:
        return Build(False, f"the CUDA toolkit at {cuda_home} lacks {', '.join(missing)}: Gloo alone, so --use-gpu "
                            "will refuse Horovod; install what is named, in the toolkit's CUDA version")
    if nccl is None:
        return Build(False, "GPUs and a CUDA toolkit seen but no NCCL (set NCCL_HOME, or install the nvidia-nccl "
                            "wheel): Gloo alone, so --use-gpu will refuse Horovod")
    caps = tuple(sorted(set(capabilities), key=int))
    env = {"HOROVOD_GPU": "CUDA", "HOROVOD_GPU_OPERATIONS": "NCCL", "HOROVOD_CPU_OPERATIONS": "GLOO",
           "HOROVOD_CUDA_HOME": cuda_home, "HOROVOD_BUILD_CUDA_CC_LIST": ",".join(caps),
           "HOROVOD_NCCL_LINK": "SHARED", "HOROVOD_NCCL_INCLUDE": str(nccl.include),
           "HOROVOD_NCCL_LIB": str(nccl.lib)}
    return Build(True, f"NCCL {nccl.version} for GPU tensors (CUDA {cuda_version}, compute capabilities "
                       f"{', '.join(caps)}), Gloo for CPU tensors", cuda_home, cuda_version, nccl, caps, env)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    sdist = args.sdist or os.environ.get("HOROVOD_SDIST") or None
    if sdist and not Path(sdist).is_file():
        print(f"error: the Horovod sdist {sdist} is not a file; name horovod-{HOROVOD_VERSION}.tar.gz",
              file=sys.stderr)
        return 2
    import torch

    build = find_build(torch)
    if horovod_ready(build.gpu, args.target):
        print(f"horovod {HOROVOD_VERSION} with PyTorch and {'NCCL and ' if build.gpu else ''}Gloo is already "
              "installed")
        return 0
    print(f"horovod {HOROVOD_VERSION}: {build.why}", flush=True)
    cache = wheel_cache() / build.cache_name(torch.__version__)
    wheels = sorted(cache.glob("horovod-*.whl"))
    if not wheels:
        wheels = [build_wheel(torch.__version__, cache, build, sdist)]
    into = ["--target", args.target, "--upgrade"] if args.target else []
    pip("install", "--no-deps", "--force-reinstall", "--no-index", *into, str(wheels[0]))
    if not horovod_ready(build.gpu, args.target):
        print(f"error: the installed Horovod lacks PyTorch, Gloo{' or NCCL' if build.gpu else ''} support; delete "
              f"{cache} and rerun", file=sys.stderr)
        return 1
    return 0


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    out.add_argument("--sdist", help=f"horovod-{HOROVOD_VERSION}.tar.gz to build (default: $HOROVOD_SDIST, else "
                                     "downloaded from the package index)")
    out.add_argument("--target", help="install into this folder (pip --target; its bin/ holds horovodrun) instead "
                                      "of this environment")
    return out


def find_build(torch) -> Build:
    """What this machine allows: the toolkit, NCCL and the compute capabilities, looked up."""
    cuda_home = os.environ.get("CUDA_HOME") or find_cuda_home()
    nvcc = bool(cuda_home) and (Path(cuda_home) / "bin" / "nvcc").exists()
    return choose(cuda_home, nvcc, find_nccl(), capabilities(torch),
                  nvcc_version(Path(cuda_home) / "bin" / "nvcc") if nvcc else None,
                  toolkit_missing(cuda_home) if nvcc else None)


def capabilities(torch) -> list[str]:
    """HOROVOD_BUILD_CUDA_CC_LIST (e.g. 80,90) where given, else the compute capability of every GPU torch sees."""
    given = os.environ.get("HOROVOD_BUILD_CUDA_CC_LIST", "").strip()
    if given:
        return [part.strip() for part in given.split(",") if part.strip()]
    if not torch.cuda.is_available():
        return []
    return [f"{major}{minor}" for major, minor in (torch.cuda.get_device_capability(i)
                                                   for i in range(torch.cuda.device_count()))]


def find_nccl(env: dict[str, str] | None = None, purelib: str | None = None) -> Nccl | None:
    """NCCL_HOME's include/ and lib/, else the nvidia-nccl wheel's (nvidia/nccl in site-packages)."""
    env = os.environ if env is None else env
    homes = [Path(env["NCCL_HOME"])] if env.get("NCCL_HOME") else []
    homes.append(Path(purelib or sysconfig.get_path("purelib"), "nvidia", "nccl"))
    for home in homes:
        header, lib = home / "include" / "nccl.h", home / "lib"
        if header.is_file() and any(lib.glob("libnccl.so*")) and (version := nccl_version(header)):
            return Nccl(home / "include", lib, version)
    return None


def nccl_version(header: Path) -> str | None:
    text = header.read_text(errors="replace")
    parts = [re.search(rf"^#define NCCL_{name}\s+(\d+)", text, re.M) for name in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(part.group(1) for part in parts) if all(parts) else None


def nvcc_version(nvcc: Path) -> str | None:
    """`release 13.0` in nvcc --version, as 13.0."""
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"release (\d+\.\d+)", out)
    return found.group(1) if found else None


def horovod_ready(gpu: bool = False, target: str | None = None) -> bool:
    """True when horovod.torch imports and was built with Gloo, and with NCCL for a GPU build (what horovodrun
    --check-build reports)."""
    code = ("import horovod.torch as hvd; "
            f"raise SystemExit(0 if hvd.gloo_built() and ({not gpu} or hvd.nccl_built()) else 1)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [target, os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, env=env).returncode == 0


def wheel_cache() -> Path:
    if os.environ.get("HOROVOD_WHEEL_CACHE"):
        return Path(os.environ["HOROVOD_WHEEL_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ddp-vs-horovod" / "wheels"


def cxx_standard(torch_version: str) -> int:
    major, minor = (int(part) for part in re.match(r"(\d+)\.(\d+)", torch_version).groups())
    return 20 if (major, minor) >= (2, 14) else 17


def build_wheel(torch_version: str, cache: Path, build: Build, sdist: str | None = None) -> Path:
    standard = cxx_standard(torch_version)
    print(f"building horovod {HOROVOD_VERSION} against torch {torch_version} as C++{standard} "
          "(a few minutes on 2 cores, once per machine)", flush=True)
    clear_killed_builds()
    with tempfile.TemporaryDirectory(prefix=BUILD_PREFIX) as tmp:
        work = Path(tmp)
        (work / OWNER).write_text(str(os.getpid()))
        (work / "tmp").mkdir()  # pip's and nvcc's own temporary files, gone with the folder, or with the next start
        scratch = {**os.environ, "TMPDIR": str(work / "tmp")}
        if sdist:
            shutil.copy(sdist, work)
        else:
            pip("download", "--no-deps", "--no-binary", ":all:", f"horovod=={HOROVOD_VERSION}", "-d", str(work),
                env=scratch)
        with tarfile.open(next(work.glob("horovod-*.tar.gz"))) as archive:
            archive.extractall(work, filter="data")
        source = work / f"horovod-{HOROVOD_VERSION}"
        patch_sdist(source, standard, build.gpu)
        env = {**build_env(), "TMPDIR": scratch["TMPDIR"]}
        if build.gpu:
            toolkit = str(linkable_toolkit(Path(build.cuda_home), work))
            env.update(build.env, HOROVOD_NCCL_LIB=str(linkable_nccl(build.nccl, work)), HOROVOD_CUDA_HOME=toolkit,
                       CUDA_HOME=toolkit, CUDAToolkit_ROOT=toolkit)
            env["PATH"] = str(Path(toolkit) / "bin") + os.pathsep + env["PATH"]
        pip("wheel", "--no-build-isolation", "--no-deps", "-w", str(work / "dist"), str(source), env=env)
        built = next((work / "dist").glob("horovod-*.whl"))
        cache.mkdir(parents=True, exist_ok=True)
        # Copy then rename, so a concurrent or interrupted build never leaves a half-written wheel in the cache.
        partial = cache / (built.name + ".partial")
        shutil.copyfile(built, partial)
        os.replace(partial, cache / built.name)
    return cache / built.name


BUILD_PREFIX, OWNER = "horovod-build-", "owner.pid"
"""A build's folder in the temporary directory, and the file naming the process that builds in it."""


def clear_killed_builds() -> None:
    """Remove the build folders of builds that were killed (their owner is gone): a SIGKILL runs no cleanup, and
    each left ~70 MB of sources, objects and pip's and nvcc's temporary files."""
    for folder in Path(tempfile.gettempdir()).glob(BUILD_PREFIX + "*"):
        try:
            os.kill(int((folder / OWNER).read_text()), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except (OSError, ValueError):  # no owner file yet (a build starting), or not ours to judge
            continue


def linkable_nccl(nccl: Nccl, work: Path) -> Path:
    """A folder with libnccl.so for the linker: the nvidia-nccl wheel ships only libnccl.so.2, which torch loads
    first at run time."""
    if (nccl.lib / "libnccl.so").exists():
        return nccl.lib
    shim = work / "nccl-lib"
    shim.mkdir()
    (shim / "libnccl.so").symlink_to(sorted(nccl.lib.glob("libnccl.so.*"))[0])
    return shim


def linkable_toolkit(cuda_home: Path, work: Path) -> Path:
    """The toolkit itself where it has lib64/ and libcudart.so, as a system toolkit does; else a scratch copy in `work`
    that has them (the package index's wheels ship lib/ and libcudart.so.13 alone, and CMake's FindCUDAToolkit and
    nvcc's implicit -L look for lib64/ and the unversioned library). nvcc finds its profile and nvvm/ beside its own
    real path, so the copy holds nvcc and its profile as files; everything else is linked."""
    lib = next((cuda_home / name for name in ("lib64", "lib") if (cuda_home / name).is_dir()), cuda_home / "lib64")
    if (cuda_home / "lib64").is_dir() and (cuda_home / "lib64" / "libcudart.so").exists():
        return cuda_home
    copy = work / "cuda-toolkit"
    (copy / "bin").mkdir(parents=True)
    for entry in cuda_home.iterdir():
        if entry.name not in ("bin", "lib", "lib64"):
            (copy / entry.name).symlink_to(entry)
    for entry in (cuda_home / "bin").iterdir():
        if entry.name in ("nvcc", "nvcc.profile"):
            shutil.copy2(entry, copy / "bin" / entry.name)
        else:
            (copy / "bin" / entry.name).symlink_to(entry)
    (copy / "lib").mkdir()
    for entry in lib.iterdir():
        (copy / "lib" / entry.name).symlink_to(entry)
    if not (copy / "lib" / "libcudart.so").exists():
        (copy / "lib" / "libcudart.so").symlink_to(sorted(lib.glob("libcudart.so.*"))[0])
    (copy / "lib64").symlink_to("lib")
    return copy


PRE_INCLUDE = " ".join(f"-include {header}" for header in ("cstdint", "cstring", "stdexcept", "string", "algorithm",
                                                          "limits", "memory"))
"""Standard headers every C++ file of the build sees first: what GCC 13 (the GPU machine's, 13.3) no longer pulls in
through others, which Horovod 0.28.1 assumes (std::logic_error in common.h, std::string in group_table.h)."""


def patch_sdist(source: Path, standard: int, gpu: bool = False) -> None:
    """The sdist's build files patched: the C++ standard raised (and the CUDA kernels' with `gpu`), and setup.py's
    setup_requires emptied, which setuptools would otherwise fetch from the network at build time (cffi, which the
    PyTorch extension does not import)."""
    replacements = {
        source / "setup.py": [
            ("setup_requires=require_list if is_build_action() else [],", "setup_requires=[],"),
        ],
        source / "CMakeLists.txt": [
            ("set(CMAKE_CXX_STANDARD 14)", f"set(CMAKE_CXX_STANDARD {standard})"),
            # GCC 13 no longer includes these headers transitively, and Horovod relies on it (PRE_INCLUDE).
            ('set(CMAKE_CXX_FLAGS "${CMAKE_CXX_FLAGS} -pthread -fPIC -Wall -ftree-vectorize")',
             'set(CMAKE_CXX_FLAGS "${CMAKE_CXX_FLAGS} -pthread -fPIC -Wall -ftree-vectorize ' + PRE_INCLUDE + '")'),
            ('"set(CMAKE_CXX_STANDARD 17)\\n"', f'"set(CMAKE_CXX_STANDARD {standard})\\n"'),
        ],
        source / "horovod" / "torch" / "CMakeLists.txt": [
            ("set(CMAKE_CXX_STANDARD 14)", f"set(CMAKE_CXX_STANDARD {standard})"),
        ],
    }
    if gpu:
        # Its CUDA kernels ask for C++11; CUDA 13's headers (CCCL) need C++17.
        replacements[source / "horovod" / "common" / "ops" / "cuda" / "CMakeLists.txt"] = [
            ("set(CMAKE_CUDA_STANDARD 11)", "set(CMAKE_CUDA_STANDARD 17)"),
        ]
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
    wheels = sorted(Path(sysconfig.get_path("purelib"), "nvidia").glob("cu*"))
    candidates = [Path("/usr/local/cuda"), Path(nvcc).resolve().parent.parent if nvcc else None, *wheels]
    found = [c for c in candidates if c and (c / "include" / "cuda_runtime.h").exists()]
    # A toolkit with nvcc first: torch's own nvidia wheels carry the runtime headers and libcudart without it.
    return str(next((c for c in found if (c / "bin" / "nvcc").exists()), found[0])) if found else None


def pip(*args: str, env: dict[str, str] | None = None) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args], check=True, env=env)


if __name__ == "__main__":
    sys.exit(main())

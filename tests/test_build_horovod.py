"""tools/build_horovod.py's choice of build, without a GPU: the toolkit found or not, NCCL found or not, compute
capabilities seen or given; and the wheel cache's key for each."""

import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("build_horovod", REPO / "tools" / "build_horovod.py")
build_horovod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_horovod)

NCCL_H = "#define NCCL_MAJOR 2\n#define NCCL_MINOR 30\n#define NCCL_PATCH 7\n#define NCCL_SUFFIX \"\"\n"


def nccl_home(root: Path, libname: str = "libnccl.so.2") -> Path:
    (root / "include").mkdir(parents=True)
    (root / "include" / "nccl.h").write_text(NCCL_H)
    (root / "lib").mkdir()
    (root / "lib" / libname).write_bytes(b"")
    return root


def test_a_toolkit_nccl_and_a_gpu_build_nccl_for_those_capabilities_with_gloo_kept(tmp_path):
    nccl = build_horovod.find_nccl({"NCCL_HOME": str(nccl_home(tmp_path / "nccl"))}, str(tmp_path / "none"))
    build = build_horovod.choose("/usr/local/cuda", True, nccl, ["90", "80", "90"], "13.0")
    assert build.gpu and build.env["HOROVOD_GPU_OPERATIONS"] == "NCCL"
    assert build.env["HOROVOD_CPU_OPERATIONS"] == "GLOO"
    assert build.env["HOROVOD_BUILD_CUDA_CC_LIST"] == "80,90" and build.env["HOROVOD_NCCL_LINK"] == "SHARED"
    assert build.env["HOROVOD_CUDA_HOME"] == "/usr/local/cuda"
    key = build.cache_name("2.11.0+cu130")
    assert key.startswith("horovod-0.28.1-torch-2.11.0+cu130-cuda-13.0-nccl-2.30.7-sm80.90-py")


@pytest.mark.parametrize("cuda_home, nvcc, with_nccl, caps, missing", [
    (None, False, True, ["90"], "no CUDA toolkit with nvcc"),
    ("/opt/cu13", False, True, ["90"], "no CUDA toolkit with nvcc"),
    ("/usr/local/cuda", True, False, ["90"], "no NCCL"),
    ("/usr/local/cuda", True, True, [], "no GPU seen and HOROVOD_BUILD_CUDA_CC_LIST unset"),
])
def test_anything_missing_builds_gloo_alone_under_todays_cache_key_and_says_what(tmp_path, cuda_home, nvcc, with_nccl,
                                                                                 caps, missing):
    nccl = build_horovod.find_nccl({"NCCL_HOME": str(nccl_home(tmp_path / "nccl"))}) if with_nccl else None
    build = build_horovod.choose(cuda_home, nvcc, nccl, caps, "13.0")
    assert not build.gpu and not build.env and missing in build.why
    python = f"py{sys.version_info[0]}.{sys.version_info[1]}"
    assert build.cache_name("2.15.0") == f"horovod-0.28.1-torch-2.15.0-{python}"


def test_nccl_is_found_in_nccl_home_first_then_in_the_wheel_torch_brings(tmp_path):
    wheel = nccl_home(tmp_path / "site" / "nvidia" / "nccl")
    found = build_horovod.find_nccl({}, str(tmp_path / "site"))
    assert (found.include, found.lib, found.version) == (wheel / "include", wheel / "lib", "2.30.7")
    home = nccl_home(tmp_path / "home", "libnccl.so")
    assert build_horovod.find_nccl({"NCCL_HOME": str(home)}, str(tmp_path / "site")).lib == home / "lib"
    assert build_horovod.find_nccl({"NCCL_HOME": str(tmp_path / "nowhere")}, str(tmp_path / "empty")) is None


def test_the_linker_gets_a_libnccl_so_where_the_wheel_ships_only_the_versioned_one(tmp_path):
    nccl = build_horovod.find_nccl({"NCCL_HOME": str(nccl_home(tmp_path / "nccl"))})
    shim = build_horovod.linkable_nccl(nccl, tmp_path)
    assert (shim / "libnccl.so").resolve() == (tmp_path / "nccl" / "lib" / "libnccl.so.2").resolve()
    home = nccl_home(tmp_path / "home", "libnccl.so")
    assert build_horovod.linkable_nccl(build_horovod.find_nccl({"NCCL_HOME": str(home)}), tmp_path) == home / "lib"


def test_given_capabilities_win_over_the_gpus_seen(monkeypatch):
    class NoGpu:
        class cuda:
            is_available = staticmethod(lambda: False)

    monkeypatch.setenv("HOROVOD_BUILD_CUDA_CC_LIST", "80, 90")
    assert build_horovod.capabilities(NoGpu) == ["80", "90"]
    monkeypatch.delenv("HOROVOD_BUILD_CUDA_CC_LIST")
    assert build_horovod.capabilities(NoGpu) == []


SETUP_PY = "      setup_requires=require_list if is_build_action() else [],\n      install_requires=require_list,\n"


def test_the_gpu_build_raises_the_cuda_kernels_standard_too_and_fetches_nothing_at_build_time(tmp_path):
    source = tmp_path / "horovod-0.28.1"
    flags = 'set(CMAKE_CXX_FLAGS "${CMAKE_CXX_FLAGS} -pthread -fPIC -Wall -ftree-vectorize")\n'
    for path, text in {"CMakeLists.txt": 'set(CMAKE_CXX_STANDARD 14)\n"set(CMAKE_CXX_STANDARD 17)\\n"\n' + flags,
                       "horovod/torch/CMakeLists.txt": "set(CMAKE_CXX_STANDARD 14)\n",
                       "horovod/common/ops/cuda/CMakeLists.txt": "set(CMAKE_CUDA_STANDARD 11)\n",
                       "setup.py": SETUP_PY}.items():
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        (source / path).write_text(text)
    build_horovod.patch_sdist(source, 20, gpu=True)
    assert (source / "horovod/common/ops/cuda/CMakeLists.txt").read_text() == "set(CMAKE_CUDA_STANDARD 17)\n"
    assert "CMAKE_CXX_STANDARD 20" in (source / "horovod/torch/CMakeLists.txt").read_text()
    # GCC 13 (the GPU machine's) no longer includes these through other headers; Horovod 0.28.1 relies on it
    assert "-ftree-vectorize -include cstdint -include cstring -include stdexcept -include string" in (
        source / "CMakeLists.txt").read_text()
    # setuptools would fetch cffi for setup_requires, and the GPU machine has no network
    assert (source / "setup.py").read_text() == "      setup_requires=[],\n      install_requires=require_list,\n"


def pip_toolkit(root: Path, parts: tuple[str, ...] = ("bin/nvcc", "bin/nvcc.profile", "bin/ptxas", "nvvm/bin/cicc",
                                                      "include/cuda_runtime.h", "include/crt/host_config.h",
                                                      "include/cccl/cuda/std/cstddef", "lib/libcudart.so.13",
                                                      "lib/libcudadevrt.a")) -> Path:
    """A CUDA toolkit laid out as the package index's nvidia-cuda-* wheels install it (nvidia/cu13)."""
    for part in parts:
        (root / part).parent.mkdir(parents=True, exist_ok=True)
        (root / part).write_text(part)
    return root


def test_a_toolkit_from_the_package_index_gets_lib64_and_libcudart_so_in_a_scratch_copy(tmp_path):
    toolkit = pip_toolkit(tmp_path / "site" / "nvidia" / "cu13")
    assert build_horovod.toolkit_missing(str(toolkit)) == []
    copy = build_horovod.linkable_toolkit(toolkit, tmp_path / "work")
    assert copy != toolkit and not (toolkit / "lib64").exists() and not (toolkit / "lib" / "libcudart.so").exists()
    assert (copy / "lib64" / "libcudart.so").read_text() == "lib/libcudart.so.13"
    assert (copy / "lib64" / "libcudadevrt.a").read_text() == "lib/libcudadevrt.a"
    # nvcc reads its profile beside its real path: a copy, not a link, so that the profile's TOP is the copy
    assert not (copy / "bin" / "nvcc").is_symlink() and not (copy / "bin" / "nvcc.profile").is_symlink()
    assert (copy / "bin" / "ptxas").is_symlink() and (copy / "nvvm" / "bin" / "cicc").read_text() == "nvvm/bin/cicc"


def test_a_system_toolkit_with_lib64_is_used_as_it_is(tmp_path):
    toolkit = pip_toolkit(tmp_path / "cuda", ("bin/nvcc", "lib64/libcudart.so", "include/cuda_runtime.h"))
    assert build_horovod.linkable_toolkit(toolkit, tmp_path / "work") == toolkit and not (tmp_path / "work").exists()


def test_a_toolkit_missing_a_part_builds_no_nccl_and_names_the_part_and_its_wheel(tmp_path):
    toolkit = pip_toolkit(tmp_path / "cu13", ("bin/nvcc", "include/cuda_runtime.h", "lib/libcudart.so.13",
                                              "include/cuda/std/cstddef"))
    missing = build_horovod.toolkit_missing(str(toolkit))
    assert missing == ["nvvm/bin/cicc (nvidia-nvvm)", "include/crt/host_config.h (nvidia-cuda-crt)",
                       "lib*/libcudadevrt.a (nvidia-cuda-runtime)"]
    nccl = build_horovod.find_nccl({"NCCL_HOME": str(nccl_home(tmp_path / "nccl"))})
    build = build_horovod.choose(str(toolkit), True, nccl, ["90"], "13.0", missing)
    assert not build.gpu
    assert "lacks nvvm/bin/cicc (nvidia-nvvm), include/crt/host_config.h (nvidia-cuda-crt)" in build.why


def test_an_sdist_that_is_not_a_file_is_refused_in_one_line_before_torch(tmp_path, capsys):
    assert build_horovod.main(["--sdist", str(tmp_path / "missing.tar.gz")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_a_killed_build_s_folder_is_cleared_at_the_next_start_and_a_running_one_is_left(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen(["true"])
    gone.wait()  # a process that has ended: the killed build's owner
    killed, running, starting = (tmp_path / f"{build_horovod.BUILD_PREFIX}{name}" for name in ("a", "b", "c"))
    for folder, owner in ((killed, gone.pid), (running, os.getpid())):
        (folder / "tmp").mkdir(parents=True)
        (folder / build_horovod.OWNER).write_text(str(owner))
    starting.mkdir()  # no owner file yet
    build_horovod.clear_killed_builds()
    assert sorted(p.name for p in tmp_path.iterdir()) == [running.name, starting.name]

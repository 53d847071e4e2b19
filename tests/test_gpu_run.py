"""tools/gpu_run.sh, the GPU check's first run on an offline GPU machine: it cannot report success when a step failed.
Its commands are stand-ins on PATH here (nvidia-smi, python3), each exiting as the case says."""

import importlib.util
import os
import subprocess
import zipfile

import pytest

from tests.helpers import REPO

STAND_IN = """#!/usr/bin/env bash
case "$*" in
  *"pip install"*) exit "${PIP_CODE:-0}" ;;
  *build_horovod*) exit "${BUILD_CODE:-0}" ;;
  *host_costs_rank*) exit "${RATE_CODE:-0}" ;;
  *host_costs*) mkdir -p "${@: -1}" && exit "${HOST_CODE:-0}" ;;
  *"--launchers ray"*) mkdir -p "${@: -1}" && exit "${RAY_CODE:-0}" ;;
  *) mkdir -p "${@: -1}" && exit "${CHECK_CODE:-0}" ;;
esac
"""
NVIDIA_SMI = "#!/usr/bin/env bash\necho 'NVIDIA H200, 580.00, 143771 MiB'\nexit \"${SMI_CODE:-0}\"\n"


@pytest.mark.parametrize("codes, exit_code, failed", [
    ({}, 0, None),
    ({"CHECK_CODE": "3"}, 1, "failed: check"),
    ({"RATE_CODE": "6"}, 1, "failed: one-gpu"),
    ({"HOST_CODE": "5"}, 1, "failed: host-costs"),
    ({"RAY_CODE": "4"}, 1, "failed: ray-arm"),
    ({"PIP_CODE": "1"}, 1, "failed: ray-install ray-arm"),
    ({"BUILD_CODE": "2"}, 1, "failed: build host-costs check ray-arm"),
    ({"SMI_CODE": "9"}, 1, "failed: gpu"),  # nvidia-smi's code, not tee's: the script's pipefail
])
def test_every_step_runs_and_a_failed_one_makes_the_run_fail_naming_it(codes, exit_code, failed, tmp_path):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "python3").write_text(STAND_IN)
    (bin_ / "torchrun").write_text(STAND_IN)
    (bin_ / "nvidia-smi").write_text(NVIDIA_SMI)
    for tool in bin_.iterdir():
        tool.chmod(0o755)
    out, work = tmp_path / "out", tmp_path / "work"
    (tmp_path / ".gpu" / "ray").mkdir(parents=True)
    (tmp_path / ".gpu" / "horovod-0.28.1.tar.gz").write_bytes(b"")
    (tmp_path / ".gpu" / "ray" / "ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl").write_bytes(b"")
    done = subprocess.run(["bash", str(REPO / "tools" / "gpu_run.sh"), str(out), str(work)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, **codes, "PATH": f"{bin_}:{os.environ['PATH']}"})
    steps = (out / "steps.txt").read_text()
    assert done.returncode == exit_code, done.stderr
    for name, code in (("gpu", codes.get("SMI_CODE", "0")), ("one-gpu", codes.get("RATE_CODE", "0")), ("build", codes.get("BUILD_CODE", "0")),
                       ("ray-install", codes.get("PIP_CODE", "0")), ("results", "0")):
        assert f"{name}: exit {code}," in steps, steps
    for name, code in (("host-costs", codes.get("HOST_CODE", "0")), ("check", codes.get("CHECK_CODE", "0"))):
        assert f"{name}: exit {code}," in steps or ("BUILD_CODE" in codes and f"{name}: not run" in steps), steps
    if failed:
        assert failed in done.stderr and failed in steps
        assert "every step ok" not in done.stdout
    else:
        assert "ray-arm: exit 0," in steps and "every step ok" in done.stdout
    assert (out / "results.tgz").stat().st_size > 0


def test_without_horovod_s_sdist_the_check_is_named_not_run_and_an_output_inside_the_work_folder_is_refused(
        tmp_path):
    script = str(REPO / "tools" / "gpu_run.sh")
    done = subprocess.run(["bash", script, str(tmp_path / "work" / "out"), str(tmp_path / "work")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "inside" in done.stderr and not (tmp_path / "work").exists()  # nothing made
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool, text in (("python3", STAND_IN), ("torchrun", STAND_IN), ("nvidia-smi", NVIDIA_SMI)):
        (bin_ / tool).write_text(text)
        (bin_ / tool).chmod(0o755)
    done = subprocess.run(["bash", script, str(tmp_path / "out"), str(tmp_path / "work")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}"})
    assert done.returncode == 1 and "failed: build host-costs check" in done.stderr
    steps = (tmp_path / "out" / "steps.txt").read_text()
    assert "build: not run (no .gpu/horovod-*.tar.gz" in steps and "ray-arm: not run (no .gpu/ray" in steps


def test_no_output_or_an_output_it_cannot_write_is_one_line_exit_2_and_nothing_made(tmp_path, request):
    """Seen: no argument exited 1, and a read-only output was found only as its first step wrote there."""
    script = str(REPO / "tools" / "gpu_run.sh")
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=16k", "tmpfs", str(read_only)], check=True)
    request.addfinalizer(lambda: subprocess.run(["umount", str(read_only)], check=True))
    (tmp_path / "a-file").write_text("x")
    for args, said in (([], "usage: bash tools/gpu_run.sh OUTPUT_DIR [WORK_DIR]"),
                       ([str(read_only / "out"), str(tmp_path / "work")], "out cannot be written here"),
                       ([str(tmp_path / "out"), str(read_only / "work")], "work cannot be written here"),
                       ([str(tmp_path / "a-file" / "out")], "a-file is read-only or not a folder")):
        done = subprocess.run(["bash", script, *args], cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert (done.returncode, done.stdout) == (2, ""), (args, done.stderr)
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ") and said in done.stderr, done.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "read-only"]


def _ray_bundle():
    spec = importlib.util.spec_from_file_location("ray_bundle", REPO / "tools" / "ray_bundle.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_ray_bundle_writes_its_wheel_whole_or_under_a_name_the_next_start_clears(tmp_path):
    bundle = _ray_bundle()
    wheel = tmp_path / "ray-1.0-cp312-cp312-manylinux2014_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as made:
        made.writestr("ray/__init__.py", "")
        made.writestr("ray/jars/ray.jar", "java")
        made.writestr("ray-1.0.dist-info/RECORD", "")
    out = tmp_path / "out"
    out.mkdir()
    bundle.strip(wheel, out / wheel.name)
    assert [p.name for p in out.iterdir()] == [wheel.name]  # renamed once whole: no .part left
    with zipfile.ZipFile(out / wheel.name) as stripped:
        assert "ray/jars/ray.jar" not in stripped.namelist() and stripped.testzip() is None
    killed = tmp_path / "killed"
    (killed / bundle.SCRATCH).mkdir(parents=True)
    (killed / (wheel.name + bundle.PART)).write_bytes(b"PK\x03\x04 cut")
    assert bundle.killed_bundle(killed) and not bundle.killed_bundle(out)
    assert bundle.main(["--out", str(out)]) == 2  # a finished bundle is not overwritten


def test_a_rehearsal_s_keep_folder_is_reused_when_a_rehearsal_wrote_it_and_refused_otherwise(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("gpu_rehearsal", REPO / "tools" / "gpu_rehearsal.py")
    rehearsal = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rehearsal)
    keep = tmp_path / "keep"
    (keep / "env").mkdir(parents=True)  # a killed rehearsal's
    (keep / "notes.txt").write_text("mine")
    assert rehearsal.main(["--keep", str(keep)]) == 2
    assert "holds files no rehearsal wrote" in capsys.readouterr().err and (keep / "notes.txt").exists()
    assert {"env", "check.log", "ray-site"} <= rehearsal.WRITTEN


def test_the_rehearsal_s_environment_takes_the_gpu_machine_s_torch_from_its_own_folder_not_this_venv_s(tmp_path):
    spec = importlib.util.spec_from_file_location("gpu_rehearsal", REPO / "tools" / "gpu_rehearsal.py")
    rehearsal = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rehearsal)
    torch_dir = tmp_path / "torch"
    for name, version in (("torch", "2.11.0"), ("torchvision", "0.26.0")):
        (torch_dir / name).mkdir(parents=True)
        (torch_dir / f"{name}-{version}.dist-info").mkdir()
        (torch_dir / f"{name}-{version}.dist-info" / "METADATA").write_text(f"Name: {name}\nVersion: {version}\n")
    assert rehearsal.gpu_like_env(tmp_path / "env", torch_dir)
    site = tmp_path / "env" / "gpu-machine"
    assert not {"torch", "torchvision", "triton", "nvidia"} & {path.name for path in site.iterdir()}
    pth = next((tmp_path / "env" / "lib").glob("python*/site-packages/gpu-machine.pth")).read_text().splitlines()
    assert pth == [str(torch_dir), str(site)]  # the GPU machine's torch first
    assert (tmp_path / "env" / "bin" / "torchrun").exists() and (site / "numpy").is_symlink()

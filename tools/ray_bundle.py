"""Ray for a machine with no network and no Ray (the GPU machine): the package index's wheel with what the project's
Python does not use taken out, recompressed, beside the wheels of the dependencies that machine lacks, in one folder
that fits, with the source tree, in 64 MiB, what a copy to an offline GPU machine may hold.

    python3 tools/ray_bundle.py --python 3.12 --out .gpu/ray      # for the GPU machine (Python 3.12)
    python3 tools/ray_bundle.py --python 3.11 --out /tmp/ray-311  # for a rehearsal here (make gpu-rehearsal)

Install it there, offline: `python3 -m pip install --no-index --no-deps --target /tmp/site .gpu/ray/*.whl`, then
PYTHONPATH=/tmp/site and PATH=/tmp/site/bin. Taken out (STRIPPED): the Java jar (32 MB of the 79), the dashboard's
web client, RLlib, Serve and the LLM library. Kept: Ray's core, its raylet and GCS, Ray Train and Tune, which
TorchTrainer and horovod.ray's RayExecutor use. Needs the package index once; prints the folder's size.
"""

import argparse
import base64
import hashlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

RAY = "ray==2.60.0"
STRIPPED = ("ray/jars/", "ray/dashboard/client/build/", "ray/rllib/", "ray/serve/", "ray/llm/")
"""Folders of Ray's wheel that neither Ray Train, RayExecutor nor `ray start` imports or runs."""
MISSING_THERE = ("jsonschema==4.26.0", "jsonschema-specifications==2025.9.1", "referencing==0.37.0",
                 "rpds-py==2026.9.1", "pydantic==2.14.4", "pydantic-core==2.50.5", "annotated-types==0.8.0",
                 "typing-inspection==0.4.5", "tensorboardX==2.6.5")
"""What Ray core and Ray Train import that the GPU machine's package list (tools/gpu_rehearsal.py's GPU_MACHINE, read
2026-11-17) lacks, in the versions .venv holds beside Ray 2.60; the rest (click, filelock, msgpack, protobuf, pyyaml,
requests, pandas, pyarrow, fsspec) is there."""
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")
LIMIT_MB = 64 * 2**20 / 1e6


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    out.add_argument("--python", default=f"{sys.version_info[0]}.{sys.version_info[1]}",
                     help="the Python version of the machine that installs it (default: this one's)")
    out.add_argument("--out", required=True, help="the folder to write the wheels into (made if missing)")
    return out


PART, SCRATCH = ".part", ".download"
"""A wheel being written, and the download folder: inside --out, so that what a killed bundle leaves is there, named
as unfinished, and the next start clears it."""


def killed_bundle(out: Path) -> bool:
    """Whether `out` holds only what a bundle killed midway leaves: its download folder and unfinished wheels."""
    return all(path.name == SCRATCH or path.name.endswith(PART) for path in out.iterdir())


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    out = Path(args.out)
    if out.exists() and any(out.iterdir()) and not killed_bundle(out):
        print(f"error: --out {out} is not empty; name a new folder", file=sys.stderr)
        return 2
    if out.exists():
        shutil.rmtree(out)  # empty, or a killed bundle's leftovers
    (out / SCRATCH).mkdir(parents=True)
    download(args.python, out / SCRATCH, [RAY])
    wheel = next((out / SCRATCH).glob("ray-*.whl"))
    strip(wheel, out / wheel.name)
    shutil.rmtree(out / SCRATCH)
    download(args.python, out, list(MISSING_THERE))
    size = sum(path.stat().st_size for path in out.iterdir())
    print(f"{out}: {len(list(out.iterdir()))} wheels, {size / 1e6:.1f} MB (a copy to an offline GPU machine holds "
          f"{LIMIT_MB:.1f} MB with the source tree)")
    return 0


def download(python: str, into: Path, requirements: list[str]) -> None:
    platforms = [flag for platform in PLATFORMS for flag in ("--platform", platform)]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                    "--only-binary=:all:", "--python-version", python, "--implementation", "cp", *platforms,
                    "-d", str(into), *requirements], check=True)


def strip(wheel: Path, into: Path) -> None:
    """`wheel` without STRIPPED, recompressed with LZMA (which pip's zipfile reads), its RECORD rewritten to match;
    written under a PART name and renamed once whole."""
    part = into.with_name(into.name + PART)
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(part, "w", zipfile.ZIP_LZMA) as target:
        record = next(name for name in source.namelist() if name.endswith(".dist-info/RECORD"))
        lines = []
        for info in source.infolist():
            if info.filename.startswith(STRIPPED) or info.filename == record:
                continue
            data = source.read(info)
            target.writestr(info, data, compress_type=zipfile.ZIP_LZMA)
            if not info.is_dir():
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                lines.append(f"{info.filename},sha256={digest},{len(data)}")
        target.writestr(record, "\n".join([*lines, f"{record},,"]) + "\n", compress_type=zipfile.ZIP_LZMA)
    part.rename(into)


if __name__ == "__main__":
    sys.exit(main())

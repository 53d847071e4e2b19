"""A folder of its own for every run started by hand, as `compare` gives each of its runs: two runs never share
(or overwrite) a results.json or a TensorBoard log unless the user names the same --output-dir.

Every rank of one launch must agree on the folder without talking (Horovod opens files there before its group
exists): the name comes from the launcher process they all descend from, its start time and pid.
"""

import logging
from datetime import datetime, timezone
from pathlib import Path

from contract.errors import launcher_rank
from runtime import launch

log = logging.getLogger(__name__)

DEFAULT = "results/<run-id>"
"""What --help shows as --output-dir's default; the entry point puts the run's own folder in its place."""


def new_folder(root: Path, name: str = "") -> Path:
    """root/<name> (default: UTC now, 20261127-173000), made, or root/<name>-2, … where a command started in the same
    second took it: two commands given one --output-dir never share a folder."""
    name = name or datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    for suffix in ["", *(f"-{i}" for i in range(2, 100))]:
        try:
            (folder := root / f"{name}{suffix}").mkdir(parents=True)
            return folder
        except FileExistsError:
            continue
    raise FileExistsError(root / name)


def resolve(output_dir: str, backend: str, launcher: str) -> str:
    """`output_dir`, or where it is DEFAULT: results/<UTC start>-<backend>-<launcher>-<pid> of the launcher process
    (torchrun's agent, horovodrun) this rank runs under, or of this process where there is none or it is the
    launcher (Ray's driver, native_ddp.spawn)."""
    if output_dir != DEFAULT:
        return output_dir
    import psutil

    process = psutil.Process() if launcher in ("ray", "mp.spawn") else launch.launcher_process()
    started = datetime.fromtimestamp(process.create_time(), timezone.utc).strftime("%Y%m%d-%H%M%S")
    return str(Path(DEFAULT).parent / f"{started}-{backend}-{launcher}-{process.pid}")


def announce(args_output_dir: str, folder: str) -> None:
    """Once every check has passed: where a run whose folder was chosen for it writes (rank 0 alone)."""
    if args_output_dir == DEFAULT and launcher_rank() == 0:
        log.info("output: %s (this run's own folder; --output-dir names another)", folder)

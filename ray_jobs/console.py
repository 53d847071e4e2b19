"""usage: ddp-vs-horovod COMMAND [flags]   (ddp-vs-horovod --help, --version)

The commands an installed wheel gives, beside `python -m` in a clone:

    ddp-vs-horovod compare --model resnet18 --repeats 4      # python -m ray_jobs.compare
    ddp-vs-horovod train --backend horovod --workers 2       # python -m ray_jobs.train

Each command takes the flags of its module (`ddp-vs-horovod compare --help`); a Ray cluster's `pip` runtime
environment or `--working-dir` can carry the wheel. `make` stays for the repository.
"""

import runpy
import sys
from importlib import metadata

from contract.config import ConfigError
from runtime import cli

COMMANDS = {"compare": "ray_jobs.compare", "train": "ray_jobs.train", "gpu-check": "ray_jobs.gpu_check",
            "predict": "experiments.gpu_model.predict_gpus", "replicate": "ray_jobs.replicate",
            "schedule-check": "experiments.gpu_model.schedule_check", "add-references": "ray_jobs.add_references",
            "published-check": "experiments.gpu_model.published_check"}
"""Each command and the module whose `python -m` it is."""


def command(argv: list[str]) -> str:
    """The module `argv`'s first word names, or a ConfigError listing the commands."""
    if not argv or argv[0] not in COMMANDS:
        given = f"{argv[0]!r} is not one" if argv else "none was given"
        raise ConfigError(f"ddp-vs-horovod takes a command first ({given}): {', '.join(COMMANDS)}; e.g. "
                          "ddp-vs-horovod compare --help")
    return COMMANDS[argv[0]]


def main() -> None:
    if sys.argv[1:] in (["--help"], ["-h"]):
        print(f"{__doc__}\ncommands: " + ", ".join(f"{name} (python -m {module})" for name, module in COMMANDS.items()))
        return
    if sys.argv[1:] == ["--version"]:
        print(f"ddp-vs-horovod {metadata.version('ddp-vs-horovod')}")
        return
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        cli.run(lambda: command(sys.argv[1:]))  # refused: one line, exit 2
        return
    module = COMMANDS[sys.argv[1]]
    cli.prog = f"ddp-vs-horovod {sys.argv[1]}"  # its usage names the command typed, not the module's python -m
    sys.argv = [cli.prog, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

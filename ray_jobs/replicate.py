"""Does each verdict hold on another machine or day? Snapshots of the same models side by side, from their JSON alone.

    python -m ray_jobs.replicate docs/results/models docs/results/models-epyc-2026-11-27 \\
        docs/results/models-xeon-2026-11-25 --output docs/results/replication-models.md

Each snapshot is a folder written by python -m ray_jobs.compare (a comparison, or a grid of them). Per model: each
snapshot's native ÷ Horovod with its interval, the step parts its rounds decide, on how many snapshots and CPUs the
verdict held, and which part of native − Horovod moved between the first snapshot that took the step apart and each
later one. Nothing runs: it reads comparison.json files.
"""

import logging
from pathlib import Path

from analysis import replication
from contract.config import ConfigError
from runtime import cli, preflight, space

log = logging.getLogger(__name__)


def parser() -> cli.Parser:
    out = cli.Parser(description=__doc__.split("\n\n")[0])
    out.add_argument("snapshots", nargs="+", help="two or more folders written by python -m ray_jobs.compare")
    out.add_argument("--output", type=Path, help="a Markdown file to write the table to (default: print it)")
    return out


def main() -> int:
    args = parser().parse_args()
    output = writable_file(args.output) if args.output is not None else None
    text = replication.render(args.snapshots)
    if output is None:
        log.info("%s", text)
        return 0
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        with space.atomic_file(output, len(text.encode())) as temporary:
            temporary.write_text(text)
    except OSError as error:  # a disk found full is space's own one line; this is a folder that refuses a file
        raise ConfigError(f"--output {output} cannot be written ({error.strerror}); choose another path") from None
    log.info("wrote %s", output)
    return 0


def writable_file(path: Path) -> Path:
    """--output, absolute, once it names a file that can be written (its folder may not exist yet). Creates nothing."""
    if len(path.name.encode()) > preflight.NAME_MAX:
        raise ConfigError(f"--output {str(path)[:60]}…: its name is {len(path.name.encode())} bytes, filesystems "
                          f"allow {preflight.NAME_MAX}; choose a shorter name")
    folder = preflight.writable_dir(path.expanduser().parent, "--output")
    if path == Path(".") or (folder / path.name).is_dir():
        raise ConfigError(f"--output {path} is a folder; name a Markdown file, e.g. {path / 'replication.md'}")
    return folder / path.name


if __name__ == "__main__":
    cli.run(main)

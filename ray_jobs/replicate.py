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
from runtime import cli, space

log = logging.getLogger(__name__)


def parser() -> cli.Parser:
    out = cli.Parser(description=__doc__.split("\n\n")[0])
    out.add_argument("snapshots", nargs="+", help="two or more folders written by python -m ray_jobs.compare")
    out.add_argument("--output", type=Path, help="a Markdown file to write the table to (default: print it)")
    return out


def main() -> int:
    args = parser().parse_args()
    text = replication.render(args.snapshots)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        with space.atomic_file(args.output, len(text.encode())) as temporary:
            temporary.write_text(text)
        log.info("wrote %s", args.output)
    else:
        log.info("%s", text)
    return 0


if __name__ == "__main__":
    cli.run(main)

"""The last thing a Ray worker prints: the driver's output router (cluster/worker_output.py) waits for it, so that a
run's last lines come before its summary."""

import sys

END = "ddp-vs-horovod: end of worker output"


def end() -> None:
    """In a Ray worker, last: tells the driver this process has nothing more to print."""
    sys.stdout.write(END + "\n")  # a marker for the driver's router, not a log line: it never reaches the output
    sys.stdout.flush()

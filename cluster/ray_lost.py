"""A Ray that dies under the command (its GCS server killed, the head node gone) is named in one line. Ray's driver
waits 60 s for its GCS and then exits 1 without a word on the terminal: the cause is only in ray.log ("Failed to
connect to GCS within 60 seconds"). A thread of the driver's probes the GCS's port instead, and ends the command
with the line once it has refused for LOST_AFTER_S."""

import os
import socket
import threading
import time
from collections.abc import Callable

from runtime import signals

LOST_AFTER_S = 30.0
"""How long the GCS must refuse before the command ends: well inside Ray's own 60 s, well past a busy moment."""
PROBE_EVERY_S = 2.0


def watch(address: str, what: str, wanted: Callable[[], bool]) -> threading.Thread:
    """Probe the GCS at `address` (host:port) while `wanted()` (ray.is_initialized); `what` names that Ray. Its line
    goes to the terminal's stderr as it is now: during a run on Ray, descriptor 2 goes to ray.log
    (cluster/worker_output.py)."""
    host, port = address.rsplit(":", 1)
    terminal = os.dup(2)
    thread = threading.Thread(target=_watch, args=(host, int(port), what, wanted, terminal), name="ray-lost-watch",
                              daemon=True)
    thread.start()
    return thread


def _watch(host: str, port: int, what: str, wanted: Callable[[], bool], terminal: int) -> None:
    refused_since = None
    while wanted():
        if _answers(host, port):
            refused_since = None
        elif refused_since is None:
            refused_since = time.monotonic()
        elif time.monotonic() - refused_since >= LOST_AFTER_S:
            os.write(terminal, f"error: {what} stopped answering: its GCS at {host}:{port} has refused for "
                               f"{LOST_AFTER_S:.0f} s (its gcs_server or head node died), so no run can go on; the "
                               "runs that finished are kept (compare --resume <its folder> goes on from them once Ray "
                               "is back)\n".encode())
            signals.exit_now(1)
        time.sleep(PROBE_EVERY_S)


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=5):
            return True
    except OSError:
        return False

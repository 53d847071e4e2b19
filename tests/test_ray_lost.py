"""A Ray that dies under the command is named in one line (cluster/ray_lost.py): its GCS's port probed, the line on
the terminal's stderr, exit 1. The real case, a compare whose own gcs_server was SIGKILLed, took 30 s to say it."""

import socket
import subprocess
import sys
import time

from tests.helpers import REPO

WATCHER = """
import sys, time
sys.path.insert(0, sys.argv[2])
from cluster import ray_lost
ray_lost.LOST_AFTER_S, ray_lost.PROBE_EVERY_S = 1.0, 0.1
ray_lost.watch(sys.argv[1], "the Ray this command started", lambda: True)
print("watching", flush=True)
time.sleep(30)
"""


def test_a_gcs_that_stops_answering_ends_the_command_in_one_line_on_its_terminal():
    gcs = socket.create_server(("127.0.0.1", 0))
    address = f"127.0.0.1:{gcs.getsockname()[1]}"
    watcher = subprocess.Popen([sys.executable, "-c", WATCHER, address, str(REPO)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert watcher.stdout.readline() == "watching\n"
    time.sleep(0.5)
    assert watcher.poll() is None  # it answers: nothing said
    gcs.close()
    began = time.monotonic()
    _, err = watcher.communicate(timeout=20)
    assert watcher.returncode == 1 and time.monotonic() - began < 10
    assert err == (f"error: the Ray this command started stopped answering: its GCS at {address} has refused for 1 s "
                   "(its gcs_server or head node died), so no run can go on; the runs that finished are kept (compare "
                   "--resume <its folder> goes on from them once Ray is back)\n")


def test_the_watch_ends_with_the_driver_s_ray():
    from cluster import ray_lost

    gone = ray_lost.watch("127.0.0.1:1", "the Ray cluster", lambda: False)
    gone.join(timeout=5)
    assert not gone.is_alive()


def test_a_ray_executor_that_cannot_start_is_bounded_and_says_so():
    import pytest

    from contract.errors import RunFailed
    from launchers.ray_executor import start_bounded

    class Hangs:
        def start(self) -> None:
            time.sleep(30)  # a node whose link is down: Horovod's services wait on it

    began = time.monotonic()
    with pytest.raises(RunFailed, match=r"RayExecutor did not start its 2 worker\(s\) within 0.5 s \(--stall-timeout"):
        start_bounded(Hangs(), 2, 0.5)
    assert time.monotonic() - began < 5

    class Fails:
        def start(self) -> None:
            raise ValueError("no placement")

    with pytest.raises(ValueError, match="no placement"):
        start_bounded(Fails(), 2, 5)

"""--cpu-affinity core: each rank on a core of its own, every thread of it, and the cores recorded per rank."""

import os
import subprocess
import sys

import pytest

from contract.config import ConfigError, TrainConfig
from workload import cores

PROBE = """
import os, threading, time
from pathlib import Path
from workload import cores
started = threading.Event()
def idle():
    started.set()
    time.sleep(5)
threading.Thread(target=idle, daemon=True).start()  # as gloo's and Horovod's threads exist before the pin
started.wait()
cores.pin({rank}, {world}, {affinity!r})
print(cores.current())
print(sorted({{Path(f"/proc/self/task/{{t}}/status").read_text().split("Cpus_allowed_list:")[1].split()[0]
               for t in os.listdir("/proc/self/task")}}))
"""


def probe(rank: int, world: int, affinity: str) -> tuple[str, str]:
    out = subprocess.run([sys.executable, "-c", PROBE.format(rank=rank, world=world, affinity=affinity)],
                         capture_output=True, text=True, check=True).stdout.split("\n")
    return out[0], out[1]


def test_a_pinned_rank_runs_every_thread_on_its_own_core():
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.fail("this test needs a machine that lets a process use 2 cores")  # the project's machines have 2
    rank = 1
    mine, threads = probe(rank, 2, "core")
    assert mine == str(allowed[rank])
    assert threads == repr([str(allowed[rank])])


def test_unpinned_or_too_many_ranks_stay_where_the_scheduler_puts_them():
    everything = cores.current()
    assert probe(0, 2, "none")[0] == everything
    assert probe(0, len(os.sched_getaffinity(0)) + 1, "core")[0] == everything


def test_core_ranges_are_written_compactly(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 5, 7, 8})
    assert cores.current() == "0-2,5,7-8"


def test_an_unknown_affinity_or_a_shared_pinned_core_is_refused():
    with pytest.raises(ConfigError, match="--cpu-affinity must be one of core, none"):
        TrainConfig(cpu_affinity="numa")
    with pytest.raises(ConfigError, match="--threads-per-worker 2 would share it"):
        TrainConfig(cpu_affinity="core", threads_per_worker=2)

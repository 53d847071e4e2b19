"""--cpu-affinity share: the ranks on a machine split its cores, every thread of a rank on its own share, and the cores
recorded per rank."""

import os
import subprocess
import sys

import pytest

from contract.config import ConfigError, TrainConfig
from workload import cores

PROBE = """
import os, threading, time
from pathlib import Path
import torch
from workload import cores
from workload.distributed import DistContext
started = threading.Event()
def idle():
    started.set()
    time.sleep(5)
threading.Thread(target=idle, daemon=True).start()  # as gloo's and Horovod's threads exist before the pin
started.wait()
# every rank on this machine: the gather hands each its own row back for every rank
ctx = DistContext(rank={rank}, world_size={world}, local_rank={rank}, device=torch.device("cpu"),
                  all_reduce=lambda table, op: table.sum(0).expand_as(table).clone())
cores.pin(ctx, {affinity!r}, {threads})
print(cores.current())
print(sorted({{Path(f"/proc/self/task/{{t}}/status").read_text().split("Cpus_allowed_list:")[1].split()[0]
               for t in os.listdir("/proc/self/task")}}))
"""


def probe(rank: int, world: int, affinity: str, threads: int = 1) -> tuple[str, str]:
    out = subprocess.run([sys.executable, "-c", PROBE.format(rank=rank, world=world, affinity=affinity,
                                                             threads=threads)],
                         capture_output=True, text=True, check=True).stdout.split("\n")
    return out[0], out[1]


def test_a_pinned_rank_runs_every_thread_on_its_own_share_of_the_cores():
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.fail("this test needs a machine that lets a process use 2 cores")  # the project's machines have 2
    share = sorted(cores.share(1, 2, allowed))  # the second half: one core on a 2-core machine
    mine, threads = probe(1, 2, "share")
    assert mine == (str(share[0]) if len(share) == 1 else f"{share[0]}-{share[-1]}")
    assert threads == repr([mine])


def test_unpinned_too_many_ranks_or_a_share_short_of_the_torch_threads_stay_where_the_scheduler_puts_them():
    everything = cores.current()
    assert probe(0, 2, "none")[0] == everything
    assert probe(0, len(os.sched_getaffinity(0)) + 1, "share")[0] == everything
    assert probe(0, 2, "share", threads=len(os.sched_getaffinity(0)))[0] == everything


def test_a_machine_s_cores_are_split_evenly_and_the_rest_left_to_it():
    eight = list(range(8))
    assert [cores.share(i, 2, eight) for i in range(2)] == [{0, 1, 2, 3}, {4, 5, 6, 7}]
    assert [cores.share(i, 3, eight) for i in range(3)] == [{0, 1}, {2, 3}, {4, 5}]  # 6 and 7 left to the machine
    assert cores.share(0, 2, [0, 1]) == {0}
    assert cores.share(0, 4, eight, threads=3) is None and cores.share(0, 9, eight) is None


def test_ranks_on_other_machines_do_not_take_this_machine_s_cores():
    hosts = [7, 7, 9, 9, 9]  # ranks 0-1 on one machine, 2-4 on another
    assert [cores.slot(hosts, rank) for rank in range(5)] == [(0, 2), (1, 2), (0, 3), (1, 3), (2, 3)]


def test_core_ranges_are_written_compactly(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 5, 7, 8})
    assert cores.current() == "0-2,5,7-8"


def test_an_unknown_affinity_is_refused():
    with pytest.raises(ConfigError, match="--cpu-affinity must be one of share, none"):
        TrainConfig(cpu_affinity="core")

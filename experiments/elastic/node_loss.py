"""Lose the last node of a simulated cluster mid-run and bring it back: the harness of every elastic trial.

The run under trial writes one line per step to <folder>/timeline.jsonl (rank 0); the harness reads it to choose the
moment of the loss, then every process of the node dies by SIGKILL (Ray's raylet and workers, or the torchrun agent
and its rank), and after `return_after_s` the node comes back: `ray start --address`, or a new torchrun agent.
"""

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from experiments.simulated_cluster import netsim, sim_cluster

RDZV_PORT = 29400
POLL_S = 0.2
KILL_EPOCH, KILL_STEP = 1, 10
"""The loss: after step 10 of the second epoch (epoch index 1), at full size, in every trial."""


def read(path: Path, start: int = 0) -> tuple[list[dict], int]:
    """The events of the whole lines the timeline gained after byte `start` (it is only appended to), and the byte
    where the next read starts. A line still being written waits for the next read; one cut off by a kill mid-write
    is left out."""
    try:
        with path.open("rb") as timeline:
            timeline.seek(start)
            new = timeline.read()
    except FileNotFoundError:
        return [], start
    whole = new.rfind(b"\n") + 1
    events = []
    for line in new[:whole].decode(errors="replace").splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            events.append(json.loads(line))
    return events, start + whole


def torchrun_agent(sim: netsim.Cluster, node: int, min_nodes: int, target: list[str]) -> list[str]:
    """One torchrun agent of node `node`, one rank, the c10d rendezvous on node 0; `target` is the script (and its
    arguments) or `-m module`."""
    return netsim.in_node(sim, node, [
        str(Path(sys.executable).with_name("torchrun")), "--nnodes", f"{min_nodes}:{sim.nodes}",
        "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{sim.ip(0)}:{RDZV_PORT}",
        "--rdzv-id", "elastic", "--max-restarts", "5", "--local-addr", sim.ip(node), *target])


def run(folder: Path, *, nodes: int, env: dict[str, str], timeout_s: float, return_after_s: float,
        kill_when: Callable[[dict], bool] | None, driver: list[str] | None = None,
        agent: Callable[[netsim.Cluster, int], list[str]] | None = None) -> dict:
    """One run on `nodes` simulated nodes, one worker each: `driver` in node 0 on Ray, or `agent(sim, node)` on
    every node (torchrun). The last node dies at the first step `kill_when(event)` accepts (never when it is None).

    Returns the run's exit code (None: past `timeout_s`), the times of the loss and the return, and the timeline.
    """
    folder.mkdir(parents=True)
    timeline = folder / "timeline.jsonl"
    killed = returned = None
    last = nodes - 1
    with sim_cluster.cluster(nodes, 1, start_ray=driver is not None) as sim:
        env = {**netsim.node_environment(sim), **env}

        def start(command: list[str], log: str) -> subprocess.Popen:
            return subprocess.Popen(command, env=env, stdout=(folder / log).open("w"), stderr=subprocess.STDOUT)

        if driver is None:
            main = start(agent(sim, 0), "agent0.log")
            for node in range(1, nodes):
                start(agent(sim, node), f"agent{node}.log")
        else:
            main = start(netsim.in_node(sim, 0, driver), "driver.log")
        deadline = time.time() + timeout_s
        read_to = 0  # the timeline's bytes already looked at for the moment of the loss
        while main.poll() is None and time.time() < deadline:
            time.sleep(POLL_S)
            if kill_when and killed is None:
                new, read_to = read(timeline, read_to)
                if any(e["ev"] == "step" and kill_when(e) for e in new):
                    sim_cluster.kill_node(sim, last)
                    killed = time.time()
            if killed is not None and returned is None and time.time() - killed >= return_after_s:
                returned = time.time()
                if driver is None:
                    start(agent(sim, last), f"agent{last}-returned.log")
                else:
                    sim_cluster.start_node(sim, last, 1)
        code = main.poll()
    return {"exit": code, "killed": killed, "returned": returned, "events": read(timeline)[0]}

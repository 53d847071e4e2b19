"""The simulated cluster's life (netsim.py builds its links): Ray on every node, a node lost and back,
and the teardown, which kills every process in the namespaces (never `ray stop`, which stops every Ray on the host)
and deletes them with their links, after a failure, Ctrl-C or SIGTERM too, or later for a run that was SIGKILLed."""

import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psutil

from experiments.simulated_cluster import netsim
from runtime import launch, signals

log = logging.getLogger(__name__)
RAY_START_TIMEOUT_S = 120
KILL_GRACE_S = 5
KILL_ROUNDS = 5  # a process can fork while the namespace is emptied: list and kill again until none is left


@contextmanager
def cluster(nodes: int, cpus_per_node: int, start_ray: bool = True) -> Iterator[netsim.Cluster]:
    """Build the namespaces and links, start Ray on every node (unless `start_ray` is false: torchrun brings its own
    rendezvous); tear it all down when the block ends, however."""
    netsim.check_host(nodes)
    reap_stale()
    prefix = f"dvh{os.getpid()}"
    sim = netsim.Cluster(nodes, prefix, Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir="/tmp")))
    signals.install()  # a SIGTERM tears down as Ctrl-C does
    try:
        netsim.build_links(sim)
        if start_ray:
            for node in range(sim.nodes):
                start_node(sim, node, cpus_per_node)
            log.info("simulated cluster: %d nodes (%s), Ray head at %s", sim.nodes,
                     ", ".join(f"{sim.namespace(i)} {sim.ip(i)}" for i in range(sim.nodes)), sim.address)
        yield sim
    finally:
        teardown(sim)


def start_node(sim: netsim.Cluster, node: int, cpus_per_node: int) -> None:
    """Start Ray on node `node`: the head on node 0, else a node that joins it (again, after kill_node)."""
    role = (["--head", "--port", str(netsim.GCS_PORT), "--include-dashboard=false"] if node == 0
            else ["--address", sim.address])
    command = netsim.in_node(sim, node, [netsim.ray_executable(), "start", *role, "--node-ip-address", sim.ip(node),
                                  "--num-cpus", str(cpus_per_node), "--disable-usage-stats",
                                  "--temp-dir", str(sim.temp_dir)])
    log_path = sim.temp_dir / f"ray-start-node{node}.log"
    try:
        with log_path.open("w") as out:
            done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=netsim.node_environment(sim),
                                  timeout=RAY_START_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise netsim.ClusterError(f"`ray start` on simulated node {node} did not finish in {RAY_START_TIMEOUT_S} s") \
            from None
    if done.returncode:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise netsim.ClusterError(f"`ray start` on simulated node {node} failed: {tail[0][:200]}")


def kill_node(sim: netsim.Cluster, node: int) -> int:
    """SIGKILL every process of node `node` at once, as a lost machine ends them; returns how many there were."""
    pids = _pids(sim.namespace(node))
    _signal(pids, signal.SIGKILL)
    return len(pids)


def teardown(sim: netsim.Cluster) -> None:
    """Kill every process in the cluster's namespaces, delete the namespaces (their links go with them), and remove
    Ray's temp folder. Safe to call twice, and after a half-built cluster. A second Ctrl-C or SIGTERM waits until
    it is done: a teardown cut short would leave what it exists to remove."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        _kill_and_delete(sim)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _kill_and_delete(sim: netsim.Cluster) -> None:
    for _ in range(KILL_ROUNDS):
        pids = {pid for ns in sim.namespaces() for pid in _pids(ns)}
        if not pids:
            break
        for sig in (signal.SIGTERM, signal.SIGKILL):
            _signal(pids, sig)
            deadline = time.monotonic() + KILL_GRACE_S
            while (pids := {pid for pid in pids if launch.running(pid)}) and time.monotonic() < deadline:
                time.sleep(0.1)
            if not pids:
                break
    for ns in sim.namespaces():
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        shutil.rmtree(netsim.ETC_NETNS / ns, ignore_errors=True)
    for end in "ab":  # a link made before its namespaces moved it, had a step failed in between
        for node in range(sim.nodes):
            subprocess.run(["ip", "link", "del", f"{sim.prefix}{end}{node}"], capture_output=True)
    shutil.rmtree(sim.temp_dir, ignore_errors=True)


def reap_stale() -> None:
    """Tear down the clusters of runs that no longer live (SIGKILL cannot be caught, so their teardown never ran)."""
    stale: dict[int, set[int]] = {}
    left = netsim.leftovers()
    for name in left["namespaces"] + left["etc_netns"]:
        if match := re.fullmatch(r"dvh(\d+)-(?:n(\d+)|sw)", name):
            stale.setdefault(int(match[1]), set()).add(int(match[2] or 0))
    for pid, nodes in stale.items():
        if not launch.running(pid) or _started_after(pid, Path("/run/netns") / f"dvh{pid}-n0"):
            log.warning("removing the simulated cluster of run %d, which ended without tearing it down", pid)
            temp = [Path(p) for p in Path("/tmp").glob(f"dvh{pid}-*") if Path(p).is_dir()]
            teardown(netsim.Cluster(max(max(nodes) + 1, 3), f"dvh{pid}", temp[0] if temp else Path("/nonexistent")))
            for folder in temp[1:]:
                shutil.rmtree(folder, ignore_errors=True)


def _started_after(pid: int, made: Path) -> bool:
    """Whether process `pid` started after `made` was created: then the pid was reused, and the run that made it
    is gone."""
    try:
        return psutil.Process(pid).create_time() > made.stat().st_mtime + 1
    except (psutil.Error, OSError):
        return False


def _signal(pids: Iterable[int], sig: signal.Signals) -> None:
    for pid in pids:
        with suppress(ProcessLookupError):  # gone already
            os.kill(pid, sig)


def _pids(ns: str) -> list[int]:
    done = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    return [int(p) for p in done.stdout.split()] if done.returncode == 0 else []

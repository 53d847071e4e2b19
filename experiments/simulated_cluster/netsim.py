"""A simulated multi-node Ray cluster on one host: one network namespace per node, a shaped link between them.

    python -m ray_jobs.compare --simulate-nodes 2 --link-rates 20mbit,100mbit,unshaped --model-width 1,4

- Node i is the namespace `<prefix>-n<i>`, its one interface `eth0` at 198.18.0.<i+1> (198.18.0.0/15 is the range
  reserved for network benchmarks). Two nodes share one veth pair; more are joined by a bridge in a namespace of its
  own (`<prefix>-sw`), as a switch would.
- Every node's egress is shaped by a token bucket (`tc qdisc … tbf`) to the link rate; `unshaped` removes it.
  This kernel has no netem: bandwidth can be shaped, latency cannot be added.
- Node 0 runs the Ray head, the others `ray start --address`, each with a private temp folder (so the host's
  `/tmp/ray` and its "current cluster" are left alone) and `GLOO_SOCKET_IFNAME=eth0`: gloo would otherwise bind
  the address the shared hostname resolves to, loopback here. Every node and the driver hold the cluster's token
  (RAY_AUTH_MODE=token, RAY_AUTH_TOKEN), as docs/real-cluster.md's recipe gives a real cluster's nodes the head's.
  The comparison's driver runs inside node 0.
- Each node's hostname resolves to its own address (`/etc/netns/<ns>/hosts`, which `ip netns exec` mounts over
  /etc/hosts), as on a real cluster: Horovod 0.28.1 builds its process-set gloo device from the hostname whatever
  HOROVOD_GLOO_IFACE says, and the host's own /etc/hosts maps it to loopback.
- The cluster's life, its Ray nodes and its teardown: sim_cluster.py.

Needs root and the `ip` and `tc` commands; refuses in one line otherwise, before anything is created.
"""

import json
import logging
import math
import os
import re
import shutil
import secrets
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from contract.config import ConfigError

log = logging.getLogger(__name__)
SUBNET = "198.18.0"
INTERFACE = "eth0"
GCS_PORT = 6379
MAX_NODES = 8
ETC_NETNS = Path("/etc/netns")
UNSHAPED = "unshaped"
UNITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
TBF_LATENCY_MS = 200  # the queue a token bucket keeps before it drops: TCP then backs off, as on a real link


class ClusterError(RuntimeError):
    """The simulated cluster could not be built or started; reported in one line, exit code 1."""


def parse_rates(text: str) -> list[str]:
    """`20mbit,1gbit,unshaped` -> the rates, checked: a number with kbit, mbit or gbit, or `unshaped`."""
    rates = [part.strip().lower() for part in text.split(",") if part.strip()]
    for rate in rates:
        if rate != UNSHAPED and bits_per_s(rate) is None:
            raise ConfigError(f"--link-rates takes rates like 20mbit, 1gbit or {UNSHAPED}, got {rate!r}")
    if not rates or len(set(rates)) != len(rates):
        raise ConfigError(f"--link-rates takes distinct rates like 20mbit,1gbit,{UNSHAPED}, got {text!r}")
    return rates


def bits_per_s(rate: str) -> float | None:
    """The rate in bit/s, None for `unshaped` (or anything else that is not a rate)."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(kbit|mbit|gbit)", rate)
    if not match or not (value := float(match[1]) * UNITS[match[2]]) >= 8_000:  # tbf needs at least 1 kB/s
        return None
    return value


def check_host(nodes: int, who: str = "--simulate-nodes", instead: str = ", or leave --simulate-nodes out") -> None:
    """Refuse, creating nothing, what would fail half-way: too few or too many nodes, no root, no ip or tc. `who`
    names what needs the simulated cluster in the refusal, `instead` the way round root (if any)."""
    if not 2 <= nodes <= MAX_NODES:
        raise ConfigError(f"{who} takes 2 to {MAX_NODES} nodes, got {nodes}")
    if os.geteuid() != 0:
        raise ConfigError(f"{who} needs root (it creates network namespaces and shapes links); rerun as root{instead}")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise ConfigError(f"{who} needs the `{tool}` command, which is not on PATH; install iproute2")
    if not os.access(ray_executable(), os.X_OK):
        raise ConfigError(f"{who} starts Ray nodes with {ray_executable()}, which is missing; install "
                          "ray[default] into this environment (make install)")
    done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if done.returncode:
        raise ConfigError(f"{who}: this kernel or container refuses network namespaces "
                          f"(`ip netns list`: {done.stderr.strip()[:120]})")


@dataclass(frozen=True, slots=True)
class Cluster:
    nodes: int
    prefix: str
    """Names every namespace and link of this cluster, so that teardown finds them all and no others."""
    temp_dir: Path
    """Ray's temp folder for every node of this cluster: sessions and logs, removed at teardown."""
    token: str = field(default_factory=lambda: secrets.token_hex(32))
    """The cluster's Ray token, which every node and the driver hold, as a real cluster's nodes hold the head's."""

    def namespace(self, node: int) -> str:
        return f"{self.prefix}-n{node}"

    @property
    def switch(self) -> str:
        return f"{self.prefix}-sw"

    def ip(self, node: int) -> str:
        return f"{SUBNET}.{node + 1}"

    @property
    def address(self) -> str:
        return f"{self.ip(0)}:{GCS_PORT}"

    def namespaces(self) -> list[str]:
        return [self.namespace(i) for i in range(self.nodes)] + ([self.switch] if self.nodes > 2 else [])


def node_environment(cluster: Cluster) -> dict[str, str]:
    """What every process in a node sees, Ray's daemons and so its workers included."""
    return {**os.environ,
            # Token authentication, as docs/real-cluster.md sets up a real cluster: one token on every node, given
            # in the environment (nothing is written into the user's ~/.ray).
            "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": cluster.token, "RAY_USAGE_STATS_ENABLED": "0",
            # DDP's gloo; Horovod's takes the same interface (horovod_ddp.worker.ray_worker).
            "GLOO_SOCKET_IFNAME": INTERFACE,
            "RAY_ADDRESS": cluster.address, "PYTHONUNBUFFERED": "1"}


def ray_executable() -> str:
    """The `ray` command of this interpreter's environment: every simulated node runs the same installation."""
    return str(Path(sys.executable).parent / "ray")


def in_node(cluster: Cluster, node: int, command: list[str]) -> list[str]:
    return ["ip", "netns", "exec", cluster.namespace(node), *command]


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode:
        raise ClusterError(f"`ip {' '.join(args)}` failed: {done.stderr.strip()[:200]}")


def build_links(sim: Cluster) -> None:
    for ns in sim.namespaces():
        _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
    for node in range(sim.nodes):
        etc = ETC_NETNS / sim.namespace(node)
        etc.mkdir(parents=True)
        (etc / "hosts").write_text(f"127.0.0.1\tlocalhost\n{sim.ip(node)}\t{socket.gethostname()}\n")
    # Interface names are created in this namespace first: the prefix keeps them apart from anyone else's.
    if sim.nodes == 2:
        _ip("link", "add", f"{sim.prefix}a0", "netns", sim.namespace(0), "type", "veth",
            "peer", "name", f"{sim.prefix}a1", "netns", sim.namespace(1))
    else:
        _ip("-n", sim.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", sim.switch, "link", "set", "br0", "up")
        for node in range(sim.nodes):
            _ip("link", "add", f"{sim.prefix}a{node}", "netns", sim.namespace(node), "type", "veth",
                "peer", "name", f"{sim.prefix}b{node}", "netns", sim.switch)
            _ip("-n", sim.switch, "link", "set", f"{sim.prefix}b{node}", "master", "br0", "up")
    for node in range(sim.nodes):
        _ip("-n", sim.namespace(node), "link", "set", f"{sim.prefix}a{node}", "name", INTERFACE)
        _ip("-n", sim.namespace(node), "addr", "add", f"{sim.ip(node)}/24", "dev", INTERFACE)
        _ip("-n", sim.namespace(node), "link", "set", INTERFACE, "up")


def burst_bytes(bits: float) -> int:
    """The token bucket's size at `bits`/s: 10 ms of the rate, and at least a few full frames, so that bursts of
    segments pass. A bucket refilled while a rank computes lets that many bytes of the next allreduce through at
    the veth's own speed, which a real link does not."""
    return max(int(bits / 8 / 100), 16 * 1514)


def shape(sim: Cluster, rate: str) -> None:
    """Every node's egress at `rate` (a token bucket), or unshaped."""
    bits = bits_per_s(rate)
    for node in range(sim.nodes):
        ns = sim.namespace(node)
        if bits is None:
            subprocess.run(["tc", "-n", ns, "qdisc", "del", "dev", INTERFACE, "root"], capture_output=True)
            continue
        burst = burst_bytes(bits)
        done = subprocess.run(["tc", "-n", ns, "qdisc", "replace", "dev", INTERFACE, "root", "tbf", "rate",
                               f"{int(bits)}bit", "burst", str(burst), "latency", f"{TBF_LATENCY_MS}ms"],
                              capture_output=True, text=True)
        if done.returncode:
            raise ClusterError(f"tc could not shape {ns} to {rate}: {done.stderr.strip()[:200]}")


def counters(sim: Cluster, node: int = 0) -> dict[str, int]:
    """Bytes node `node` has sent and received on its link, from the kernel's interface counters."""
    done = subprocess.run(["ip", "-n", sim.namespace(node), "-j", "-s", "link", "show", INTERFACE],
                          capture_output=True, text=True, check=True)
    stats = json.loads(done.stdout)[0]["stats64"]
    return {"tx_bytes": stats["tx"]["bytes"], "rx_bytes": stats["rx"]["bytes"]}


def leftovers(prefix: str = "dvh") -> dict[str, list[str]]:
    """Namespaces and links this module names (`prefix`), still present: what a teardown must leave empty."""
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n")
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout.splitlines()
    return {"namespaces": sorted(line.split()[0] for line in spaces if line.startswith(prefix)),
            "etc_netns": sorted(p.name for p in ETC_NETNS.glob(f"{prefix}*")),
            "links": sorted(line.split(":")[1].strip().split("@")[0] for line in links
                            if line.split(":")[1].strip().startswith(prefix))}


def check_workers(workers: list[int], nodes: int) -> None:
    """One worker count, a multiple of the nodes: each node then offers Ray exactly its share of CPUs
    (cpus_per_node), so the workers fill every node evenly and every run crosses the link. A second, smaller count
    would fit on fewer nodes, and Ray packs a worker group where it fits."""
    if len(workers) != 1 or workers[0] % nodes:
        raise ConfigError(f"--simulate-nodes {nodes} takes one worker count, a multiple of {nodes} (one or more "
                          f"workers on every node), got --workers {','.join(map(str, workers))}")


def cpus_per_node(workers: int, nodes: int) -> int:
    """CPUs each node offers Ray: its share of the workers, so that they spread evenly over the nodes."""
    return max(1, math.ceil(workers / nodes))

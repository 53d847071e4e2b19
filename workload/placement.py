"""Where each rank ran, and what it sent over its network link: facts every results.json records.

`placement`: one entry per rank, `node_id`, `node_ip`, `rank`, `local_rank`, `cores` (the cores it may run on,
workload/cores.py) and `host` (the machine's boot id, which the simulated cluster's nodes share). On Ray the node is
Ray's node; under torchrun and horovodrun, which start every rank on one host here, it is the host.
"""

import os
import socket
import sys
from pathlib import Path

import torch

from workload import cores
from workload.distributed import DistContext

FIELD_BYTES = 96  # a Ray node id is 56 hex digits, an IPv4 address at most 15 characters
FIELDS = ("node_id", "node_ip", "cores", "host")


def node() -> tuple[str, str]:
    """This process's (node id, node IP): Ray's when it runs in a Ray worker, the host's otherwise."""
    ray = sys.modules.get("ray")  # a Ray worker has it imported; anything else need not pay for importing it
    if ray is not None and ray.is_initialized():
        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()
    host = socket.gethostname()
    try:
        address = socket.gethostbyname(host)
    except OSError:
        address = "127.0.0.1"
    return host, address


def gather(ctx: DistContext) -> list[dict[str, object]]:
    """Every rank's node, gathered onto every rank (one collective), ordered by rank."""
    row = torch.zeros(len(FIELDS) * FIELD_BYTES + 1, dtype=torch.int64)
    for i, text in enumerate((*node(), cores.current(), cores.host())):
        raw = text.encode()[:FIELD_BYTES]
        row[i * FIELD_BYTES : i * FIELD_BYTES + len(raw)] = torch.tensor(list(raw), dtype=torch.int64)
    row[-1] = ctx.local_rank
    return [{"rank": rank, "local_rank": int(r[-1]),
             **{name: _text(r[i * FIELD_BYTES : (i + 1) * FIELD_BYTES]) for i, name in enumerate(FIELDS)}}
            for rank, r in enumerate(ctx.gather_rows(row).tolist())]


def _text(codes: list[int]) -> str:
    return bytes(c for c in codes if c).decode(errors="replace")


def link_interface() -> str | None:
    """The interface gloo was told to use (GLOO_SOCKET_IFNAME, set on simulated and many real clusters), if any."""
    names = os.environ.get("GLOO_SOCKET_IFNAME", "").split(",")
    return names[0].strip() or None


def sent_bytes(interface: str | None) -> int:
    """Bytes this process's network namespace has sent on `interface`, from the kernel's counters; -1 if unknown."""
    if not interface:
        return -1
    try:
        lines = Path("/proc/self/net/dev").read_text().splitlines()[2:]
    except OSError:
        return -1
    for line in lines:
        name, _, numbers = line.partition(":")
        if name.strip() == interface:
            return int(numbers.split()[8])  # receive has 8 columns, then transmit bytes
    return -1


class LinkCounter:
    """The bytes this rank's node sends on its link while the counter runs (a training epoch): what results.json
    records as an epoch's `link`. It counts nothing in one process, or where no link is named (GLOO_SOCKET_IFNAME
    unset: the usual single-host run over loopback)."""

    def __init__(self, world_size: int) -> None:
        self.interface = link_interface() if world_size > 1 else None  # one process: no link
        self.at_start = sent_bytes(self.interface)
        self.sent = -1

    def stop(self) -> None:
        self.sent = sent_bytes(self.interface) - self.at_start if self.at_start >= 0 else -1

    def record(self, ctx: DistContext) -> dict[str, object]:
        """Every rank's count, as each rank read its interface's counter (ranks on one node read the same counter:
        experiments/simulated_cluster/regime.py counts each node once); nothing when a rank could not read it."""
        # Every rank takes part whether or not it knows its link, so that no rank waits on another's collective.
        sent = ctx.gather_rows(torch.tensor([self.sent], dtype=torch.float64)).flatten().tolist()
        if not self.interface or min(sent) < 0:
            return {}
        return {"link": {"interface": self.interface, "sent_bytes_per_rank": [int(b) for b in sent]}}


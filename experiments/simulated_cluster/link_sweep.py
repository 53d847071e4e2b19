"""One comparison per link rate on a simulated multi-node cluster (netsim.py), then the regime report.

`compare --simulate-nodes N --link-rates a,b,…` lands here: the cluster is built once, and for each rate the links
are reshaped and the comparison's driver runs inside node 0 as `python -m ray_jobs.compare` with the user's other
flags (a `--model-width` list makes each rate a grid). Results go to <output-dir>/<sweep-id>/<rate>/, with
network.json (the rates, and the bytes node 0's interface counted in each) and the regime report beside them.
"""

import logging
import subprocess
import sys
from pathlib import Path

from experiments.simulated_cluster import netsim, regime, sim_cluster
from runtime import run_folder, space

log = logging.getLogger(__name__)
OWN_FLAGS = ("--simulate-nodes", "--link-rates", "--output-dir", "--reuse-references")
"""The flags of the outer command that the driver inside node 0 does not get (it gets its own --output-dir)."""


def inner_args(argv: list[str]) -> list[str]:
    """`argv` without this sweep's own flags, in either `--flag value` or `--flag=value` form."""
    out, given = [], iter(argv)
    for arg in given:
        if arg in OWN_FLAGS:
            next(given, None)  # its value
        elif not arg.startswith(tuple(f"{flag}=" for flag in OWN_FLAGS)):
            out.append(arg)
    return out


def run(argv: list[str], nodes: int, rates: list[str], root: Path, workers: list[int]) -> tuple[Path, int]:
    """Every rate's comparison, and the regime report; returns the sweep's folder and 1 if any rate failed."""
    records, code = [], 0
    with sim_cluster.cluster(nodes, netsim.cpus_per_node(max(workers), nodes)) as sim:
        sweep_dir = run_folder.new_folder(root)
        for i, rate in enumerate(rates, 1):
            netsim.shape(sim, rate)
            network = {"nodes": nodes, "link_rate": rate, "link_bits_per_s": netsim.bits_per_s(rate)}
            log.info("link rate %d/%d: %s between %d simulated nodes", i, len(rates), rate, nodes)
            before = netsim.counters(sim)
            # The single-process references cross no link: every rate after the first takes the first rate's.
            reuse = ["--reuse-references", str(sweep_dir / rates[0])] if i > 1 else []
            command = netsim.in_node(sim, 0, [sys.executable, "-m", "ray_jobs.compare", *inner_args(argv),
                                              "--output-dir", str(sweep_dir), "--run-id", rate,
                                              "--network", regime.dumps(network), *reuse])
            done = subprocess.run(command, env=netsim.node_environment(sim), stdin=subprocess.DEVNULL)
            after = netsim.counters(sim)
            code = code or (1 if done.returncode else 0)  # a driver killed by a signal has a negative code
            records.append({**network, "folder": rate, "exit_code": done.returncode,
                            "node0_link_bytes": {k: after[k] - before[k] for k in after}})
    space.write_json(sweep_dir / regime.NETWORK, {"schema_version": regime.SCHEMA_VERSION,
                                                     "sweep_id": sweep_dir.name, "nodes": nodes, "rates": records})
    return sweep_dir, code



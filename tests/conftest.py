"""Shared fixtures: synthetic data made once per session, and one real local Ray cluster for every Ray test."""

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest

from cluster import own_ray
from tests.helpers import BIN, TEST_SIZE, TRAIN_SIZE, free_port, stop_ray
from contract.config import TrainConfig
from workload import data

SCRATCH = Path(tempfile.mkdtemp(prefix="ddp-vs-horovod-tests-"))
"""The suite's own temporary folder, removed at its end: what launchers and libraries leave in the machine's temporary
folder (torchrun's torchelastic_*, multiprocessing's pymp-*, where Ray records a cluster `ray start` began) lands here,
so a test reads only what the suite made, never a user's torchrun or Ray beside it (docs/install.md)."""
os.environ["TMPDIR"] = os.environ["RAY_TMPDIR"] = str(SCRATCH)
os.environ.pop("RAY_ADDRESS", None)  # a test that joins a cluster names it; none joins the user's by default
tempfile.tempdir = None

# Ray Train's controller polls its workers every 2 s, so each Ray Train run ends ~2 s after its training; polling
# at 0.5 s costs throughput (docs/measuring.md: What Ray costs), which no test measures. Every driver here inherits it.
os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")



IDLE: list[tuple[float, float, str]] = []
"""(idle core-seconds, wall seconds, test) per test: where the suite waits rather than computes (docs/install.md).
Read from /proc/stat, host-wide, so it is meaningful only while nothing else runs, as CI runs it."""


def _cpu_times() -> tuple[int, int] | None:
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    return sum(fields), fields[3] + fields[4]  # all, idle + iowait (clock ticks, summed over cores)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    before, started = _cpu_times(), time.monotonic()
    yield
    after = _cpu_times()
    if before and after and after[0] > before[0]:
        idle_share = (after[1] - before[1]) / (after[0] - before[0])
        wall = time.monotonic() - started
        IDLE.append((idle_share * wall * (os.cpu_count() or 1), wall, item.nodeid))


def pytest_unconfigure(config):
    shutil.rmtree(SCRATCH, ignore_errors=True)


def pytest_terminal_summary(terminalreporter):
    if len(IDLE) < 2:
        return
    total_idle, total_wall = sum(i for i, _, _ in IDLE), sum(w for _, w, _ in IDLE)
    cores = os.cpu_count() or 1
    share = total_idle / (cores * total_wall)
    terminalreporter.write_sep("=", f"most idle 15 (idle core-seconds; {share:.0%} of {cores} cores idle over the "
                                    f"{total_wall:.0f} s of tests)")
    for idle, wall, nodeid in sorted(IDLE, reverse=True)[:15]:
        terminalreporter.write_line(f"{idle:7.1f} idle of {wall:6.1f} s  {nodeid}")


@pytest.fixture(scope="session")
def base_cfg(tmp_path_factory) -> TrainConfig:
    """A resolved synthetic-data config, its files written once for the whole session."""
    data_dir = tmp_path_factory.mktemp("data")
    cfg = TrainConfig(dataset="synthetic", data_dir=str(data_dir), synthetic_train_size=TRAIN_SIZE,
                      synthetic_test_size=TEST_SIZE, log_every=10)
    return data.resolve(cfg)


@pytest.fixture
def cfg(base_cfg, tmp_path) -> TrainConfig:
    return replace(base_cfg, output_dir=str(tmp_path / "out"))


class RayCluster:
    def __init__(self, address: str, dashboard: str, session: int = 0) -> None:
        self.address, self.dashboard, self.session = address, dashboard, session
        """`session`: the session id every process of the cluster runs in (cluster/own_ray.py)."""


@pytest.fixture(scope="session")
def ray_cluster():
    """A real `ray start --head` on 127.0.0.1 with free ports (4 logical CPUs, like Ray's ray_start_4_cpus), started
    as a command starts a Ray of its own (cluster/own_ray.py), without authentication; this process joins it as a
    driver, and `ray job submit` tests submit to it. Stopped even when tests fail."""
    import ray

    # A throwaway loopback cluster: no token to share between `ray start`, this driver and `ray job submit`.
    os.environ["RAY_AUTH_MODE"] = "disabled"
    cluster = own_ray.OwnRay(env={"RAY_USAGE_STATS_ENABLED": "0"}, flags=("--num-cpus=4", "--num-gpus=0"),
                             prefix="ray-test-")
    try:
        cluster.wait_started()
        ray.init(address=cluster.address, log_to_driver=True)
        yield RayCluster(cluster.address, cluster.dashboard, cluster.session.pid)
    finally:
        ray.shutdown()
        cluster.stop()




@pytest.fixture(scope="session")
def users_ray(tmp_path_factory):
    """A user's own Ray beside the suite, as docs/running.md starts one by hand: a loopback `ray start --head` with
    token authentication on (its token in a file of its own, not ~/.ray), in a temp dir of its own and recorded where
    its user's commands look, not where the suite's do; and a torchrun's leftover torchelastic_* folder in the machine's
    temporary folder. The tests that join it say so; the others pass beside it. (address, token file)"""
    import uuid

    root = tmp_path_factory.mktemp("users-ray")
    ray_dir, leftover = (Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp")) for prefix in ("ray-user-", "torchelastic_"))
    token = root / "token"
    token.write_text(uuid.uuid4().hex * 2)
    port = free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token), "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_TMPDIR": str(root), "TMPDIR": str(root)}
    try:
        subprocess.run([str(BIN / "ray"), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
                        "--num-cpus=1", "--include-dashboard=false", f"--temp-dir={ray_dir}"],
                       check=True, env=env, capture_output=True, text=True, timeout=180)
        yield f"127.0.0.1:{port}", token
    finally:
        stop_ray(ray_dir)
        for folder in (ray_dir, leftover):
            shutil.rmtree(folder, ignore_errors=True)

"""Shared fixtures: synthetic data made once per session, and one real local Ray cluster for every Ray test."""

import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from cluster import own_ray
from tests.helpers import TEST_SIZE, TRAIN_SIZE
from contract.config import TrainConfig
from workload import data

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



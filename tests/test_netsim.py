"""Beyond one host: a simulated 2-node Ray cluster in network namespaces, a shaped link, placement on record, and
a teardown that leaves nothing, however the run ends."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contract import models
from contract.config import ConfigError
from experiments.simulated_cluster import link_sweep, netsim, regime, sim_cluster
from ray_jobs import orchestrator
from tests.helpers import REPO, assert_one_line_error, data_flags, run_module

RATES = "20mbit,unshaped"
WIDTH = 2


def _ray_processes(marker: str) -> list[str]:
    """Command lines of live processes that mention `marker` (a simulated cluster's temp folder)."""
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                line = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in line and int(proc.name) != os.getpid():
                out.append(line[:200])
    return out


def _nothing_left() -> dict[str, list[str]]:
    left = netsim.leftovers()
    left["processes"] = _ray_processes("/tmp/dvh")
    return {k: v for k, v in left.items() if v}


# Unit tests: no namespace is created.

def test_link_rates_are_parsed_and_refused_in_one_line():
    assert netsim.parse_rates("20mbit, 1gbit,unshaped") == ["20mbit", "1gbit", "unshaped"]
    assert netsim.bits_per_s("20mbit") == 20e6 and netsim.bits_per_s("1.5gbit") == 1.5e9
    assert netsim.bits_per_s(netsim.UNSHAPED) is None
    for bad in ("20mbps", "fast", "20mbit,20mbit", "1kbit", ""):
        with pytest.raises(ConfigError, match="--link-rates"):
            netsim.parse_rates(bad)


def test_the_driver_in_node_0_gets_every_flag_but_the_sweep_s_own():
    argv = ["--simulate-nodes", "2", "--link-rates=20mbit", "--workers", "2", "--output-dir", "out",
            "--model-width", "1,4"]
    assert link_sweep.inner_args(argv) == ["--workers", "2", "--model-width", "1,4"]


def test_without_root_it_refuses_before_creating_anything(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ConfigError, match="needs root"):
        netsim.check_host(2)


def test_without_tc_it_refuses_naming_the_package(monkeypatch):
    real = netsim.shutil.which
    monkeypatch.setattr(netsim.shutil, "which", lambda tool: None if tool == "tc" else real(tool))
    with pytest.raises(ConfigError, match="`tc`.*iproute2"):
        netsim.check_host(2)


def test_model_width_multiplies_channels_and_the_gradient_grows_towards_width_squared():
    one, two, four = (models.parameters("convnet", width=w) for w in (1, 2, 4))
    assert one == 29_034  # exactly the tutorial network
    assert models.gradient_bytes("convnet", width=1) == 4 * one
    # conv2 grows as width², conv1, BatchNorm and the classifier as width: 2.9x at width 2, 9.3x at width 4.
    assert 2.5 < two / one < 4
    assert 8 < four / one < 16


@pytest.mark.cluster
def test_a_link_failing_half_way_through_the_build_leaves_nothing(monkeypatch):
    calls = {"n": 0}
    real = netsim._ip

    def failing(*args):
        calls["n"] += 1
        if calls["n"] == 6:  # after the namespaces, during the links
            raise RuntimeError("injected: the sixth `ip` command failed")
        real(*args)

    monkeypatch.setattr(netsim, "_ip", failing)
    with pytest.raises(RuntimeError, match="injected"):
        with sim_cluster.cluster(2, 1):
            pass
    assert not _nothing_left()


def test_a_ray_that_will_not_start_is_one_error_and_leaves_nothing(monkeypatch):
    monkeypatch.setattr(netsim, "ray_executable", lambda: "/bin/false")  # `false start --head …` exits 1
    with pytest.raises(netsim.ClusterError, match="`ray start` on simulated node 0 failed"):
        with sim_cluster.cluster(2, 1):
            pass
    assert not _nothing_left()


def test_without_ray_in_the_environment_it_refuses_naming_the_fix(monkeypatch, tmp_path):
    monkeypatch.setattr(netsim, "ray_executable", lambda: str(tmp_path / "ray"))
    with pytest.raises(ConfigError, match="install ray"):
        netsim.check_host(2)


def test_a_reused_pid_does_not_keep_a_dead_run_s_cluster_alive(tmp_path):
    made = tmp_path / "namespace"
    made.touch()
    os.utime(made, (time.time() - 60, time.time() - 60))  # the namespace of a run that started a minute ago
    later = subprocess.Popen(["sleep", "30"])  # a process that took the dead run's pid since
    try:
        assert sim_cluster._started_after(later.pid, made)
        assert not sim_cluster._started_after(os.getpid(), tmp_path)  # this process is older than tmp_path
    finally:
        later.kill()
        later.wait()


def test_a_later_rate_reuses_only_the_references_that_finished_and_copies_them_whole(tmp_path):
    first, later = tmp_path / "sweep" / "20mbit" / "width-1", tmp_path / "sweep" / "unshaped" / "width-1"
    assert orchestrator.finished_references(first) == {}  # the first rate wrote nothing: the later one runs its own
    (first / "reference-2w").mkdir(parents=True)
    (first / "reference-2w" / "results.json").write_text("{}")
    runs = [{"arm": "reference", "launcher": "local", "workers": 2, "status": "ok",
             "results": "reference-2w/results.json"},
            {"arm": "global-batch", "launcher": "local", "workers": 2, "status": "failed"},
            {"arm": "native", "launcher": "ray", "workers": 2, "status": "ok", "results": "native-2w-r0/results.json"}]
    (first / "comparison.json").write_text(json.dumps({"runs": runs}))
    found = orchestrator.finished_references(first)
    assert list(found) == [("reference", 2)]
    later.mkdir(parents=True)
    record = orchestrator.reuse(found[("reference", 2)], first, later, "[1/5]")
    assert record == {**runs[0], "reused_from": "../../20mbit/width-1/reference-2w"}
    assert (later / "reference-2w" / "results.json").read_text() == "{}"


@pytest.mark.cluster
def test_a_three_node_cluster_is_bridged_and_every_node_reaches_every_other_and_a_node_can_be_lost():
    with sim_cluster.cluster(3, 1, start_ray=False) as sim:  # the links alone
        netsim.shape(sim, "50mbit")
        for a, b in ((0, 1), (1, 2), (2, 0)):
            probe = ("import socket; s = socket.socket(); s.settimeout(3); "
                     f"print(s.connect_ex(('{sim.ip(b)}', 9)))")  # refused (111) means the node answered
            done = subprocess.run(netsim.in_node(sim, a, [sys.executable, "-c", probe]), capture_output=True,
                                  text=True, timeout=30)
            assert done.stdout.strip() == "111", (a, b, done.stdout, done.stderr)
        lost = subprocess.Popen(netsim.in_node(sim, 1, ["sleep", "600"]))  # `ip netns exec` becomes the sleep
        deadline = time.monotonic() + 10
        while lost.pid not in sim_cluster._pids(sim.namespace(1)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sim_cluster.kill_node(sim, 1) == 1 and lost.wait(timeout=10) == -signal.SIGKILL
    assert not _nothing_left()


# The simulated cluster itself.

@pytest.fixture(scope="module")
def sweep(base_cfg, tmp_path_factory):
    """One sweep: 2 nodes, 20 Mbit/s and unshaped, both backends once, 15 steps, at width 2 alone: the bytes on the
    link then show that the width reached the ranks (2.9x width 1's gradient), at half the runs of two widths."""
    assert not _nothing_left(), "a simulated cluster from elsewhere is still up"
    out = tmp_path_factory.mktemp("sweep")
    cfg = base_cfg
    result = run_module("ray_jobs.compare", "--simulate-nodes", "2", "--link-rates", RATES, "--model-width", str(WIDTH),
                        "--workers", "2", "--repeats", "1", "--no-ceiling", "--epochs", "1", "--max-steps-per-epoch",
                        "15", *data_flags(cfg),
                        "--output-dir", str(out), timeout=1500)
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    (sweep_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return sweep_dir, result


def _runs(sweep_dir: Path, rate: str) -> dict[str, dict]:
    folder = sweep_dir / rate  # one width: one comparison per rate, no grid below it
    comparison = json.loads((folder / "comparison.json").read_text())
    return {r["arm"]: json.loads((folder / r["results"]).read_text()) for r in comparison["runs"]}


@pytest.mark.cluster
def test_both_backends_put_one_rank_on_each_node(sweep):
    sweep_dir, _ = sweep
    for rate in RATES.split(","):
        runs = _runs(sweep_dir, rate)
        for backend in ("native", "horovod"):
            placement = runs[backend]["placement"]
            assert [p["rank"] for p in placement] == [0, 1]
            assert len({p["node_id"] for p in placement}) == 2, placement
            assert {p["node_ip"] for p in placement} == {"198.18.0.1", "198.18.0.2"}
            assert [p["local_rank"] for p in placement] == [0, 0]
            assert runs[backend]["network"] == {"nodes": 2, "link_rate": rate,
                                                "link_bits_per_s": netsim.bits_per_s(rate)}


@pytest.mark.cluster
def test_the_references_run_at_the_first_rate_alone_and_every_rate_s_parity_reads_them(sweep):
    sweep_dir, _ = sweep
    first, later = RATES.split(",")
    local = {rate: [r for r in json.loads((sweep_dir / rate / "comparison.json").read_text())["runs"]
                    if r["launcher"] == "local"] for rate in (first, later)}
    assert [r["arm"] for r in local[first]] == [r["arm"] for r in local[later]] == ["reference", "global-batch"]
    for ran, reused in zip(local[first], local[later]):
        assert "reused_from" not in ran and reused["reused_from"] == f"../{first}/{Path(ran['results']).parent}"
        assert {k: v for k, v in reused.items() if k != "reused_from"} == ran
        # Copied whole: the later rate's folder renders from its own files, as every comparison's does.
        assert (sweep_dir / later / reused["results"]).read_bytes() == (sweep_dir / first / ran["results"]).read_bytes()
    # The later rate's parity compares its backends with the reused references, as the first rate's does.
    parity = json.loads((sweep_dir / later / "comparison.json").read_text())["parity"]["2"]
    pairs = parity["max_abs_step_loss_difference"]
    assert pairs["native vs reference"] is not None and pairs["horovod vs reference"] is not None, pairs


@pytest.mark.cluster
def test_the_gradients_cross_the_shaped_veth(sweep):
    sweep_dir, _ = sweep
    network = json.loads((sweep_dir / regime.NETWORK).read_text())
    for record in network["rates"]:
        # The kernel's counters on node 0's end of the link, before and after the rate's comparison.
        assert record["node0_link_bytes"]["tx_bytes"] > 1e6 and record["node0_link_bytes"]["rx_bytes"] > 1e6
    gradient = models.gradient_bytes("convnet", width=WIDTH)  # 2.9x width 1's: see ConvNet
    for rate in RATES.split(","):
        for backend in ("native", "horovod"):
            epoch = _runs(sweep_dir, rate)[backend]["epochs"][-1]
            # A ring allreduce of 2 ranks sends each rank's whole gradient once per step (half, then half), plus
            # framing: the width's gradient, not width 1's.
            per_step = [sent / epoch["steps"] for sent in epoch["link"]["sent_bytes_per_rank"]]
            assert min(per_step) >= 0.9 * gradient, (rate, backend, epoch["link"])
    shaped = _runs(sweep_dir, "20mbit")
    for backend in ("native", "horovod"):
        # Each node's egress is capped at 20 Mbit/s: no rank can send faster.
        run = shaped[backend]
        assert regime.sent_per_node(run, run["epochs"][-1]) * 8 < 20e6 * 1.05


@pytest.mark.cluster
def test_every_cell_reports_its_comm_share_in_the_regime_table(sweep):
    """How much a slow link raises the comm share is a measurement, printed in the regime report, not asserted:
    one run per cell on 2 shared cores cannot carry it (a +0.05 assertion here failed on a fresh machine)."""
    sweep_dir, _ = sweep
    report = (sweep_dir / "report.md").read_text()
    for rate in RATES.split(","):
        runs = _runs(sweep_dir, rate)
        for backend in ("native", "horovod"):
            share = runs[backend]["epochs"][-1]["comm_share"]
            assert 0 <= share <= 1, (rate, backend, share)
            row = next(line for line in report.splitlines() if line.startswith(f"| {rate} | {WIDTH} | {backend} |"))
            assert f"| {100 * share:.0f} % |" in row, (row, share)


@pytest.mark.cluster
def test_the_regime_report_and_network_png_are_written(sweep):
    sweep_dir, result = sweep
    report = (sweep_dir / "report.md").read_text()
    for needle in ("| 20mbit | 2 | native |", "| unshaped | 2 | horovod |", "bytes per allreduce", "334,632",
                   "Where the winner changes", "width 2: 20mbit:", "sent on the link"):
        assert needle in report, needle
    assert (sweep_dir / "network.png").stat().st_size > 10_000
    assert (sweep_dir / "verdicts.png").read_bytes().startswith(b"\x89PNG") and "`verdicts.png`" in report
    rate_report = (sweep_dir / "20mbit" / "report.md").read_text()
    assert "## Where the ranks ran" in rate_report and "198.18.0.2" in rate_report
    assert "Traceback" not in result.stderr


@pytest.mark.cluster
def test_the_sweep_tears_everything_down(sweep):
    assert not _nothing_left()


@pytest.mark.cluster
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_sweep_leaves_no_namespace_link_or_ray_process(base_cfg, tmp_path, sig):
    assert not _nothing_left()
    log = (tmp_path / "output.log").open("w")  # a pipe nobody reads would fill and stop the run
    proc = subprocess.Popen(
        [sys.executable, "-m", "ray_jobs.compare", "--simulate-nodes", "2", "--link-rates", "20mbit", "--repeats", "1",
         "--no-ceiling", "--epochs", "1", *data_flags(base_cfg), "--output-dir", str(tmp_path / "out")],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 240
    try:
        # Interrupted once both Ray nodes are up and the driver in node 0 has started.
        while not _ray_processes("--run-id 20mbit") and time.monotonic() < deadline:
            time.sleep(0.5)
        assert time.monotonic() < deadline, "the driver in node 0 never started"
        assert netsim.leftovers()["namespaces"], "nothing to tear down yet"
        proc.send_signal(sig)
        proc.wait(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == (143 if sig == signal.SIGTERM else 130), (tmp_path / "output.log").read_text()[-3000:]
    assert "torn down" in (tmp_path / "output.log").read_text()
    assert not _nothing_left()


@pytest.mark.cluster
def test_a_cluster_left_by_a_killed_run_is_reaped_by_the_next(monkeypatch):
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid that no longer runs, as a SIGKILLed sweep's
    monkeypatch.setattr(os, "getpid", lambda: dead.pid)
    cm = sim_cluster.cluster(2, 1, start_ray=False)  # the links alone
    cm.__enter__()  # built, then abandoned without teardown, as by SIGKILL
    assert netsim.leftovers()["namespaces"]
    monkeypatch.undo()
    with sim_cluster.cluster(2, 1, start_ray=False):
        assert netsim.leftovers()["namespaces"] == [f"dvh{os.getpid()}-n0", f"dvh{os.getpid()}-n1"]
    assert not _nothing_left()


def test_simulate_nodes_with_torchrun_is_one_line(base_cfg, tmp_path):
    result = run_module("ray_jobs.compare", "--simulate-nodes", "2", "--launchers", "ray,torchrun",
                        *data_flags(base_cfg), "--output-dir", str(tmp_path / "out"))
    assert_one_line_error(result, "--launchers ray")
    assert not (tmp_path / "out").exists() and not netsim.leftovers()["namespaces"]


def test_link_rates_without_simulated_nodes_is_one_line(base_cfg, tmp_path):
    result = run_module("ray_jobs.compare", "--link-rates", "20mbit", *data_flags(base_cfg),
                        "--output-dir", str(tmp_path / "out"))
    assert_one_line_error(result, "--simulate-nodes")
    assert not (tmp_path / "out").exists()

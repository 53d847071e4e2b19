"""The communication model and `experiments.predict` (experiments/comm_model.py, experiments/prediction.py): fitted
to sweeps written here from known constants, so every figure it must recover is known. No process trains, no cluster starts."""

import dataclasses
import json
import math
import re

import numpy as np
import pytest

from contract.config import BACKENDS, ConfigError
from experiments import comm_model, netsim, prediction
from experiments.comm_model import Constants, Gradient
from ray_jobs import compare
from tests.helpers import run_module
from workload import model

TRUE = {"native": Constants(alpha_s=0.004, link_efficiency=0.8, host_s_per_byte=2e-8, overlap=0.0),
        "horovod": Constants(alpha_s=0.009, link_efficiency=0.9, host_s_per_byte=1e-8, overlap=0.0)}
# Not in proportion to the widths' messages and bytes: a compute that grew as they do would let the fit trade the
# overlap against α and h (tests/test_comm_model.py fits exactly only what the runs can tell apart).
COMPUTE = {1: 0.3, 2: 0.1, 4: 0.2}
BATCH = 100


def gradient(width: int, bucket_mb: float = 0.0) -> Gradient:
    buckets, buffers = model.ddp_buckets(width, bucket_mb)
    return Gradient(f"width {width}", buckets, buffers)


def _step(backend: str, width: int, nodes: int, bits: float | None) -> tuple[float, float]:
    """The step time and the waited share the model says, for sweeps made of known constants (on simulated links,
    token bucket included, as experiments.predict reads them)."""
    x = comm_model.features(backend, gradient(width), 0.0, nodes, bits, netsim.burst_bytes(bits) if bits else 0)
    waited = comm_model.waited(TRUE[backend], x, COMPUTE[width])
    return COMPUTE[width] + waited, waited / (COMPUTE[width] + waited)


def _sweep(root, nodes: int, rates: dict[str, float | None], widths: list[int], repeats: int = 2):
    """A sweep folder as compare --simulate-nodes writes it, each run's figures from the true constants."""
    root.mkdir(parents=True)
    records = []
    for rate, bits in rates.items():
        (folder := root / rate).mkdir()
        records.append({"nodes": nodes, "link_rate": rate, "link_bits_per_s": bits, "folder": rate, "exit_code": 0,
                        "node0_link_bytes": {"tx_bytes": 0, "rx_bytes": 0}})
        grid = {"settings": []}
        for width in widths:
            runs = []
            for backend in BACKENDS:
                step, share = _step(backend, width, nodes, bits)
                for r in range(repeats):
                    runs.append({"arm": backend, "workers": nodes, "status": "ok", "round": r, "launcher": "ray",
                                 "steady_samples_per_s": BATCH * nodes / step,
                                 "epochs": [{"comm_share": share, "epoch_time_s": 1.0}],
                                 "placement": [{"rank": i, "node_id": f"n{i}"} for i in range(nodes)]})
            comparison = {"schema_version": 2, "run_id": f"w{width}", "environment": {}, "wall_time_s": 1.0,
                          "runs": runs, "parity": {}, "not_applicable": {}, "speed": {},
                          "settings": {"workers": [nodes], "repeats": repeats,
                                       "config": {"model_width": width, "batch_size": BATCH, "bucket_mb": 0.0,
                                                  "compression": "none", "grad_accumulation": 1}}}
            (folder / f"w{width}").mkdir()
            (folder / f"w{width}" / "comparison.json").write_text(json.dumps(comparison))
            grid["settings"].append({"model_width": width, "folder": f"w{width}"})
        (folder / "grid.json").write_text(json.dumps(grid))
    (root / "network.json").write_text(json.dumps({"schema_version": 1, "sweep_id": root.name, "nodes": nodes,
                                                   "rates": records}))
    return root


RATES_2 = {"10mbit": 10e6, "20mbit": 20e6, "50mbit": 50e6, "200mbit": 200e6, "unshaped": None}


def test_ddp_buckets_are_cut_as_ddp_cuts_them():
    # Width 1 and 2 fit in DDP's first bucket (1 MiB); from width 4 the first bucket closes past 1 MiB.
    assert len(model.ddp_buckets(1)[0]) == 1 and sum(model.ddp_buckets(1)[0]) == model.size(1)["gradient_bytes"]
    assert len(model.ddp_buckets(4)[0]) == 2 and sum(model.ddp_buckets(4)[0]) == model.size(4)["gradient_bytes"]
    assert len(model.ddp_buckets(4, bucket_mb=0.01)[0]) > 2
    assert model.ddp_buckets(1)[1] == 4 * (2 * 16 + 2 * 32) + 8 * 2  # running mean and var, and two int64 counters


def test_a_gradient_given_in_mb_is_bucketed_and_fused_as_the_frameworks_default():
    resnet = comm_model.gradient_of_mb(100)
    assert resnet.bytes == 100_000_000 and resnet.buckets[0] == comm_model.MIB
    assert len(resnet.buckets) == 1 + math.ceil((100_000_000 - comm_model.MIB) / (25 * comm_model.MIB))
    assert comm_model.messages("horovod", resnet, 0.0) == 1  # under Horovod 0.28.1's 128 MiB fusion threshold
    assert comm_model.messages("horovod", comm_model.gradient_of_mb(440), 0.0) == 4
    assert comm_model.messages("horovod", resnet, 10.0) == math.ceil(100_000_000 / (10 * comm_model.MIB))


def test_the_ring_moves_2_n_minus_1_over_n_of_the_gradient():
    grad = comm_model.gradient_of_mb(8)
    for nodes in (2, 4, 64):
        x = comm_model.features("horovod", grad, 0.0, nodes, 1e9)
        assert x[0] == 2 * (nodes - 1)
        assert x[2] == pytest.approx(2 * (nodes - 1) / nodes * 8e6)
        assert x[1] == pytest.approx(x[2] * 8 / 1e9)
        # A simulated link's token bucket lets its burst through unlimited; a real link's rate limits every byte.
        burst = comm_model.features("horovod", grad, 0.0, nodes, 1e9, burst=25_000)
        assert burst[1] == pytest.approx((x[2] - 25_000) * 8 / 1e9) and burst[2] == x[2]


def test_the_fit_recovers_the_constants_the_runs_were_made_from(tmp_path):
    sweep = _sweep(tmp_path / "two", 2, RATES_2, [1, 2, 4])
    found, skipped = comm_model.points([str(sweep)], gradient, netsim.burst_bytes)
    assert not skipped and len(found) == len(RATES_2) * 3 * 2 * 2
    for backend in BACKENDS:
        fitted = comm_model.fit(backend, [p for p in found if p.backend == backend], gradient)
        got, true = fitted.constants, TRUE[backend]
        assert got.overlap == pytest.approx(true.overlap)
        assert got.alpha_s == pytest.approx(true.alpha_s, rel=1e-6)
        assert got.link_efficiency == pytest.approx(true.link_efficiency, rel=1e-6)
        assert got.host_s_per_byte == pytest.approx(true.host_s_per_byte, rel=1e-6)
        assert max(map(abs, fitted.residuals)) < 1e-6
        assert fitted.rank == 3


def test_a_fit_that_cannot_part_a_message_from_a_byte_says_so(tmp_path):
    """One gradient in one bucket count: α and h move together in every run, so the fit's split is arbitrary."""
    sweep = _sweep(tmp_path / "two", 2, RATES_2, [4])
    found, _ = comm_model.points([str(sweep)], gradient, netsim.burst_bytes)
    assert {comm_model.fit(b, [p for p in found if p.backend == b], gradient).rank for b in BACKENDS} == {2}
    doc = prediction.build([str(sweep)], gradient, prediction.Grid(nodes=[2], rates={"1gbit": 1e9}, widths=[4],
                                                                   megabytes=[], compute_ms=None, bucket_mb=0.0))
    assert {doc["fit"][b]["rank"] for b in BACKENDS} == {2}
    assert "**The runs do not tell every constant apart** (independent terms of 3: native 2, horovod 2)" in \
        prediction.markdown(doc)


def test_the_overlap_is_found_where_the_runs_tell_it_apart(tmp_path):
    """ω, fixed at 0 for the sweeps here (docs/cluster.md), is still fitted exactly when compute does not grow with
    the bytes."""
    sweep = _sweep(tmp_path / "two", 2, RATES_2, [1, 2, 4])
    found, _ = comm_model.points([str(sweep)], gradient, netsim.burst_bytes)
    mine = [p for p in found if p.backend == "native"]
    true = Constants(alpha_s=0.004, link_efficiency=0.8, host_s_per_byte=2e-8, overlap=0.3)
    x = np.array([comm_model.features("native", gradient(p.width), 0.0, 2, p.bits_per_s, p.burst) for p in mine])
    compute = np.array([COMPUTE[p.width] for p in mine])
    y = np.array([comm_model.waited(true, row, c) for row, c in zip(x, compute, strict=True)])
    got = comm_model.fit_arrays(x, compute, y, overlaps=tuple(i / 20 for i in range(11)))
    assert got.overlap == pytest.approx(0.3)
    assert got.alpha_s == pytest.approx(0.004, rel=1e-6) and got.link_efficiency == pytest.approx(0.8, rel=1e-6)


def test_the_overlap_the_runs_measured_is_fitted_with_the_averaging_alone(tmp_path):
    """Runs that measured their averaging alone and their wait after backward (results.json's overlap): α, η and h
    from the first, ω from what backward hid of it, whatever the sweep's widths or models."""
    sweep = _sweep(tmp_path / "two", 2, RATES_2, [1, 2, 4])
    found, _ = comm_model.points([str(sweep)], gradient, netsim.burst_bytes)
    true = Constants(alpha_s=0.004, link_efficiency=0.8, host_s_per_byte=2e-8, overlap=0.25)
    measured = []
    for p in (p for p in found if p.backend == "native"):
        alone = float(comm_model.features("native", gradient(p.width), 0.0, 2, p.bits_per_s, p.burst)
                      @ true.theta())
        exposed = comm_model.waited(true, comm_model.features("native", gradient(p.width), 0.0, 2, p.bits_per_s,
                                                              p.burst), p.compute_s)
        measured.append(dataclasses.replace(p, alone_s=alone, exposed_s=exposed))
    got = comm_model.fit("native", measured, gradient).constants
    assert got.overlap == pytest.approx(0.25, rel=1e-6)
    assert got.alpha_s == pytest.approx(0.004, rel=1e-6) and got.host_s_per_byte == pytest.approx(2e-8, rel=1e-6)


def test_predict_validates_on_more_nodes_and_writes_its_three_files(tmp_path):
    two = _sweep(tmp_path / "two", 2, RATES_2, [1, 2, 4])
    three = _sweep(tmp_path / "three", 3, {"10mbit": 10e6, "20mbit": 20e6}, [1, 4], repeats=1)
    four = _sweep(tmp_path / "four", 4, {"10mbit": 10e6}, [2], repeats=1)
    done = run_module("experiments.predict", str(two), str(three), str(four), "--nodes", "2,8,64",
                      "--model-width", "1,8", "--gradient-mb", "100")
    assert done.returncode == 0, done.stderr
    assert {p.name for p in two.glob("prediction.*")} == {"prediction.json", "prediction.md", "prediction.png"}
    doc = json.loads((two / "prediction.json").read_text())
    # Made from the same constants, the held-out nodes are predicted exactly, and so is their ratio.
    assert [(v["nodes"], v["rate"], v["width"]) for v in doc["validation"]] == [
        (3, "10mbit", 1), (3, "10mbit", 4), (3, "20mbit", 1), (3, "20mbit", 4), (4, "10mbit", 2)]
    for row in doc["validation"]:
        for key in BACKENDS:
            assert abs(row[key]["error"]) < 1e-6 and abs(row[key]["error_with_measured_compute"]) < 1e-6
        assert abs(row["native_over_horovod"]["error"]) < 1e-6
    cells = doc["predictions"]
    assert len(cells) == 3 * 3 * 4  # (widths 1 and 8, 100 MB) × 3 node counts × 4 default rates
    assert all(c["extrapolated"] for c in cells)  # beyond the rates measured, and width 8's compute unmeasured
    one = next(c for c in cells if c["width"] == 1 and c["nodes"] == 8 and c["rate"] == "10gbit")
    real = {b: comm_model.waited(TRUE[b], comm_model.features(b, gradient(1), 0.0, 8, 10e9), COMPUTE[1])
            for b in BACKENDS}  # a real link: no token bucket
    native, horovod = (COMPUTE[1] + real[b] for b in BACKENDS)
    assert one["native_over_horovod"]["value"] == pytest.approx(horovod / native)
    assert one["native"]["efficiency"] == pytest.approx(COMPUTE[1] / native)
    mb = next(c for c in cells if c["gradient"] == "100 MB" and c["nodes"] == 64 and c["rate"] == "1gbit")
    assert mb["comm_only"] and "efficiency" not in mb["native"]
    text = (two / "prediction.md").read_text()
    assert "10 of 10 predictions within 20 %" not in text and "15 of 15 predictions within 20 %" in text
    assert "What the model leaves out" in text and done.stdout.count("## Predictions") == 1
    # make docs renders the prediction again from its JSON alone, with the sweep's own report.
    picture = (two / "prediction.png").read_bytes()
    for made in ("prediction.md", "prediction.png"):
        (two / made).unlink()
    assert compare.render_sweep(two) and (two / "prediction.md").read_text() == text
    assert (two / "prediction.png").read_bytes() == picture


@pytest.mark.parametrize("args, says", [
    (["{missing}"], "holds no network.json"),
    (["{two}", "--link-rates", "unshaped"], "is a link this machine had"),
    (["{two}", "--nodes", "1,2"], "--nodes takes distinct whole numbers from 2"),
    (["{two}", "--gradient-mb", "-5"], "--gradient-mb takes positive sizes"),
    (["{two}", "--compute-ms", "0"], "--compute-ms takes a positive number"),
    (["{two}", "--model-width", "", "--gradient-mb", ""], "nothing to predict"),
    (["{two}", "{two}"], "a sweep folder is given twice"),
    (["{two}"], "the fit of 3 constants needs more runs than that, at least 4, got 2"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, says):
    two = _sweep(tmp_path / "two", 2, {"10mbit": 10e6, "unshaped": None}, [1], repeats=1)
    before = sorted(p.name for p in two.rglob("*"))
    done = run_module("experiments.predict", *(a.format(two=two, missing=tmp_path / "nope") for a in args))
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert sorted(p.name for p in two.rglob("*")) == before


@pytest.mark.parametrize("damage, says", [
    (lambda run: run.update(steady_samples_per_s=-1), "steady_samples_per_s -1 and comm share"),
    (lambda run: run.update(steady_samples_per_s="NaN"), "steady_samples_per_s 'NaN' and comm share"),
    (None, "is not a sweep's record (it lacks its rates"),
])
def test_damaged_sweep_data_is_one_line_exit_2(tmp_path, damage, says):
    two = _sweep(tmp_path / "two", 2, {"10mbit": 10e6, "unshaped": None}, [1, 2, 4])
    if damage is None:
        (two / "network.json").write_text("{}")
    else:
        path = two / "10mbit" / "w2" / "comparison.json"
        comparison = json.loads(path.read_text())
        damage(comparison["runs"][0])
        path.write_text(json.dumps(comparison))
    done = run_module("experiments.predict", str(two))
    assert done.returncode == 2 and says in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr and not (two / "prediction.md").exists()


def test_a_sweep_of_one_cell_is_refused_for_the_fit(tmp_path):
    one = _sweep(tmp_path / "one", 2, {"10mbit": 10e6}, [1], repeats=1)
    grid = prediction.Grid(nodes=[4], rates={"1gbit": 1e9}, widths=[1], megabytes=[], compute_ms=None, bucket_mb=0)
    with pytest.raises(ConfigError, match="needs runs at two or more link rates or widths"):
        prediction.build([str(one)], gradient, grid, netsim.burst_bytes)


@pytest.mark.parametrize("bits, says", [
    (0, "its rate '10mbit' records 0 bit/s, which is not that rate"),  # was fitted as unshaped, exit 0
    ("10gbit", "its rate '10mbit' records '10gbit' bit/s"),  # was a traceback
])
def test_a_rate_whose_bits_contradict_its_name_is_refused_before_the_fit(tmp_path, bits, says):
    from experiments import regime  # what experiments.predict and --render read a sweep with

    two = _sweep(tmp_path / "two", 2, {"10mbit": 10e6, "unshaped": None}, [1])
    network = json.loads((two / "network.json").read_text())
    network["rates"][0]["link_bits_per_s"] = bits
    (two / "network.json").write_text(json.dumps(network))
    with pytest.raises(ConfigError, match=re.escape(says)):
        regime.load(two)

"""Right or refused: every bad input is one `error:` line and exit code 2, before any training, data generation
or Ray start (the table traps `ray.init` and the process group), and nothing is created. One table per entry point.

The tables call each entry point's real `main` through `cli.run` in this process (a subprocess would spend
~2 s importing torch for every row); the tests at the end run the real launchers (torchrun, horovodrun) once.
"""

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torchvision.datasets import MNIST

from cluster import own_ray, ray_cluster
from contract.config import TrainConfig
from contract.results import History
from runtime import cli, launch, signals
from tests.helpers import BIN, ENTRY_POINTS, REPO, SYNTHETIC, data_flags, free_port, run_command, run_module, tree
from workload import checkpoint
from workload.model import ConvNet



def write_checkpoint(directory: Path, epochs: int = 2, backend: str = "native", launcher: str = "ray",
                     **settings) -> None:
    cfg = TrainConfig(dataset="synthetic", epochs=epochs, **settings)
    model = ConvNet()
    history = History(step_losses=[2.3] * epochs, epochs=[{"epoch": e} for e in range(1, epochs + 1)])
    checkpoint.save(directory, model, torch.optim.SGD(model.parameters(), lr=cfg.lr), history, cfg, backend, launcher)


def stopped_comparison(folder: Path, before_the_ceiling: bool = False, schema: int | None = None) -> None:
    """The folder of a comparison asked for --repeats 3, stopped before it finished; `before_the_ceiling`: planned
    before compare ran the ceiling, so its plan says nothing of it; `schema`: its plan's schema_version instead."""
    from contract.comparison import CompareConfig
    from ray_jobs import orchestrator, resume

    folder.mkdir(parents=True)
    asked = resume.request(TrainConfig(epochs=orchestrator.DEFAULT_EPOCHS, cpu_affinity=orchestrator.DEFAULT_AFFINITY),
                           CompareConfig(repeats=3))
    resume.write_plan(folder, {k: v for k, v in asked.items() if not (before_the_ceiling and k == "no_ceiling")})
    if schema is not None:
        plan = json.loads((folder / resume.PLAN).read_text())
        (folder / resume.PLAN).write_text(json.dumps({**plan, "schema_version": schema}))


def sweep_with_a_string_rate(folder: Path) -> None:
    """A committed link sweep whose second rate says "1gbit" where its bits per second go."""
    import shutil

    shutil.copytree(REPO / "docs" / "results" / "link-sweeps-resnet18" / "2-nodes", folder)
    network = json.loads((folder / "network.json").read_text())
    network["rates"][1]["link_bits_per_s"] = "1gbit"
    (folder / "network.json").write_text(json.dumps(network))


def write_file(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)


SETUPS = {
    "checkpoint": lambda ws: write_checkpoint(ws / "ckpt"),
    "garbage-checkpoint": lambda ws: write_file(ws / "ckpt" / checkpoint.FILENAME, b"\x80garbage, not torch.save"),
    "corrupt-comparison": lambda ws: write_file(ws / "run" / "comparison.json", b'{"run_id": "x", "settings": {'),
    "empty-comparison": lambda ws: write_file(ws / "run" / "comparison.json", b"{}"),
    "no-runs-comparison": lambda ws: write_file(ws / "run" / "comparison.json", json.dumps({
        "schema_version": 2, "run_id": "x", "settings": {}, "environment": {}, "wall_time_s": 1.0, "runs": [],
        "parity": {"2": {"verdict": "PASS"}}, "not_applicable": [], "speed": {"2": {"ratio": 1.14}}}).encode()),
    "binary-comparison": lambda ws: write_file(ws / "run" / "comparison.json", b"\xff\xfe\x00garbage"),
    "grid-without-settings": lambda ws: write_file(ws / "run" / "grid.json", json.dumps({
        "schema_version": 1, "grid_id": "x", "varied": ["bucket_mb"], "workers": [2], "repeats": 2}).encode()),
    "network-rate-a-string": lambda ws: sweep_with_a_string_rate(ws / "run"),
    "stopped-comparison": lambda ws: stopped_comparison(ws / "run"),
    "planned-before-the-ceiling": lambda ws: stopped_comparison(ws / "run", before_the_ceiling=True),
    "plan-of-a-later-version": lambda ws: stopped_comparison(ws / "run", schema=99),
    "idx-folder": lambda ws: (ws / "mnist" / "MNIST" / "raw" / "train-images-idx3-ubyte").mkdir(parents=True),
    "truncated-synthetic": lambda ws: truncated_synthetic(ws / "data"),
    "sdist": lambda ws: write_file(ws / "horovod-0.28.1.tar.gz", b"an sdist"),
    "toolkit-without-nvvm": lambda ws: [write_file(ws / "horovod-0.28.1.tar.gz", b"an sdist"),
                                        *(write_file(ws / "cu13" / part, b"") for part in (
                                            "bin/nvcc", "include/cuda_runtime.h", "include/crt/host_config.h",
                                            "include/cccl/cuda/std/cstddef", "lib/libcudart.so.13",
                                            "lib/libcudadevrt.a"))],
}


def truncated_synthetic(data_dir: Path) -> None:
    """Synthetic digits made earlier in `data_dir`, then cut short: refused by the launcher, not by the workers."""
    from workload import data

    cfg = TrainConfig(dataset="synthetic", data_dir=str(data_dir), synthetic_train_size=1000, synthetic_test_size=200)
    images = data.write_synthetic(cfg) / "MNIST" / "raw" / "train-images-idx3-ubyte"
    images.write_bytes(images.read_bytes()[:1000])


class NotRay(http.server.BaseHTTPRequestHandler):
    """Something other than Ray on the port RAY_ADDRESS names: a plain HTTP/1 server."""

    def do_GET(self) -> None:
        self.send_error(404)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def not_ray():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotRay)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def ws(tmp_path, monkeypatch):
    """A workspace: a plain file to trip over, an empty working directory, no Ray address, offline MNIST."""
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("LOCAL_RANK", "0")  # native_ddp.train as torchrun starts it
    monkeypatch.setattr(MNIST, "mirrors", ["http://127.0.0.1:9/"])  # fails at once, as offline
    return tmp_path


def assert_refused(entry: str, argv: list[str], needle: str, ws: Path, monkeypatch, capsys) -> str:
    monkeypatch.setattr(sys, "argv", [entry, *argv])
    for started in ("ray.init", "torch.distributed.init_process_group"):  # a refusal comes before either
        monkeypatch.setattr(started, _must_not_start(started))
    before = tree(ws)
    with pytest.raises(SystemExit) as exited:
        cli.run(ENTRY_POINTS[entry])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert exited.value.code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    assert needle in lines[0], lines[0]
    assert tree(ws) == before, "a refused run created files"
    return lines[0]


def _must_not_start(name: str):
    def started(*args, **kwargs):
        raise AssertionError(f"{name} was called before the refusal")

    return started


def case(entry, argv, needle, setup=None, env=None):
    return pytest.param(entry, argv, needle, setup, env, id=f"{entry}:{' '.join(argv)[:60]}:{setup or env or ''}")


TABLE = [
    # Non-finite numbers: NaN passes every comparison, inf trains to NaN.
    case("ray_jobs.train", ["--lr", "inf"], "--lr must be a finite number, got inf"),
    case("ray_jobs.train", ["--lr", "nan"], "--lr must be a finite number, got nan"),
    case("ray_jobs.train", ["--momentum", "nan"], "--momentum must be a finite number"),
    case("ray_jobs.train", ["--stall-timeout-s", "nan"], "--stall-timeout-s must be a finite number"),
    case("ray_jobs.train", ["--stall-timeout-s", "inf"], "--stall-timeout-s must be a finite number"),
    case("ray_jobs.train", ["--lr", "fast"], "invalid float value: 'fast'"),
    case("ray_jobs.train", ["--max-failures", "-1"], "--max-failures must be >= 0"),
    # Upper bounds a user could mean: beyond them Horovod aborts allocating its fusion buffer, or its cycle stalls.
    case("ray_jobs.train", ["--backend", "horovod", "--bucket-mb", "1e9"], "--bucket-mb must be at most 4096"),
    case("ray_jobs.train", ["--backend", "horovod", "--cycle-time-ms", "1e9"], "--cycle-time-ms must be at most 1000"),
    case("ray_jobs.compare", ["--bucket-mb", "25,1e9"], "--bucket-mb must be at most 4096"),
    case("horovod_ddp.train", ["--epochs", "1000000"], "--epochs must be at most 10000"),
    # Options one framework lacks are refused by the other's runs, never ignored; fp16 autocast needs a GPU.
    case("ray_jobs.train", ["--cycle-time-ms", "5"], "--cycle-time-ms is a Horovod option, not applicable to DDP; "
                                                     "use --backend horovod"),
    case("ray_jobs.train", ["--backend", "horovod", "--static-graph"], "--static-graph is a DDP option"),
    case("ray_jobs.train", ["--amp", "fp16"], "--amp fp16 needs a GPU (--use-gpu) and a GradScaler; on CPU use"),
    case("ray_jobs.train", ["--compression", "int8"], "--compression must be one of none, fp16, bf16"),
    case("ray_jobs.train", ["--placement-strategy", "EVERYWHERE"], "--placement-strategy must be one of PACK, SPREAD, "
         "STRICT_PACK"),
    case("native_ddp.train", ["--placement-strategy", "SPREAD"], "unrecognized arguments: --placement-strategy"),
    # The ceiling averages nothing: an option that shapes the averaging has nothing to act on.
    case("native_ddp.train", ["--no-averaging", "--compression", "fp16"],
         "--no-averaging averages nothing, so --compression has nothing to act on"),
    case("horovod_ddp.train", ["--no-averaging", "--cycle-time-ms", "5"],
         "--no-averaging averages nothing, so --cycle-time-ms has nothing to act on"),
    case("ray_jobs.compare", ["--no-averaging"], "unrecognized arguments: --no-averaging"),
    # Paths: checked before training, not at the end of it.
    case("ray_jobs.train", ["--output-dir", "{ws}/a-file"], "is a file, not a folder"),
    case("ray_jobs.train", ["--output-dir", "{ws}/a-file/out"], "cannot be a folder"),
    case("ray_jobs.train", ["--data-dir", "{ws}/a-file"], "--data-dir"),
    case("ray_jobs.train", ["--checkpoint-dir", "{ws}/a-file"], "--checkpoint-dir"),
    case("ray_jobs.train", ["--storage-path", "{ws}/a-file"], "--storage-path"),
    case("ray_jobs.train", ["--name", "n" * 300], "--name is 300 bytes long"),
    case("ray_jobs.train", ["--name", "a/b"], "must be a plain folder name"),
    case("ray_jobs.train", ["--output-dir", "{ws}/" + "o" * 300], "a path component is 300 bytes"),
    case("ray_jobs.train", ["--output-dir", ""], "--output-dir is empty; name a folder"),
    case("ray_jobs.train", ["--data-dir", " "], "--data-dir is empty; name a folder"),
    case("horovod_ddp.train", ["--output-dir", ""], "--output-dir is empty; name a folder"),
    case("ray_jobs.compare", ["--output-dir", ""], "--output-dir is empty; name a folder"),
    # Numbers the workload cannot take: numpy's seed range, a step size float32 weights cannot be multiplied by.
    case("ray_jobs.train", ["--seed", "-1"], "--seed must be an integer from 0 to 4294967295"),
    case("ray_jobs.compare", ["--seed", "4294967296"], "--seed must be an integer from 0 to 4294967295"),
    case("ray_jobs.train", ["--lr", "1e308"], "--lr must be at most 3.403e+38 (the weights are float32)"),
    # More workers than the local Ray this run would start can hold: refused before Ray starts or data is made.
    case("ray_jobs.train", [*SYNTHETIC, "--workers", "64", "--warmup-steps", "0"],
         "--workers 64 needs 64 CPUs but the local Ray this run would start has", env="no-recorded-cluster"),
    # Seen: refused only once the data was made and a local Ray had started (13-20 s).
    case("ray_jobs.train", [*SYNTHETIC, "--use-gpu"], "--workers 1 needs 1 GPUs but the local Ray this run would start "
         "has 0", env="no-recorded-cluster"),
    case("ray_jobs.compare", [*SYNTHETIC, "--workers", "2,64", "--warmup-steps", "0", "--output-dir", "{ws}/results"],
         "--workers 64 needs 64 CPUs but the local Ray", env="no-recorded-cluster"),
    # Epochs too short to time: refused, never a silent fallback to timing the warm-up.
    case("ray_jobs.train", [*SYNTHETIC, "--batch-size", "5000", "--synthetic-train-size", "2000"],
         "an epoch is 1 step(s)"),
    case("ray_jobs.train", [*SYNTHETIC, "--synthetic-train-size", "5"], "leaves no step after --warmup-steps 5"),
    case("ray_jobs.train", [*SYNTHETIC, "--max-steps-per-epoch", "1"], "--max-steps-per-epoch 1"),
    # Checkpoints: not ours, or not this run's.
    case("ray_jobs.train", [*SYNTHETIC, "--checkpoint-dir", "{ws}/ckpt", "--epochs", "3"],
         "is not a readable checkpoint", "garbage-checkpoint"),
    case("ray_jobs.train", [*SYNTHETIC, "--checkpoint-dir", "{ws}/ckpt", "--epochs", "3", "--lr", "5.0"],
         "--lr 0.01 -> 5.0", "checkpoint"),
    case("ray_jobs.train", [*SYNTHETIC, "--checkpoint-dir", "{ws}/ckpt", "--epochs", "3", "--batch-size", "50"],
         "--batch-size 100 -> 50", "checkpoint"),
    case("ray_jobs.train", [*SYNTHETIC, "--checkpoint-dir", "{ws}/ckpt", "--epochs", "1"],
         "has already trained 2 epoch(s)", "checkpoint"),
    case("ray_jobs.train", ["--backend", "horovod", *SYNTHETIC, "--checkpoint-dir", "{ws}/ckpt", "--epochs", "3",
                            "--seed", "4"], "--seed 0 -> 4", "checkpoint"),
    case("ray_jobs.train", ["--backend", "horovod", *SYNTHETIC, "--checkpoint-dir", "{ws}/ckpt", "--epochs", "3"],
         "--backend native -> horovod", "checkpoint"),
    case("native_ddp.train", [*SYNTHETIC, "--checkpoint-dir", "{ws}/a-file"], "--checkpoint-dir"),
    # Data and cluster.
    case("ray_jobs.train", ["--dataset", "mnist", "--data-dir", "{ws}/mnist"], "could not be downloaded"),
    case("ray_jobs.train", ["--dataset", "mnist", "--data-dir", "{ws}/mnist"], "train-images-idx3-ubyte is not a file",
         "idx-folder"),
    case("ray_jobs.train", [*SYNTHETIC, "--synthetic-train-size", "1000", "--synthetic-test-size", "200"],
         "truncated, 1000 bytes where its header promises", "truncated-synthetic"),
    case("ray_jobs.train", [*SYNTHETIC, "--model-width", "100000"], "--model-width must be at most 64"),
    case("ray_jobs.train", [*SYNTHETIC, "--name", "x", "--storage-path", ""], "--storage-path is empty"),
    case("ray_jobs.train", [*SYNTHETIC, "--name", "my run \u2713"], "must be ASCII"),
    # Seen: numpy's MemoryError traceback, and the data folder left behind.
    case("ray_jobs.train", [*SYNTHETIC, "--synthetic-train-size", "1000000000000"],
         "synthetic digits need about"),
    case("ray_jobs.train", SYNTHETIC, "answers, but not as a Ray cluster", env="not-ray"),
    case("ray_jobs.train", SYNTHETIC, "cannot reach the Ray cluster", env="closed-port"),
    case("ray_jobs.train", SYNTHETIC, "is Ray Client, which Ray advises against for Ray Train", env="ray-client"),
    case("ray_jobs.train", SYNTHETIC, "cannot reach the Ray cluster recorded in", env="stale-record"),
    case("ray_jobs.train", SYNTHETIC, "the Ray here (127.0.0.1:6) is another process's own", env="auto-private"),
    case("ray_jobs.train", SYNTHETIC, "RAY_ADDRESS=auto found no cluster started with `ray start`", env="auto-nothing"),
    # Seen: Ray's OSError traceback from ray.init, once the data was made.
    case("ray_jobs.train", SYNTHETIC, "cannot be written here; set HOME to a writable folder", env="read-only-home"),

    # Models: a name that does not resolve, or a setting the model cannot take.
    case("ray_jobs.train", ["--model", "resnet1"], "--model must be one of convnet, mlp, resnet18, resnet50, vit_b_16"),
    case("ray_jobs.compare", ["--models", "convnet,nosuch.module:net"], "--model nosuch.module:net: cannot import"),
    case("ray_jobs.compare", ["--models", "convnet,convnet"], "--model lists a value twice"),
    case("horovod_ddp.train", ["--model", "vit_b_16", "--image-size", "40"], "must be a multiple of 16, got 40"),
    case("native_ddp.spawn", ["--model", "resnet18", "--model-width", "2"], "--model-width scales convnet"),
    case("native_ddp.train", ["--model", "resnet50", "--dataset", "mnist"], "MNIST is for convnet and mlp"),
    case("ray_jobs.train", ["--model", "mlp", "--num-classes", "100"], "mlp trains on 28x28 digits of 10 classes"),

    case("ray_jobs.compare", ["--checkpoint-dir", "{ws}/ckpt"], "unrecognized arguments: --checkpoint-dir"),
    case("ray_jobs.compare", ["--backends", "native", "--autotune"], "--autotune is a Horovod option, not applicable "
                                                                     "to DDP; use --backends horovod"),
    case("ray_jobs.compare", ["--backends", "native", "--fused-buffers"], "--fused-buffers is a Horovod option, not "
                                                                          "applicable to DDP; use --backends horovod"),
    case("ray_jobs.compare", ["--compression", "none,int8"], "--compression takes values from none, fp16, bf16"),
    case("ray_jobs.compare", ["--bucket-mb", "1,big"], "--bucket-mb takes comma-separated sizes in MiB, got 'big'"),
    case("ray_jobs.compare", ["--bucket-mb", "1,1"], "--bucket-mb lists a value twice"),
    case("ray_jobs.compare", ["--amp", "fp16"], "--amp fp16 needs a GPU"),
    case("ray_jobs.compare", ["--tolerance", "nan"], "--tolerance must be a finite number >= 0"),
    case("ray_jobs.compare", ["--tolerance", "-1"], "--tolerance must be a finite number >= 0"),
    case("ray_jobs.compare", ["--parity-steps", "0"], "--parity-steps must be a positive integer"),
    case("ray_jobs.compare", ["--target-accuracy", "1.5"], "--target-accuracy must be in (0, 1]"),
    case("ray_jobs.compare", ["--lr", "inf"], "--lr must be a finite number"),
    case("ray_jobs.compare", ["--output-dir", "{ws}/a-file"], "is a file, not a folder"),
    case("ray_jobs.compare", ["--output-dir", "{ws}/a-file/results"], "cannot be a folder"),
    case("ray_jobs.compare", [*SYNTHETIC, "--output-dir", "{ws}/results", "--synthetic-train-size", "2000",
                              "--batch-size", "1000"], "--workers 2"),
    case("ray_jobs.compare", ["--output-dir", "{ws}/results"], "answers, but not as a Ray cluster", env="not-ray"),
    case("ray_jobs.compare", ["--output-dir", "{ws}/results"], "submit the command to that cluster", env="ray-client"),
    case("ray_jobs.compare", ["--output-dir", "{ws}/results"], "delete ", env="stale-record"),
    case("ray_jobs.compare", ["--output-dir", "{ws}/results"], "/.ray/auth_token (Ray's default)",
         env="read-only-home"),
    case("ray_jobs.compare", ["--repeats", "0"], "--repeats must be a positive integer"),
    case("ray_jobs.compare", ["--launchers", "slurm"], "--launchers takes distinct names"),
    case("ray_jobs.compare", ["--launchers", "ray,horovodrun"], "`horovodrun` is not on PATH", env="no-horovodrun"),
    case("ray_jobs.compare", ["--launchers", "torchrun", "--backends", "horovod"], "which --backends leaves out"),
    case("ray_jobs.compare", ["--render", "{ws}/nowhere"], "does not exist"),
    # A simulated cluster: every run must cross the link, and the regime report has one cell per rate and width.
    case("ray_jobs.compare", ["--simulate-nodes", "2", "--workers", "2,4"], "takes one worker count, a multiple of 2"),
    case("ray_jobs.compare", ["--simulate-nodes", "2", "--workers", "3"], "takes one worker count, a multiple of 2"),
    case("ray_jobs.compare", ["--simulate-nodes", "2", "--compression", "none,fp16"], "give --compression one value"),
    case("ray_jobs.compare", ["--simulate-nodes", "9"], "--simulate-nodes takes 2 to 8 nodes"),
    # Abbreviations: the link sweep must recognise its own flags by their full names.
    case("ray_jobs.compare", ["--simulate", "2"], "unrecognized arguments: --simulate 2"),
    case("ray_jobs.compare", ["--render", "{ws}/run"], "cannot be read as JSON", "corrupt-comparison"),
    case("ray_jobs.compare", ["--render", "{ws}/run"], "cannot be read as JSON", "binary-comparison"),
    case("ray_jobs.compare", ["--render", "{ws}/run"], "is not a comparison (it lacks schema_version, run_id",
         "empty-comparison"),
    case("ray_jobs.compare", ["--render", "{ws}/run"], "grid.json is damaged or from another version (KeyError",
         "grid-without-settings"),
    case("ray_jobs.compare", ["--render", "{ws}/run"], "network.json is damaged: its rate '1gbit' records '1gbit' "
         "bit/s", "network-rate-a-string"),
    # --resume: the folder of a stopped comparison, asked the same again.
    case("ray_jobs.compare", ["--resume", "{ws}/run"], "was started with other settings (--repeats 3 -> 6)",
         "stopped-comparison"),
    case("ray_jobs.compare", ["--resume", "{ws}/run", "--repeats", "3"], "was started with other settings "
         "(--no-ceiling True -> False)", "planned-before-the-ceiling"),
    case("ray_jobs.compare", ["--resume", "{ws}"], "no plan.json there, so it is no comparison's folder"),
    case("ray_jobs.compare", ["--resume", "{ws}/run", "--repeats", "3"], "plan.json says schema_version 99, and this "
         "version of the project reads 2", "plan-of-a-later-version"),
    case("ray_jobs.compare", ["--resume", "{ws}/nowhere"], "/nowhere does not exist; pass the results/<run-id> folder"),
    # A comparison that ran nothing renders no verdict, whatever its file claims.
    case("ray_jobs.compare", ["--render", "{ws}/run"], "holds no run, so there is nothing to render",
         "no-runs-comparison"),
    case("ray_jobs.compare", ["--backends", "native,native"], "--backends lists a name twice"),
    case("ray_jobs.compare", ["--model", "resnet18", "--models", "convnet"], "--model and --models are one flag"),
    case("ray_jobs.compare", ["--best-of-each"], "--best-of-each runs each backend at its best setting of a tuning"),
    case("ray_jobs.compare", ["--best-of-each", "--models", "convnet,mlp"], "give a list in --bucket-mb"),
    case("ray_jobs.compare", ["--best-of-each", "--bucket-mb", "1,25", "--backends", "native"],
         "--best-of-each compares the two backends"),
    case("ray_jobs.compare", ["--target-ci", "150"], "--target-ci is a half-width in percent from 0 to 50"),

    case("horovod_ddp.train", ["--lr", "inf"], "--lr must be a finite number"),
    case("horovod_ddp.train", ["--output-dir", "{ws}/a-file"], "is a file, not a folder"),
    case("horovod_ddp.train", [*SYNTHETIC, "--synthetic-train-size", "5"], "leaves no step after --warmup-steps"),
    case("horovod_ddp.train", ["--grad-accumulation", "3"], "must be divisible by --grad-accumulation 3"),
    case("horovod_ddp.train", ["--static-graph"], "unrecognized arguments: --static-graph"),

    case("native_ddp.train", ["--stall-timeout-s", "nan"], "--stall-timeout-s must be a finite number"),
    case("native_ddp.train", ["--cycle-time-ms", "5"], "unrecognized arguments: --cycle-time-ms"),
    case("native_ddp.train", ["--amp", "fp16"], "--amp fp16 needs a GPU"),
    case("native_ddp.train", ["--checkpoint-dir", "{ws}/a-file"], "--checkpoint-dir"),
    case("native_ddp.train", [*SYNTHETIC, "--batch-size", "5000", "--synthetic-train-size", "2000"],
         "an epoch is 1 step(s)"),

    case("native_ddp.spawn", ["--workers", "0"], "--workers must be a positive integer"),
    case("native_ddp.spawn", ["--autotune"], "unrecognized arguments: --autotune"),
    case("native_ddp.spawn", ["--lr", "inf"], "--lr must be a finite number"),
    case("native_ddp.spawn", ["--output-dir", "{ws}/a-file"], "is a file, not a folder"),
    case("native_ddp.spawn", [*SYNTHETIC, "--workers", "2", "--synthetic-train-size", "150"],
         "leaves no step after --warmup-steps"),

    # A user's network, built once on the meta device before anything starts: under Ray these were a worker's death.
    case("ray_jobs.train", ["--model", "tests.tiny_models:seven_classes", "--image-size", "16"],
         "its output for 2 images is (2, 7), and --num-classes 10 needs (2, 10)"),
    case("horovod_ddp.train", ["--model", "tests.tiny_models:seven_classes", "--image-size", "16"],
         "its output for 2 images is (2, 7)"),
    case("ray_jobs.compare", ["--model", "tests.tiny_models:unused_parameters", "--image-size", "16"],
         "2 trainable parameter(s) get no gradient (spare.weight, spare.bias)"),
    case("native_ddp.train", ["--model", "tests.tiny_models:takes_nothing"],
         "calling it with num_classes=10 raised TypeError"),
    case("ray_jobs.train", ["--model", "os:getcwd"], "calling it with num_classes=10 raised TypeError"),
    case("native_ddp.spawn", ["--model", "tests.tiny_models:not_a_module"], "returned str, not a torch.nn.Module"),
    case("ray_jobs.train", ["--model", "tests.tiny_models:tiny"],  # its Linear is sized for 16x16 images
         "a batch of 3x32x32 images through it raised RuntimeError"),

    # An interface gloo is told to use that this host lacks: a traceback under torchrun, a ControllerError on Ray.
    case("native_ddp.train", [], "GLOO_SOCKET_IFNAME=nosuch0 names nosuch0, which this host does not have",
         env="no-such-interface"),
    case("ray_jobs.train", [], "GLOO_SOCKET_IFNAME=nosuch0 names nosuch0", env="no-such-interface"),
    case("ray_jobs.compare", [], "GLOO_SOCKET_IFNAME=nosuch0 names nosuch0", env="no-such-interface"),
    # A framework setting this project sets from a flag, exported otherwise: the report would name the flag's value.
    case("ray_jobs.compare", [], "HOROVOD_CYCLE_TIME=200 is exported here, and this project sets HOROVOD_CYCLE_TIME "
         "from --cycle-time-ms (Horovod would run with yours while the report names --cycle-time-ms's value); unset "
         "it and pass --cycle-time-ms 200", env="HOROVOD_CYCLE_TIME=200"),
    case("horovod_ddp.train", [], "HOROVOD_FUSION_THRESHOLD=0 is exported here, and this project sets "
         "HOROVOD_FUSION_THRESHOLD from --bucket-mb", env="HOROVOD_FUSION_THRESHOLD=0"),
    # A setting one backend cannot take as it is compared: seen, both DDP ranks' SIGSEGV under torchrun, minutes in.
    case("ray_jobs.compare", ["--launchers", "torchrun,horovodrun"], "TORCH_DISTRIBUTED_DEBUG=DETAIL is exported "
         "here: it has DDP's process group check and log every collective", env="TORCH_DISTRIBUTED_DEBUG=DETAIL"),
    case("native_ddp.train", [], "TORCH_DISTRIBUTED_DEBUG=INFO is exported here", env="TORCH_DISTRIBUTED_DEBUG=INFO"),
    case("tools/first_step_gradients.py", ["--output", "{ws}/out"], "TORCH_DISTRIBUTED_DEBUG=DETAIL is exported here",
         env="TORCH_DISTRIBUTED_DEBUG=DETAIL"),
    # More ranks than a host's cores can start, train and stop: seen, 65 under torchrun on 2 cores, SIGTERM unheard.
    case("native_ddp.spawn", ["--workers", "5"], "5 ranks on this host would share its 2 core(s), more than 2 a core: "
         "too little for each to start, train or stop in time; start at most 4 here", env="two-cores"),
    case("ray_jobs.compare", ["--launchers", "torchrun", "--workers", "2,5"], "5 ranks on this host would share its 2",
         env="two-cores"),
    case("horovod_ddp.train", [], "100000 ranks on this host would share its", env="HOROVOD_LOCAL_SIZE=100000"),
    # A Ray to start and no `ray` command: seen, "run again when the machine is less busy".
    case("ray_jobs.train", SYNTHETIC, "a local Ray would be started with the `ray` command, and there is none "
         "beside this Python", env="no-ray-command"),
    case("ray_jobs.compare", ["--output-dir", "{ws}/results"], "there is none beside this Python",
         env="no-ray-command"),
    # --budget-min bounds --target-ci's rounds; alone it would bound nothing (seen: 6 rounds in 457 s at 1 minute).
    case("ray_jobs.compare", ["--budget-min", "1"], "--budget-min bounds the rounds --target-ci adds, and without "
         "--target-ci --repeats fixes them, so it would bound nothing; add --target-ci"),
    case("ray_jobs.compare", ["--repeats", "2", "--budget-min=5"], "--budget-min bounds the rounds --target-ci adds"),
    # tools/first_step_gradients.py keeps the commands' contract: seen, a traceback, or a refusal 95 s in, its output
    # folder made.
    case("tools/first_step_gradients.py", ["--workers", "65", "--output", "{ws}/out"],
         "65 ranks on this host would share its 2 core(s)", env="two-cores"),
    case("tools/first_step_gradients.py", ["--workers", "5", "--output", "{ws}/out"], "start at most 4 here",
         env="two-cores"),
    case("tools/first_step_gradients.py", ["--output", "{ws}/a-file"], "--output {ws}/a-file is a file, not a folder"),
    case("tools/first_step_gradients.py", ["--output", "{ws}/a-file/out"], "cannot be a folder: {ws}/a-file is a "
         "file"),
    case("tools/first_step_gradients.py", ["--model", "nosuchnet", "--output", "{ws}/out"],
         "--model must be one of convnet, mlp"),
    case("tools/first_step_gradients.py", ["--workers", "1", "--output", "{ws}/out"], "an average needs 2 or more"),

    # --use-gpu: a GPU per rank on this host, and a Horovod whose GPU collectives are NCCL's (this one is Gloo's).
    case("native_ddp.train", ["--use-gpu"], "1 rank(s) on this host need 1 GPU(s), and torch sees 0 here"),
    case("native_ddp.spawn", ["--use-gpu", "--workers", "2"], "2 rank(s) on this host need 2 GPU(s)"),
    case("horovod_ddp.train", ["--use-gpu"], "--use-gpu gives every rank a GPU of its own"),
    case("ray_jobs.compare", ["--use-gpu", "--launchers", "torchrun"], "2 rank(s) on this host need 2 GPU(s)"),
    case("horovod_ddp.train", ["--use-gpu"], "this Horovod was built without NCCL", env="fake-gpus"),
    case("ray_jobs.train", ["--backend", "horovod", "--use-gpu"], "this Horovod was built without NCCL",
         env="fake-gpus"),
    case("ray_jobs.compare", ["--use-gpu"], "this Horovod was built without NCCL", env="fake-gpus"),
    case("ray_jobs.gpu_check", [], "torch sees none here (torch.cuda.device_count() is 0)"),
    case("ray_jobs.gpu_check", ["--sdist", "{ws}/nowhere.tar.gz"], "name Horovod 0.28.1's sdist", env="fake-gpus"),
    case("ray_jobs.gpu_check", ["--cpu-stand-in", "--sdist", "{ws}/horovod-0.28.1.tar.gz"],
         "--cpu-stand-in builds Horovod with NCCL for GPUs this machine does not have: set HOROVOD_BUILD_CUDA_CC_LIST",
         setup="sdist"),
    case("ray_jobs.gpu_check", ["--cpu-stand-in", "--sdist", "{ws}/horovod-0.28.1.tar.gz"],
         "lacks nvvm/bin/cicc (nvidia-nvvm): Gloo alone", setup="toolkit-without-nvvm", env="pip-toolkit"),
    # The default data of a ResNet-50 at 16 workers is 3 steps an epoch: a warm-up of 4 asked for leaves none, and
    # the refusal names the size that does (the default warm-up would shrink: tests/test_model.py).
    case("ray_jobs.compare", ["--model", "resnet50", "--workers", "16", "--warmup-steps", "4"],
         "pass --synthetic-train-size 12288 (24 steps at --workers 16), or lower --warmup-steps or --batch-size"),
]


@pytest.mark.parametrize("entry, argv, needle, setup, env", TABLE)
def test_bad_input_is_refused_in_one_line_before_anything_starts(entry, argv, needle, setup, env, ws, monkeypatch,
                                                                  capsys, request, tmp_path_factory):
    if setup:
        SETUPS[setup](ws)
    if env == "not-ray":
        monkeypatch.setenv("RAY_ADDRESS", request.getfixturevalue("not_ray"))
    elif env == "ray-client":  # refused before it is tried: nothing need listen there
        monkeypatch.setenv("RAY_ADDRESS", "ray://127.0.0.1:10001")
    elif env == "closed-port":
        monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{free_port()}")
    elif env == "no-such-interface":
        monkeypatch.setenv("GLOO_SOCKET_IFNAME", "nosuch0")
    elif env and "=" in env:
        monkeypatch.setenv(*env.split("=", 1))
    elif env == "two-cores":
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    elif env == "no-ray-command":  # none beside this Python or on PATH, and a local Ray to start
        monkeypatch.setattr(ray_cluster, "starts_own_ray", lambda: True)
        monkeypatch.setattr(sys, "executable", str(ws / "python"))
        monkeypatch.setenv("PATH", str(ws))
    elif env == "fake-gpus":  # the GPU check passes; what --use-gpu asks beyond it is checked
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    elif env == "pip-toolkit":  # a toolkit as the package index lays it out, one wheel short, for the GPU build
        monkeypatch.setenv("CUDA_HOME", str(ws / "cu13"))
        monkeypatch.setenv("HOROVOD_BUILD_CUDA_CC_LIST", "90")
    elif env == "no-horovodrun":
        found = launch.executable
        monkeypatch.setattr(launch, "executable", lambda name: None if name == "horovodrun" else found(name))
    elif env == "no-recorded-cluster":  # whatever other tests left in /tmp/ray: this run would start its own Ray
        monkeypatch.setattr(ray_cluster, "starts_own_ray", lambda: True)
    elif env == "stale-record":  # a `ray start` cluster recorded where ray.init looks, and gone since
        ray_tmp = tmp_path_factory.mktemp("tmp")
        write_file(ray_tmp / "ray" / "ray_current_cluster", f"127.0.0.1:{free_port()}".encode())
        monkeypatch.setenv("RAY_TMPDIR", str(ray_tmp))
    elif env in ("auto-private", "auto-nothing"):  # RAY_ADDRESS=auto, nothing recorded
        monkeypatch.setenv("RAY_ADDRESS", "auto")
        monkeypatch.setenv("RAY_TMPDIR", str(tmp_path_factory.mktemp("tmp")))
        rays = {"127.0.0.1:6": False} if env == "auto-private" else {}
        monkeypatch.setattr(own_ray, "local_rays", lambda: rays)
    elif env == "read-only-home":  # where a local start writes Ray's token: a real read-only mount (as root)
        read_only_home(ws / "home", monkeypatch, request)
    argv = [arg.replace("{ws}", str(ws)) for arg in argv]
    if not entry.startswith("tools/") and (entry != "ray_jobs.compare" or "--render" not in argv):
        argv += ["--data-dir", str(ws / "data")] if "--data-dir" not in argv else []
    assert_refused(entry, argv, needle.replace("{ws}", str(ws)), ws, monkeypatch, capsys)


def read_only_home(home: Path, monkeypatch, request) -> None:
    """HOME on a read-only filesystem, no Ray token anywhere else, and no cluster to join: a local start's case."""
    home.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=16k", "tmpfs", str(home)], check=True)
    request.addfinalizer(lambda: subprocess.run(["umount", str(home)], check=True))
    monkeypatch.setenv("HOME", str(home))
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(ray_cluster, "starts_own_ray", lambda: True)


def test_asking_for_the_token_leaves_ray_s_token_cache_as_it_was(tmp_path, monkeypatch, request):
    """check_token_folder asks Ray's token loader, which keeps what it read for the process's life: kept, every later
    run of the test process on the suite's cluster (no authentication) failed, its actors never run."""
    from ray._private.authentication.authentication_token_setup import AuthenticationTokenLoader

    write_file(tmp_path / ".ray" / "auth_token", b"a" * 32)
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    loader = AuthenticationTokenLoader.instance()
    loader.reset_cache()
    request.addfinalizer(loader.reset_cache)
    own_ray.check_token_folder()
    (tmp_path / ".ray" / "auth_token").unlink()
    assert not loader.has_token(ignore_auth_mode=True)  # read again, not kept from the check


def assert_refused_once_under(result, needle: str) -> None:
    """Under a launcher: our line exactly once (rank 0's), and no traceback through our code. The launcher's own
    traceback after it (torchrun, horovodrun) is theirs; docs/right-or-refused.md says so."""
    output = result.stdout + result.stderr
    errors = [line for line in output.splitlines() if "error: " in line and "ChildFailedError" not in line]
    assert result.returncode != 0
    assert len(errors) == 1 and needle in errors[0], output[-3000:]
    ours = [line for line in output.splitlines() if line.strip().startswith("File ")
            and any(f"/{package}/" in line for package in ("workload", "native_ddp", "horovod_ddp", "ray_jobs"))]
    assert not ours, output[-3000:]


@pytest.fixture
def as_rank_1(monkeypatch):
    """This process as torchrun's rank 1 of its last attempt; the SIGTERM and Ctrl-C handlers restored after."""
    for name, value in {"TORCHELASTIC_RUN_ID": "test", "RANK": "1", "TORCHELASTIC_MAX_RESTARTS": "0"}.items():
        monkeypatch.setenv(name, value)
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    monkeypatch.setattr(signals, "exit_now", lambda code: sys.exit(code))
    yield
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


def test_a_rank_above_0_leaves_a_refusal_to_rank_0_and_ends_quietly_when_its_launcher_ends_it(as_rank_1, monkeypatch,
                                                                                              capsys):
    """torchrun and horovodrun end the other ranks once one has exited: rank 1 refusing first had rank 0 ended before
    its line (exit -15, no line at all). Rank 1 waits for that SIGTERM, sent once rank 0 has said it and exited."""
    sleep, waited = time.sleep, []

    def launcher_ends_it(seconds: float) -> None:
        waited.append(seconds)
        os.kill(os.getpid(), signal.SIGTERM)
        sleep(seconds)

    monkeypatch.setattr(cli, "time", SimpleNamespace(monotonic=time.monotonic, sleep=launcher_ends_it))
    with pytest.raises(SystemExit) as ended:
        cli.fail_unless_restarted("--lr must be a finite number", 2)
    assert waited and ended.value.code == 2 and capsys.readouterr().err == ""


def test_a_rank_above_0_says_a_refusal_rank_0_never_made(as_rank_1, monkeypatch, capsys):
    monkeypatch.setattr(cli, "RANK_0_LINE_WAIT_S", 0.3)
    with pytest.raises(SystemExit) as ended:
        cli.fail_unless_restarted("a refusal of rank 1's own", 2)
    assert ended.value.code == 2 and capsys.readouterr().err == "error: a refusal of rank 1's own\n"


@pytest.mark.cluster
def test_under_torchrun_a_bad_flag_is_one_line(tmp_path):
    result = run_command([str(BIN / "torchrun"), "--nproc-per-node", "2", "-m", "native_ddp.train", "--lr", "inf",
                          "--output-dir", str(tmp_path / "out")], timeout=120)
    assert_refused_once_under(result, "--lr must be a finite number")
    assert not (tmp_path / "out").exists()


@pytest.mark.cluster
def test_torchrun_restarts_say_a_repeated_failure_once(base_cfg, tmp_path):
    # torchrun restarts every failed attempt (here twice): the last attempt, which it does not restart, says it. A
    # divergence takes the same path (runtime/cli.py), only later in each attempt.
    result = run_command([str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", "--max-restarts", "2",
                          "-m", "native_ddp.train", *data_flags(base_cfg), "--output-dir", str(tmp_path / "out"),
                          "--lr", "1e308"], env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}, timeout=240)
    assert_refused_once_under(result, "--lr must be at most")
    assert result.stderr.count("failed (exitcode: ") >= 3  # three attempts, not one
    assert not (tmp_path / "out" / "results.json").exists()


@pytest.mark.cluster
def test_under_horovodrun_a_refusal_after_start_ends_every_rank_in_one_line(tmp_path):
    # 1000 digits over 2 ranks is 5 steps, no more than the warm-up of 6 asked for: known only once horovodrun has
    # said 2 (a default warm-up would shrink to half the epoch).
    result = run_module("horovod_ddp.train", *SYNTHETIC, "--synthetic-train-size", "1000", "--warmup-steps", "6",
                        "--data-dir",
                        str(tmp_path / "data"), "--output-dir", str(tmp_path / "out"),
                        launcher=(str(BIN / "horovodrun"), "-np", "2", "--gloo"), timeout=120)
    assert_refused_once_under(result, "an epoch is 5 step(s)")
    assert not (tmp_path / "out").exists() and not (tmp_path / "data").exists()


@pytest.mark.cluster
def test_under_horovodrun_a_checkpoint_of_another_run_is_refused_by_every_rank(tmp_path):
    write_checkpoint(tmp_path / "ckpt", backend="horovod", launcher="horovodrun", workers=2,
                     synthetic_train_size=2000)
    result = run_module("horovod_ddp.train", *SYNTHETIC, "--synthetic-train-size", "2000", "--data-dir",
                        str(tmp_path / "data"), "--output-dir", str(tmp_path / "out"), "--checkpoint-dir",
                        str(tmp_path / "ckpt"), "--epochs", "3", "--lr", "0.5",
                        launcher=(str(BIN / "horovodrun"), "-np", "2", "--gloo"), timeout=120)
    assert_refused_once_under(result, "--lr 0.01 -> 0.5")
    assert not (tmp_path / "out").exists() and not (tmp_path / "data").exists()


def test_a_local_ray_that_does_not_start_is_one_line_exit_1_and_leaves_no_folder(ws, monkeypatch, capsys):
    """`ray start` that gives up (its raylet not registering within 30 s, as on a loaded 2-core machine): one line,
    not ray.init's bare Exception."""
    import ray

    made = []
    real = own_ray.OwnRay.__init__

    def recorded(self, *args, **kwargs):
        real(self, *args, **kwargs)
        made.append(self.folder)

    fails = ws / "ray"
    # Ray's INFO line after its error: the line named it, not the error.
    fails.write_text("#!/bin/sh\necho 'RuntimeError: The current node timed out during startup.'\n"
                     "echo 'Local node IP: 127.0.0.1'\nexit 1\n")
    fails.chmod(0o755)
    monkeypatch.setattr(own_ray, "program", lambda: str(fails))
    monkeypatch.setattr(own_ray.OwnRay, "__init__", recorded)
    monkeypatch.setattr(ray_cluster, "starts_own_ray", lambda: True)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # what the start sets for its own Ray goes with the test
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # whether or not this process joined the test cluster
    # The start cut short is shut down; the real shutdown would drop this process's link to the test cluster.
    shutdowns = []
    monkeypatch.setattr(ray, "shutdown", lambda: shutdowns.append(True))
    monkeypatch.setattr(ray_cluster.worker_output, "route", lambda path: None)  # process-wide: not in this process
    monkeypatch.setattr(sys, "argv", ["ray_jobs.train", *SYNTHETIC, "--data-dir", str(ws / "data"), "--output-dir",
                                      str(ws / "out")])
    with pytest.raises(SystemExit) as exited:
        cli.run(ENTRY_POINTS["ray_jobs.train"])
    err = capsys.readouterr().err
    assert exited.value.code == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("error: the local Ray did not start (`ray start` said: RuntimeError: The current node timed "
                          "out during startup.)")
    assert not made[0].exists() and shutdowns == [True]


def test_a_working_directory_removed_under_the_shell_is_one_line(tmp_path):
    """Seen: Intel oneMKL's "FATAL ERROR: Cannot load libtorch_cpu.so", exit 2 and nothing else, once data was made."""
    gone = tmp_path / "gone"
    gone.mkdir()
    code = f"import os, runpy, sys; os.chdir({str(gone)!r}); os.rmdir({str(gone)!r}); " \
           f"sys.argv = ['ray_jobs.train', '--output-dir', {str(tmp_path / 'out')!r}, '--data-dir', " \
           f"{str(tmp_path / 'data')!r}]; runpy.run_module('ray_jobs.train', run_name='__main__')"
    done = run_command([sys.executable, "-c", code])
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr == ("error: the working directory no longer exists (it was removed after this shell entered "
                           "it); cd into an existing folder and run the command again\n")
    assert not (tmp_path / "out").exists() and not (tmp_path / "data").exists()


@pytest.mark.cluster
@pytest.mark.parametrize("script, extra, code, says", [
    ("", [], 2, "is not a file, or an empty one"),
    ("print('a benchmark of something else')\n", [], 1,
     "printed no 'Iter #N: … img/sec per' line, so it measured nothing"),
    ("print('no image shape here')\n", ["--image-size", "32"], 2,
     "does not hold its image shape `224, 224` once, so it cannot be resized; run at --image-size 224"),
    ("print('a benchmark')\n", ["--backends", "horovod,mpi"], 2, "--backends takes horovod, native or horovod,native"),
])
def test_framework_benchmarks_given_another_script_is_one_line(tmp_path, script, extra, code, says):
    """An empty benchmark script was a traceback (StatisticsError), and so was one that printed no rate."""
    (tmp_path / "bench.py").write_text(script)
    done = run_command([sys.executable, "tools/framework_benchmarks.py", "--horovod-benchmark",
                        str(tmp_path / "bench.py"), "--models", "resnet18", "--rounds", "1", "--output-dir",
                        str(tmp_path / "out"), *extra],
                       env={"PYTHONPATH": str(REPO)})
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == code and len(lines) == 1 and says in lines[0], done.stderr[-2000:]

import pytest

from contract.config import ConfigError, TrainConfig


@pytest.mark.parametrize("bad", [
    {"epochs": 0}, {"batch_size": -1}, {"workers": 0}, {"lr": 0.0}, {"lr": -0.1}, {"momentum": 1.0},
    {"dataset": "cifar"}, {"compression": "int8"}, {"grad_accumulation": 3}, {"amp": "fp8"}, {"amp": "fp16"}, {"bucket_mb": -1.0},
    {"cycle_time_ms": float("nan")}, {"warmup_steps": -1},
    {"threads_per_worker": 0}, {"lr": float("inf")}, {"lr": float("nan")}, {"momentum": float("nan")},
    {"stall_timeout_s": float("nan")}, {"stall_timeout_s": float("inf")},
])
def test_invalid_values_are_rejected_on_construction(bad):
    with pytest.raises(ConfigError):
        TrainConfig(**bad)


def test_defaults_are_the_tutorials():
    cfg = TrainConfig()
    assert (cfg.batch_size, cfg.dataset, cfg.data_dir, cfg.scale_lr) == (100, "auto", "./data", False)


def test_round_trips_through_a_plain_dict_as_ray_passes_it():
    cfg = TrainConfig(epochs=3, lr=0.05, dataset="synthetic")
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg


def test_paths_are_made_absolute_for_workers_in_other_directories(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = TrainConfig(data_dir="d", output_dir="o").with_absolute_paths()
    assert (cfg.data_dir, cfg.output_dir, cfg.checkpoint_dir) == (str(tmp_path / "d"), str(tmp_path / "o"), "")


def test_a_placement_strategy_is_one_of_ray_s_and_only_ray_s_launchers_take_it(monkeypatch):
    import sys
    import types

    from cluster.ray_cluster import executor_hosts
    from launchers import arms
    from native_ddp.train import parser as torchrun_parser

    with pytest.raises(ConfigError, match=r"^--placement-strategy must be one of PACK, SPREAD, STRICT_PACK \(Ray's "
                                          r"placement strategies\), got 'EVERYWHERE'$"):
        TrainConfig(placement_strategy="EVERYWHERE")
    cfg = TrainConfig(placement_strategy="STRICT_PACK", workers=2)
    assert cfg.to_dict()["placement_strategy"] == "STRICT_PACK"  # results.json's config records it
    ray_arm, torchrun_arm = (arms.Arm("native", launcher) for launcher in ("ray", "torchrun"))
    assert "--placement-strategy" in arms.command(ray_arm, cfg)
    assert "--placement-strategy" not in " ".join(map(str, arms.command(torchrun_arm, cfg)))
    assert "placement_strategy" not in vars(torchrun_parser().parse_args([]))
    # Horovod's RayExecutor, its own way: a placement group of PACK, one host, or an equal share on every node
    nodes = [{"Alive": True, "Resources": {"CPU": 8.0}}] * 2 + [{"Alive": False, "Resources": {"CPU": 8.0}}]
    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(nodes=lambda: nodes))
    assert executor_hosts(16, False, "PACK") == {"num_workers": 16}
    assert executor_hosts(16, False, "STRICT_PACK") == {"num_hosts": 1, "num_workers_per_host": 16}
    assert executor_hosts(16, False, "SPREAD") == {"num_hosts": 2, "num_workers_per_host": 8}
    assert executor_hosts(1, False, "SPREAD") == {"num_hosts": 1, "num_workers_per_host": 1}
    with pytest.raises(ConfigError, match="--workers 3 does not divide over the 2 nodes with CPUs here"):
        executor_hosts(3, False, "SPREAD")

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

"""The frameworks' settings from the environment (contract/framework_env.py): recorded where they are the user's,
refused where this project sets them from a flag, and a resume under other ones refused."""

import os
from dataclasses import replace

import pytest

from contract import framework_env, results
from contract.comparison import CompareConfig
from contract.config import ConfigError, TrainConfig
from ray_jobs import resume


def test_the_settings_in_force_leave_out_the_launchers_wiring_and_the_build():
    environ = {"HOROVOD_HIERARCHICAL_ALLREDUCE": "1", "HOROVOD_CACHE_CAPACITY": "0", "NCCL_ALGO": "Ring",
               "TORCH_NCCL_BLOCKING_WAIT": "1", "OMP_NUM_THREADS": "4", "GLOO_SOCKET_IFNAME": "eth0",
               "HOROVOD_RANK": "1", "HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.1", "HOROVOD_CONTROLLER": "gloo",
               "HOROVOD_BUILD_CUDA_CC_LIST": "90", "HOROVOD_WITH_PYTORCH": "1", "PATH": "/bin"}
    found = framework_env.in_force(environ)
    assert found == {"GLOO_SOCKET_IFNAME": "eth0", "HOROVOD_CACHE_CAPACITY": "0",
                     "HOROVOD_HIERARCHICAL_ALLREDUCE": "1", "NCCL_ALGO": "Ring", "OMP_NUM_THREADS": "4",
                     "TORCH_NCCL_BLOCKING_WAIT": "1"}
    assert framework_env.words({"HOROVOD_CACHE_CAPACITY": "0", "NCCL_ALGO": "Ring"}) == (
        "`HOROVOD_CACHE_CAPACITY=0` (Horovod only), `NCCL_ALGO=Ring` (both)")
    assert framework_env.words({}) == "none"


def test_a_setting_the_flags_make_passes_where_it_is_the_flag_s_own_value():
    cfg = TrainConfig(cycle_time_ms=200.0, bucket_mb=25.0)
    framework_env.check({"HOROVOD_CYCLE_TIME": "200", "HOROVOD_FUSION_THRESHOLD": str(25 * 2 ** 20)}, cfg)
    with pytest.raises(ConfigError, match=r"HOROVOD_FUSION_THRESHOLD=1048576 is exported here.*pass --bucket-mb 1 "):
        framework_env.check({"HOROVOD_FUSION_THRESHOLD": "1048576"}, TrainConfig())
    with pytest.raises(ConfigError, match="HOROVOD_TIMELINE=/tmp/t.json is exported here.*pass --trace$"):
        framework_env.check({"HOROVOD_TIMELINE": "/tmp/t.json"}, TrainConfig())


def test_every_run_records_the_settings_its_environment_had_with_the_backend_each_reaches(monkeypatch):
    for name, value in (("HOROVOD_HIERARCHICAL_ALLREDUCE", "1"), ("MKL_NUM_THREADS", "1"), ("GLOO_SOCKET_IFNAME", "lo")):
        monkeypatch.setenv(name, value)
    found = results.environment()
    assert found["framework_settings"]["HOROVOD_HIERARCHICAL_ALLREDUCE"] == "1"
    assert {name: found["framework_settings_reach"][name] for name in ("HOROVOD_HIERARCHICAL_ALLREDUCE",
            "MKL_NUM_THREADS", "GLOO_SOCKET_IFNAME")} == {"HOROVOD_HIERARCHICAL_ALLREDUCE": "Horovod only",
                                                          "MKL_NUM_THREADS": "both", "GLOO_SOCKET_IFNAME": "DDP only"}


def test_a_resume_under_other_framework_settings_is_refused(tmp_path, monkeypatch):
    base, cmp = TrainConfig(), CompareConfig()
    resume.write_plan(tmp_path, resume.request(base, cmp))
    monkeypatch.setenv("HOROVOD_HIERARCHICAL_ALLREDUCE", "1")
    with pytest.raises(ConfigError, match=r"HOROVOD_HIERARCHICAL_ALLREDUCE=\(unset\) -> 1 in the environment"):
        resume.check(tmp_path, resume.request(replace(base), cmp))


def test_horovod_on_ray_runs_with_the_exported_nccl_interface_not_the_one_its_executor_detected(monkeypatch):
    from horovod_ddp import worker
    from launchers import ray_executor

    seen = {}
    monkeypatch.setattr(worker, "run_rank", lambda *args: seen.setdefault("nic", framework_env.interfaces(os.environ)))
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "lo")  # what RayExecutor's detect_nics set on the worker
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    worker.ray_worker(TrainConfig().to_dict(), 0, {"NCCL_SOCKET_IFNAME": "ib0"})
    assert seen["nic"]["NCCL_SOCKET_IFNAME"] == "ib0"

    class Executor:  # records what the driver hands every worker
        def __init__(self, *args, **kwargs):
            pass

        @staticmethod
        def create_settings(**kwargs):
            return kwargs

        def run(self, fn, args):
            seen["args"] = args
            return [{"done": True}]

        def shutdown(self):
            pass

    import horovod.ray

    monkeypatch.setattr(horovod.ray, "RayExecutor", Executor)
    monkeypatch.setattr(ray_executor, "start_bounded", lambda *args: None)
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib0")
    ray_executor.run(TrainConfig(), ray_executor.RayRunOptions())
    assert seen["args"][2] == {"NCCL_SOCKET_IFNAME": "ib0"}


def test_the_report_names_each_arm_s_interfaces():
    from analysis import report

    ran = [{"arm": "native", "launcher": "ray", "status": "ok", "interfaces": {}},
           {"arm": "horovod", "launcher": "ray", "status": "ok",
            "interfaces": {"HOROVOD_GLOO_IFACE": "eth0", "NCCL_SOCKET_IFNAME": "ib0"}}]
    assert report.interfaces_line({"runs": ran}) == (
        "Interfaces named in each arm's rank 0: native: none (each library's own choice); horovod: "
        "`HOROVOD_GLOO_IFACE=eth0`, `NCCL_SOCKET_IFNAME=ib0`.")
    assert report.interfaces_line({"runs": ran[:1]}) is None


def test_the_torch_openmp_and_mkl_settings_are_recorded_with_the_backend_each_reaches():
    """Seen: MKL_NUM_THREADS=1 in force for both backends, and the report said "none"."""
    found = framework_env.in_force({"MKL_NUM_THREADS": "1", "OMP_PROC_BIND": "close", "TORCH_CPP_LOG_LEVEL": "INFO",
                                    "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "TORCHELASTIC_RUN_ID": "x"})
    assert found == {"MKL_NUM_THREADS": "1", "OMP_PROC_BIND": "close", "TORCH_CPP_LOG_LEVEL": "INFO"}
    assert framework_env.words({**found, "TORCH_NCCL_BLOCKING_WAIT": "1"}) == (
        "`MKL_NUM_THREADS=1` (both), `OMP_PROC_BIND=close` (both), `TORCH_CPP_LOG_LEVEL=INFO` (both), "
        "`TORCH_NCCL_BLOCKING_WAIT=1` (DDP only)")


@pytest.mark.parametrize("value, refused", [("DETAIL", True), ("info", True), ("OFF", False)])
def test_torch_distributed_debug_is_refused_unless_off(value, refused):
    if refused:
        with pytest.raises(ConfigError, match=f"TORCH_DISTRIBUTED_DEBUG={value} is exported here: .*; unset it$"):
            framework_env.check({"TORCH_DISTRIBUTED_DEBUG": value}, TrainConfig(), horovod=False)
    else:
        framework_env.check({"TORCH_DISTRIBUTED_DEBUG": value}, TrainConfig())


@pytest.mark.parametrize("export, flags", [("HOROVOD_CYCLE_TIME=5", {"cycle_time_ms": 5.0}),
                                           (f"HOROVOD_FUSION_THRESHOLD={8 * 2 ** 20}", {"bucket_mb": 8.0})])
def test_an_export_that_matches_its_flag_passes_the_checks_of_every_arm_s_own_command(export, flags, tmp_path,
                                                                                     monkeypatch, capsys):
    """Seen: HOROVOD_CYCLE_TIME=5 with --cycle-time-ms 5.0 passed the driver's check, and the DDP arm, whose flags have
    no cycle time, refused it minutes in: the comparison exited 1, "native/torchrun did not finish"."""
    import sys

    import horovod_ddp.worker
    import native_ddp.worker
    from launchers import arms
    from ray_jobs import orchestrator
    from runtime import cli, preflight
    from tests.helpers import ENTRY_POINTS

    monkeypatch.setenv(*export.split("="))
    monkeypatch.setenv("LOCAL_RANK", "0")
    base = TrainConfig(dataset="synthetic", data_dir=str(tmp_path / "data"), **flags)
    preflight.check_config(replace(base, output_dir=str(tmp_path)))  # the comparison's own, where it starts
    for module in (native_ddp.worker, horovod_ddp.worker):  # the checks passed: the ranks would start here
        monkeypatch.setattr(module, "run_launched" if module is native_ddp.worker else "run_horovodrun",
                            lambda *args: 0)
    for arm in orchestrator.planned_arms(CompareConfig(launchers="torchrun,horovodrun")):
        cfg = replace(orchestrator.arm_config(arm, 2, base), output_dir=str(tmp_path / arm.label.replace("/", "-")))
        command = arms.command(arm, cfg)
        module = command[command.index("-m") + 1]
        monkeypatch.setattr(sys, "argv", [module, *command[command.index("-m") + 2:]])
        with pytest.raises(SystemExit) as done:
            cli.run(ENTRY_POINTS[module])
        assert done.value.code == 0, (arm.label, capsys.readouterr().err)

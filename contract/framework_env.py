"""The frameworks' settings that come from the environment rather than from code, all in one place: which of them a
run had in force, which of them this project sets from its own flags (so that a user's export cannot change one backend
while the report names the flag's value), and which one backend cannot take as it is compared.

Horovod reads its tuning at hvd.init() from HOROVOD_* variables, NCCL and gloo read NCCL_* and GLOO_*, torch TORCH_*
(its process group TORCH_NCCL_* and TORCH_DISTRIBUTED_*), OpenMP OMP_* and Intel's MKL MKL_*. The launchers add their
own (ranks, rendezvous, the interface found): those are how a run is wired, not how it computes, and are left out, as
are the variables that only a build reads.
"""

import re
from collections.abc import Mapping

from contract import options
from contract.config import ConfigError, TrainConfig

PREFIXES = ("HOROVOD_", "NCCL_", "GLOO_", "TORCH_", "OMP_", "MKL_")
WIRING = re.compile(r"TORCH_DISABLE_SHARE_RDZV_TCP_STORE|TORCH_CUDA_ARCH_LIST|"
                    r"HOROVOD_(RANK|SIZE|LOCAL_RANK|LOCAL_SIZE|CROSS_RANK|CROSS_SIZE|HOSTNAME|HOSTS|CONTROLLER|"
                    r"CPU_OPERATIONS|GLOO_RENDEZVOUS_ADDR|GLOO_RENDEZVOUS_PORT|GLOO_IFACE|ELASTIC|SECRET_KEY|"
                    r"SDIST|BUILD_.*|WITH_.*|WITHOUT_.*|GPU_.*|GPU|NCCL_HOME|NCCL_INCLUDE|NCCL_LIB|NCCL_LINK|"
                    r"CUDA_HOME|CUDA_INCLUDE|CUDA_LIB|CMAKE|MPI_THREADS_DISABLE)")
"""Set by torchrun's arm, horovodrun, Ray's Horovod executor or this project's workers to wire the ranks; or read only
by a build."""
INTERFACES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "HOROVOD_GLOO_IFACE")
"""The network interfaces named for DDP's gloo, for NCCL (both backends on GPUs) and for Horovod's gloo."""
KEPT_ON_RAY = ("NCCL_SOCKET_IFNAME",)
"""Exported where Horovod's Ray executor starts, and set by it on every worker to the interfaces it detected: the
export is put back on the workers (horovod_ddp/worker.py), so that the user's interface is the one in force."""
FLAGS = {"HOROVOD_FUSION_THRESHOLD": "--bucket-mb", "HOROVOD_CYCLE_TIME": "--cycle-time-ms",
         "HOROVOD_AUTOTUNE": "--autotune", "HOROVOD_AUTOTUNE_LOG": "--autotune", "HOROVOD_TIMELINE": "--trace"}
"""The variables this project sets from a flag of its own (contract/options.py: horovod_env), for both backends
where the framework has the knob (--bucket-mb is DDP's bucket_cap_mb too)."""
REFUSED = {"TORCH_DISTRIBUTED_DEBUG": "it has DDP's process group check and log every collective, which Horovod's "
                                      "are not, so the two would not be timed alike (DETAIL ended both DDP ranks with "
                                      "SIGSEGV under torchrun)"}
"""Settings one backend cannot take as the comparison runs it, with why: refused unless OFF, torch's default."""


def in_force(environ: Mapping[str, str]) -> dict[str, str]:
    """The frameworks' settings in `environ`, wiring left out, by name."""
    return {name: environ[name] for name in sorted(environ) if name.startswith(PREFIXES) and not WIRING.fullmatch(name)}


def applies_to(name: str) -> str:
    """Which backend a setting reaches: Horovod's own, torch's (DDP's), or the libraries both use."""
    if name.startswith("HOROVOD_"):
        return "Horovod only"
    if name.startswith(("TORCH_NCCL_", "TORCH_DISTRIBUTED_", "GLOO_")):
        return "DDP only"  # Horovod's gloo reads HOROVOD_GLOO_*, and its NCCL no TORCH_NCCL_*
    return "both"


def words(settings: Mapping[str, str]) -> str:
    """The settings for a report, each with the backend it reaches; "none" where there are none."""
    return ", ".join(f"`{name}={value}` ({applies_to(name)})" for name, value in settings.items()) or "none"


def check(environ: Mapping[str, str], cfg: TrainConfig, horovod: bool = True) -> None:
    """Refuse, in one line, a setting one backend cannot take (REFUSED); and where Horovod runs (`horovod`), a variable
    this project sets from a flag, exported with another value than the flag's: Horovod would run with it while the
    report names the flag's. A DDP rank reads none of them, and neither a comparison's DDP arm nor its ceiling (which
    averages nothing) has Horovod's flags: those are checked where the comparison starts."""
    for name, why in REFUSED.items():
        if environ.get(name, "OFF").upper() != "OFF":
            raise ConfigError(f"{name}={environ[name]} is exported here: {why}; unset it")
    if not horovod or cfg.no_averaging:
        return
    ours = options.horovod_env(cfg, cfg.output_dir)
    for name, flag in FLAGS.items():
        if name in environ and environ[name] != ours.get(name):
            raise ConfigError(f"{name}={environ[name]} is exported here, and this project sets {name} from {flag} "
                              f"(Horovod would run with yours while the report names {flag}'s value); unset it and "
                              f"pass {flag}{_value(name, environ[name])}")


def _value(name: str, value: str) -> str:
    """The flag's value that asks for what the export did, where one can be read from it."""
    try:
        number = float(value)
    except ValueError:
        return ""
    if name == "HOROVOD_FUSION_THRESHOLD":  # 0 turns Horovod's fusion off, which no DDP bucket size matches
        return f" {number / 2 ** 20:g} (for DDP's buckets and Horovod's fusion alike)" if number > 0 else ""
    if name == "HOROVOD_CYCLE_TIME":
        return f" {number:g}"
    return ""


def interfaces(environ: Mapping[str, str]) -> dict[str, str]:
    """The interfaces named in `environ`, by variable."""
    return {name: environ[name] for name in INTERFACES if name in environ}


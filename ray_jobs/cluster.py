"""Joining a Ray cluster, and refusing work it cannot place, before anything starts."""

import logging
import os
import socket
from dataclasses import dataclass

from workload.config import ConfigError

log = logging.getLogger(__name__)
CONNECT_TIMEOUT_S = 10


@dataclass(frozen=True, slots=True)
class RayRunOptions:
    name: str | None = None
    """Run name; rerunning with the same name and storage path resumes from its last checkpoint."""
    storage_path: str | None = None
    """Where Ray keeps run state and checkpoints (Ray's default: ~/ray_results)."""
    max_failures: int = 0
    """Restarts from the last checkpoint after a worker failure (Ray's FailureConfig)."""

    def __post_init__(self) -> None:
        if self.max_failures < 0:
            raise ConfigError(f"--max-failures must be >= 0, got {self.max_failures}")


def connect() -> None:
    """Join RAY_ADDRESS (set inside `ray job submit`), else a `ray start` cluster on this machine, else start one."""
    import ray

    if ray.is_initialized():
        return
    address = os.environ.get("RAY_ADDRESS", "")
    if address and address not in ("auto", "local"):
        _check_reachable(address)
    try:
        ray.init(log_to_driver=True)
    except ConnectionError as error:
        # Seen with Ray 2.60: `ray start` turns token authentication on when ~/.ray/auth_token exists, and a
        # client in the default mode then cannot join.
        raise ConfigError(
            f"could not join the Ray cluster ({' '.join(str(error).split())}); if it uses token authentication, "
            "export RAY_AUTH_MODE=token (Ray reads the token from ~/.ray/auth_token)"
        ) from None


def _check_reachable(address: str) -> None:
    """ray.init() retries an unreachable address for minutes; a TCP probe says so in seconds."""
    hostport = address.split("://", 1)[-1].split("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"RAY_ADDRESS={address!r} is not host:port; unset it to start a local Ray")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as error:
        raise ConfigError(
            f"cannot reach the Ray cluster at RAY_ADDRESS={address} ({error}); "
            "start it with `ray start --head` or unset RAY_ADDRESS to run on a local Ray"
        ) from None


def require(workers: int, use_gpu: bool) -> None:
    """Fail now, rather than wait forever for resources, when the cluster cannot hold `workers` workers."""
    import ray

    resources = ray.cluster_resources()
    kind = "GPU" if use_gpu else "CPU"
    have = int(resources.get(kind, 0))
    if workers > have:
        raise ConfigError(
            f"--workers {workers} needs {workers} {kind}s but the Ray cluster has {have}; "
            f"lower --workers or add nodes{' (or drop --use-gpu)' if use_gpu else ''}"
        )

"""Joining a Ray cluster, or starting one of the command's own (cluster/own_ray.py), and refusing work it cannot
place, before anything starts."""

import atexit
import contextlib
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from cluster import own_ray, ray_address, ray_lost, worker_output
from contract.config import ConfigError
from contract.errors import RunFailed
from runtime import signals
from workload import faults

log = logging.getLogger(__name__)
# Read by Ray when it is imported: the driver's core worker would install a C++ handler for SIGTERM over ours (a
# stack dump and exit 134). Not passed to a Ray of the command's own, whose processes keep Ray's handlers.
FAILURE_HANDLER = "RAY_DISABLE_FAILURE_SIGNAL_HANDLER"
os.environ.setdefault(FAILURE_HANDLER, "1")


def connect(log_file: Path, address: str | None) -> None:
    """Join RAY_ADDRESS (set inside `ray job submit`), else a `ray start` cluster on this machine, else start a Ray of
    this command's own; `address`: what check_address() decided before anything started.

    Ray's and Horovod's own lines go to `log_file`, the project's to the output (cluster/worker_output.py)."""
    own = starts_own_ray()
    if own:
        # Ray's secure default for a cluster started with `ray start`: token authentication, unless this environment
        # turned it off; read by Ray when it is imported, just below.
        os.environ.setdefault("RAY_AUTH_MODE", "token")
    import ray

    worker_output.route(log_file)
    if ray.is_initialized():
        worker_output.take_over()
        return
    # Ray starts workers from its raylet, not from this driver: the test-only fault variable must be passed on.
    env_vars = {faults.ENV: os.environ[faults.ENV]} if os.environ.get(faults.ENV) else {}
    if own:
        address, actors = _start_own(env_vars), {}
    else:
        actors = {"RAY_ADDRESS": gcs} if (gcs := address or _recorded_or_given()) else {}
    try:
        _init(ray, address, {**env_vars, **actors})
    except ConnectionError as error:
        message = " ".join(str(error).split())
        # Ray 2.60: `ray start` turns token authentication on when ~/.ray/auth_token exists, and a
        # client in the default mode then cannot join. Only a failure that says so is blamed on it.
        hint = ("export RAY_AUTH_MODE=token (Ray reads the token from ~/.ray/auth_token)" if "auth" in message.lower()
                else "check that RAY_ADDRESS names the head node's GCS port (`ray status` there shows it)")
        raise ConfigError(f"could not join the Ray cluster ({message[:300]}); {hint}") from None
    ray_lost.watch(ray.get_runtime_context().gcs_address, "the Ray this command started" if own else "the Ray cluster",
                   ray.is_initialized)
    worker_output.take_over()


def _init(ray: object, address: str | None, env_vars: dict[str, str]) -> None:
    """ray.init in a thread of its own (in_thread): Ray installs its SIGTERM handler (exit 15, no line) only from the
    main thread."""
    in_thread(lambda: ray.init(address, log_to_driver=True, runtime_env={"env_vars": env_vars} if env_vars else None),
              "ray-init")


def in_thread(call: Callable[[], object], name: str, bound_s: float | None = None) -> bool:
    """`call()` in a thread of its own, this one waiting in Python, where a signal reaches the command's own handlers
    at once (not in C++, as ray.init and RayExecutor's start wait); whether it returned within `bound_s` (None: however
    long it takes). What it raised is raised here."""
    failed: list[BaseException] = []

    def target() -> None:
        try:
            call()
        except BaseException as error:  # noqa: BLE001 - handed to the waiting thread, which raises it
            failed.append(error)

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    deadline = time.monotonic() + (math.inf if bound_s is None else bound_s)
    while thread.is_alive() and time.monotonic() < deadline:
        thread.join(0.1)
    if failed:
        raise failed[0]
    return not thread.is_alive()


def _start_own(env_vars: dict[str, str]) -> str:
    """A Ray for this command alone (cluster/own_ray.py), in this driver's authentication mode (see connect), with a
    token written where there is none; its address. Its actors get its dashboard for Ray's state API (see
    _recorded_or_given)."""
    own_ray.check_token_folder()
    if own_ray.makes_token():
        import subprocess

        made = subprocess.run([own_ray.program(), "get-auth-token", "--generate"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if made.returncode:
            last = (made.stderr.strip().splitlines() or ["no output"])[-1]
            raise RunFailed(f"`ray get-auth-token --generate` failed ({last[:200]}); write a token to "
                            f"{own_ray.token_path()} or join a cluster with RAY_ADDRESS")
    with signals.held():  # its stop at exit registered as it starts: a Ctrl-C between would leave it to the pipe
        own = own_ray.OwnRay(env={FAILURE_HANDLER: "0"})
        atexit.register(_stop_own, own)
    try:
        own.wait_started()
    except RunFailed:
        atexit.unregister(_stop_own)
        _stop_own(own)
        raise
    env_vars["RAY_API_SERVER_ADDRESS"] = own.dashboard
    return own.address


def _stop_own(own: own_ray.OwnRay) -> None:
    """At exit: nothing of the command's own Ray is kept. A command a signal ends does not wait for ray.shutdown(),
    and skips the interpreter's teardown with Ray connected (exit 139)."""
    if signals.ending():
        own.stop()
        signals.exit_now(signals.exit_code())
    import ray

    with contextlib.suppress(Exception):  # noqa: BLE001 - a shutdown that fails still ends in the stop below
        ray.shutdown()
    own.stop()


def starts_own_ray() -> bool:
    """Whether this driver starts a Ray of its own: no RAY_ADDRESS (or `local`), and no `ray start` cluster recorded
    where ray.init() looks."""
    return os.environ.get("RAY_ADDRESS", "").strip() in ("", "local") and not ray_address.recorded()


def _recorded_or_given() -> str:
    """The GCS address a driver joins (RAY_ADDRESS, or the recorded cluster): for the actors Ray Train starts, whose
    placement-group cleaner asks Ray's state API, which without it looks for the Ray on this machine and fails with
    "Found multiple active Ray instances" when there are several (a traceback in ray.log every run)."""
    given = os.environ.get("RAY_ADDRESS", "").strip()
    return given if given and given != "auto" else ray_address.recorded()


def check_local_capacity(workers: int, use_gpu: bool) -> None:
    """Before any Ray starts or any data is made: a Ray of this command's own gets this machine's CPUs (own_ray.cpus),
    known now, so more workers than that are refused here rather than after the start (require() checks a cluster
    that is joined)."""
    if not starts_own_ray():
        return
    own_ray.program()
    own_ray.check_token_folder()
    if use_gpu:
        import torch  # what Ray counts on a local start too; only for --use-gpu

        have, kind = torch.cuda.device_count(), "GPU"
    else:
        have, kind = own_ray.cpus(), "CPU"
    _enough(workers, kind, have, "the local Ray this run would start", "lower --workers, or join a bigger cluster "
            "with RAY_ADDRESS", use_gpu)


def require(workers: int, use_gpu: bool) -> None:
    """Fail now, rather than wait forever for resources, when the cluster cannot hold `workers` workers."""
    import ray

    kind = "GPU" if use_gpu else "CPU"
    _enough(workers, kind, int(ray.cluster_resources().get(kind, 0)), "the Ray cluster", "lower --workers or add nodes",
            use_gpu)


def _enough(workers: int, kind: str, have: int, where: str, fix: str, use_gpu: bool) -> None:
    if workers > have:
        raise ConfigError(f"--workers {workers} needs {workers} {kind}s but {where} has {have}; {fix}"
                          f"{' (or drop --use-gpu)' if use_gpu else ''}")


def executor_hosts(workers: int, use_gpu: bool, placement: str) -> dict[str, int]:
    """Horovod's RayExecutor's own placement for a Ray strategy (horovod/ray/strategy.py): PACK is its placement group
    of one bundle a worker (PGStrategy: PACK); STRICT_PACK one host holding every worker (ColocatedStrategy: one
    bundle, one node); SPREAD an equal share on each node with the workers' resource (ColocatedStrategy: a bundle a
    node, STRICT_SPREAD), refused in one line where the workers do not divide over those nodes."""
    if placement == "PACK":
        return {"num_workers": workers}
    nodes = 1
    if placement == "SPREAD":
        import ray

        kind = "GPU" if use_gpu else "CPU"
        nodes = min(workers, sum(1 for node in ray.nodes() if node["Alive"] and node["Resources"].get(kind, 0) >= 1))
        if workers % nodes:
            raise ConfigError(f"--placement-strategy SPREAD gives each node as many of Horovod's workers "
                              f"(RayExecutor's num_hosts and num_workers_per_host), and --workers {workers} does not "
                              f"divide over the {nodes} nodes with {kind}s here; give a multiple of {nodes}, or "
                              "--placement-strategy PACK")
    return {"num_hosts": nodes, "num_workers_per_host": workers // nodes}

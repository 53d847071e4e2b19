"""Joining a Ray cluster, or starting one of the command's own (cluster/own_ray.py), and refusing work it cannot
place, before anything starts."""

import atexit
import contextlib
import logging
import os
import socket
import sys
import threading
from pathlib import Path

from cluster import own_ray, worker_output
from contract.config import ConfigError
from contract.errors import RunFailed
from runtime import signals
from workload import faults

log = logging.getLogger(__name__)
CONNECT_TIMEOUT_S = 10
PROBE_TIMEOUT_S = 5
# The HTTP/2 client connection preface and an empty SETTINGS frame (RFC 9113, section 3.4).
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
HTTP2_SETTINGS = 4
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
        # Seen with Ray 2.60: `ray start` turns token authentication on when ~/.ray/auth_token exists, and a
        # client in the default mode then cannot join. Only a failure that says so is blamed on it.
        hint = ("export RAY_AUTH_MODE=token (Ray reads the token from ~/.ray/auth_token)" if "auth" in message.lower()
                else "check that RAY_ADDRESS names the head node's GCS port (`ray status` there shows it)")
        raise ConfigError(f"could not join the Ray cluster ({message[:300]}); {hint}") from None
    worker_output.take_over()


def _init(ray: object, address: str | None, env_vars: dict[str, str]) -> None:
    """ray.init in a thread of its own, this one waiting in Python: Ray installs its SIGTERM handler (exit 15, no
    line) only from the main thread, and a signal reaches the command's own handlers here at once."""
    failed: list[BaseException] = []

    def init() -> None:
        try:
            ray.init(address, log_to_driver=True, runtime_env={"env_vars": env_vars} if env_vars else None)
        except BaseException as error:  # noqa: BLE001 - handed to the main thread, which raises it
            failed.append(error)

    joining = threading.Thread(target=init, name="ray-init", daemon=True)
    joining.start()
    while joining.is_alive():
        joining.join(0.1)
    if failed:
        raise failed[0]


def _start_own(env_vars: dict[str, str]) -> str:
    """A Ray for this command alone (cluster/own_ray.py), in this driver's authentication mode (see connect), with a
    token written where there is none; its address. Its actors get its dashboard for Ray's state API (see
    _recorded_or_given)."""
    own_ray.check_token_folder()
    if own_ray.wants_token() and not (os.environ.get("RAY_AUTH_TOKEN") or own_ray.token_path().is_file()):
        import subprocess

        subprocess.run([str(Path(sys.executable).with_name("ray")), "get-auth-token", "--generate"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
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
    return os.environ.get("RAY_ADDRESS", "").strip() in ("", "local") and not _read_text(recorded_cluster_file())


def _recorded_or_given() -> str:
    """The GCS address a driver joins (RAY_ADDRESS, or the recorded cluster): for the actors Ray Train starts, whose
    placement-group cleaner asks Ray's state API, which without it looks for the Ray on this machine and fails with
    "Found multiple active Ray instances" when there are several (a traceback in ray.log every run)."""
    given = os.environ.get("RAY_ADDRESS", "").strip()
    return given if given and given != "auto" else _read_text(recorded_cluster_file())


def check_address() -> str | None:
    """Decide in seconds, before anything starts, which Ray cluster this driver joins, and refuse one it cannot;
    the address to give ray.init where Ray's own choice would be wrong (None: leave it to Ray).

    ray.init() retries a cluster that does not answer for minutes, whether RAY_ADDRESS names it or a `ray start`
    recorded it in /tmp/ray/ray_current_cluster and then died; and RAY_ADDRESS=auto, with nothing recorded, joins
    any Ray it finds on the machine, another process's private one included.
    """
    address = os.environ.get("RAY_ADDRESS", "").strip()
    if address == "local":
        return None
    if address.startswith("ray://"):
        # Ray advises Ray Jobs, not Ray Client, for Ray Train; seen: Ray's lines, coloured, around the run's own.
        raise ConfigError(f"RAY_ADDRESS={address} is Ray Client, which Ray advises against for Ray Train (its "
                          "workers' lines bypass this run's log, and a lost connection ends the run); submit the "
                          "command to that cluster instead: `ray job submit --address http://HEAD:8265 -- python -m "
                          "<this command> ...`")
    if address and address != "auto":
        _check_reachable(address, f"the Ray cluster at RAY_ADDRESS={address}",
                         "start it with `ray start --head`, or unset RAY_ADDRESS to run on a local Ray")
        return None
    record = recorded_cluster_file()
    recorded = _read_text(record)
    if recorded:
        unset = "unset RAY_ADDRESS and " if address == "auto" else ""
        _check_reachable(recorded, f"the Ray cluster recorded in {record} ({recorded})",
                         f"start it again with `ray start --head`, or {unset}delete {record} so that this run starts "
                         "a Ray of its own")
        return None
    if address == "auto":
        rays = local_rays()
        started = sorted(gcs for gcs, by_ray_start in rays.items() if by_ray_start)
        if len(started) == 1:  # a `ray start --temp-dir` cluster, recorded in its own folder
            _check_reachable(started[0], f"the Ray cluster RAY_ADDRESS=auto found ({started[0]})",
                             "unset RAY_ADDRESS to run on a Ray of this run's own")
            return started[0]
        if started:
            raise ConfigError(f"RAY_ADDRESS=auto finds {len(started)} clusters started with `ray start` "
                              f"({', '.join(started)}); set RAY_ADDRESS to the one to join")
        private = f"; the Ray here ({', '.join(sorted(rays))}) is another process's own" if rays else ""
        raise ConfigError(f"RAY_ADDRESS=auto found no cluster started with `ray start` ({record} records none)"
                          f"{private}; start one with `ray start --head`, or unset RAY_ADDRESS so that this run "
                          "starts a Ray of its own")
    return None


def recorded_cluster_file() -> Path:
    """Where `ray start` records the cluster that ray.init() joins by default (Ray reads RAY_TMPDIR, then TMPDIR)."""
    return Path(os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp") / "ray" / "ray_current_cluster"


def local_rays() -> dict[str, bool]:
    """The GCS address of every Ray running on this machine, and whether `ray start` started it (it recorded the
    address in its --temp-dir) rather than a program for itself (ray.init records nothing). Read from the raylets'
    command lines, as Ray's own `auto` finds them."""
    import psutil

    rays: dict[str, bool] = {}
    for process in psutil.process_iter(["name", "cmdline"]):
        if process.info["name"] != "raylet":
            continue
        args = dict(arg.split("=", 1) for part in process.info["cmdline"] or [] for arg in part.split(" ")
                    if arg.startswith(("--gcs-address=", "--temp-dir=")))
        if gcs := args.get("--gcs-address"):
            temp_dir = Path(args.get("--temp-dir") or "/tmp/ray")
            rays[gcs] = rays.get(gcs, False) or _read_text(temp_dir / "ray_current_cluster") == gcs
    return rays


def _read_text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def _check_reachable(address: str, what: str, fix: str) -> None:
    scheme, _, rest = address.rpartition("://")
    host, _, port = rest.split("/", 1)[0].rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"{what}: {address!r} is not host:port; {fix}")
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S) as sock:
            if scheme in ("", "ray"):
                # Ray's GCS (and Ray Client) speak gRPC, which is HTTP/2: a server answers the client preface
                # with a SETTINGS frame at once. Anything else listening there is not a Ray cluster.
                sock.settimeout(PROBE_TIMEOUT_S)
                sock.sendall(HTTP2_PREFACE)
                frame = _read(sock, 9)
                if len(frame) < 9 or frame[3] != HTTP2_SETTINGS:
                    raise ConfigError(f"{what} answers, but not as a Ray cluster (no gRPC there); point it at the "
                                      f"head node's GCS port, or {fix}")
    except OSError as error:
        raise ConfigError(f"cannot reach {what} ({error}); {fix}") from None
    if not scheme:  # a GCS address (ray:// is Ray Client's server, which another check would need)
        _check_token(f"{host}:{port}", what)


def _check_token(address: str, what: str) -> None:
    """Refuse at once a cluster that wants a token this driver will not send: ray.init would retry for a minute,
    logging InvalidAuthToken each time, then blame the address. Ray's own GCS client is told at once: Ray has no public
    way to ask a cluster whether it takes this driver's token (ray.init retries; ray/_raylet.pyx, GcsClient)."""
    from ray._raylet import GcsClient
    from ray.exceptions import AuthenticationError

    token_mode = os.environ.get("RAY_AUTH_MODE", "").strip().lower() == "token"
    if token_mode and not (os.environ.get("RAY_AUTH_TOKEN") or own_ray.token_path().is_file()):
        # Ray's C++ client would end this process with a "bug in Ray" stack trace.
        raise ConfigError("RAY_AUTH_MODE=token but this machine has no Ray token: copy the cluster's token to "
                          "~/.ray/auth_token (or name its file in RAY_AUTH_TOKEN_PATH)")
    try:
        with _quiet_stderr():  # Ray's C++ client logs its own line about the refusal
            GcsClient(address=address)
    except AuthenticationError:
        if not token_mode:
            raise ConfigError(f"{what} uses token authentication; export RAY_AUTH_MODE=token (Ray reads the token "
                              "from ~/.ray/auth_token)") from None
        raise ConfigError(f"{what} refused this driver's token; put the cluster's token in ~/.ray/auth_token (or "
                          "name its file in RAY_AUTH_TOKEN_PATH)") from None
    except Exception:  # noqa: BLE001 - anything but a refused token is ray.init's to report, as before
        return


@contextlib.contextmanager
def _quiet_stderr():
    """File descriptor 2 to /dev/null for the block: what a C++ library writes there, not Python's sys.stderr."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    try:
        while len(data) < size and (chunk := sock.recv(size - len(data))):
            data += chunk
    except socket.timeout:
        pass
    return data


def check_local_capacity(workers: int, use_gpu: bool) -> None:
    """Before any Ray starts or any data is made: a Ray of this command's own gets this machine's CPUs (own_ray.cpus),
    known now, so more workers than that are refused here rather than after the start (require() checks a cluster
    that is joined)."""
    if not starts_own_ray():
        return
    own_ray.check_token_folder()
    if use_gpu:
        import torch  # what Ray counts on a local start too; only for --use-gpu (seen: refused 13-20 s in)

        have, kind = torch.cuda.device_count(), "GPU"
    else:
        have, kind = own_ray.cpus(), "CPU"
    if workers > have:
        raise ConfigError(f"--workers {workers} needs {workers} {kind}s but the local Ray this run would start has "
                          f"{have}; lower --workers, or join a bigger cluster with RAY_ADDRESS"
                          f"{' (or drop --use-gpu)' if use_gpu else ''}")


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

"""Joining a Ray cluster, and refusing work it cannot place, before anything starts."""

import atexit
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NoReturn

from cluster import worker_output
from contract import cli
from contract.config import ConfigError, TrainConfig, require_path
from contract.errors import RunFailed
from workload import faults

log = logging.getLogger(__name__)
CONNECT_TIMEOUT_S = 10
PROBE_TIMEOUT_S = 5
STOP_WAIT_S = 5
STOP_PASSES = 5
# The HTTP/2 client connection preface and an empty SETTINGS frame (RFC 9113, section 3.4).
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
HTTP2_SETTINGS = 4


@dataclass(frozen=True, slots=True)
class RayRunOptions:
    name: str | None = None
    """Run name; rerunning with the same name and storage path resumes from its last checkpoint."""
    storage_path: str | None = None
    """Where Ray keeps run state and checkpoints (Ray's default: ~/ray_results)."""
    max_failures: int = 0
    """Restarts from the last checkpoint after a worker failure (Ray's FailureConfig)."""

    def __post_init__(self) -> None:
        if self.storage_path is not None:
            require_path(self.storage_path, "--storage-path")
        if self.max_failures < 0:
            raise ConfigError(f"--max-failures must be >= 0, got {self.max_failures}")


RETRY_CHECKPOINTS = "retry-checkpoints"


def run_checkpoints(backend: str, cfg: TrainConfig, options: RayRunOptions) -> tuple[TrainConfig, bool]:
    """`cfg` with the folder this run on Ray checkpoints to after every epoch, and whether that folder is this
    run's alone (made for --max-failures, removed when the run succeeds).

    --checkpoint-dir wins. With --name: <storage-path>/<name>/<backend>-checkpoints, so rerunning the name resumes.
    With only --max-failures: <output-dir>/retry-checkpoints. Native DDP also reports Ray Train checkpoints, and
    resumes from whichever is newer: Ray registers a reported checkpoint only when its controller next polls the
    workers, so a worker killed just after an epoch would otherwise lose that epoch.
    """
    if cfg.checkpoint_dir:
        return cfg, False
    if options.name:
        storage = Path(options.storage_path or Path.home() / "ray_results").expanduser().resolve()
        return replace(cfg, checkpoint_dir=str(storage / options.name / f"{backend}-checkpoints")), False
    if options.max_failures:
        return replace(cfg, checkpoint_dir=str(Path(cfg.output_dir) / RETRY_CHECKPOINTS)), True
    return cfg, False


def connect(log_file: Path, address: str | None) -> None:
    """Join RAY_ADDRESS (set inside `ray job submit`), else a `ray start` cluster on this machine, else start one;
    `address`: what check_address() decided before anything started.

    Ray's and Horovod's own lines go to `log_file`, the project's to the output (cluster/worker_output.py)."""
    import ray

    worker_output.route(log_file)
    if ray.is_initialized():
        worker_output.take_over()
        return
    # Ray starts workers from its raylet, not from this driver: the test-only fault variable must be passed on.
    env_vars = {faults.ENV: os.environ[faults.ENV]} if os.environ.get(faults.ENV) else {}
    try:
        with _sigterm_stays_ours():
            if _starts_a_local_ray():
                _start_local(ray, env_vars)
            else:
                env_vars.update(_cluster_for_actors(address))
                ray.init(address, log_to_driver=True, runtime_env={"env_vars": env_vars} if env_vars else None)
    except ConnectionError as error:
        message = " ".join(str(error).split())
        # Seen with Ray 2.60: `ray start` turns token authentication on when ~/.ray/auth_token exists, and a
        # client in the default mode then cannot join. Only a failure that says so is blamed on it.
        hint = ("export RAY_AUTH_MODE=token (Ray reads the token from ~/.ray/auth_token)" if "auth" in message.lower()
                else "check that RAY_ADDRESS names the head node's GCS port (`ray status` there shows it)")
        raise ConfigError(f"could not join the Ray cluster ({message[:300]}); {hint}") from None
    worker_output.take_over()


@contextlib.contextmanager
def _sigterm_stays_ours() -> Iterator[None]:
    """ray.init installs SIGTERM handlers of its own as it runs: the driver's exits with 15 and no line, a local
    node's drains for up to a minute and exits with 1 (both seen). Ours stay, and end the command at once (see
    _end_at_once); after ray.init, the command's own (contract/cli.py) again."""
    from ray._private import ray_constants, utils

    # The driver's core worker, made inside ray.init, installs a C++ handler for SIGTERM over ours: a signal then was
    # a stack dump and exit 134, or 143 only 27 s later (each seen). This process only: Ray's own keep theirs.
    ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = True
    real = utils.set_sigterm_handler
    utils.set_sigterm_handler = lambda handler: None
    try:
        with cli.ending_on((signal.SIGTERM, signal.SIGINT), _end_at_once):
            yield
    finally:
        global _private_ray
        _private_ray = None
        utils.set_sigterm_handler = real
        cli.end_on_sigterm()  # the command's own again, for both signals, as cli.run installed them


_private_ray: str | None = None
"""The session folder of the Ray this process started, while it starts (see _start_local)."""


def _end_at_once(signum: int) -> NoReturn:
    """SIGTERM or Ctrl-C during ray.init: the line and the exit code, now. A KeyboardInterrupt raised there can land
    inside logging's or Ray's own critical sections: seen 1 in 12, swallowed with logging's lock held, the run
    training on and Ray's log thread blocked. Nothing of the run exists yet, nothing of a Ray of our own is kept."""
    sigterm = signum == signal.SIGTERM
    with contextlib.suppress(OSError):  # not logging: its lock may be held here
        if cli.claim_the_line():  # once, whichever of the watcher and the main thread's unwinding comes first
            os.write(2, f"error: {cli.interrupted_line(sigterm)}\n".encode())
    if _private_ray:
        remove_private_ray(_private_ray, at_once=True)
    os._exit(143 if sigterm else 130)


def _starts_a_local_ray() -> bool:
    """Whether ray.init() would start a Ray of its own here: no RAY_ADDRESS, and no `ray start` cluster recorded in
    /tmp/ray. The same test ray.init() makes (a private Ray function, so a change in it only costs the cleanup)."""
    try:
        from ray._private import services

        return services.canonicalize_bootstrap_address(None) is None
    except Exception:  # noqa: BLE001 - any doubt: leave the decision to ray.init, as before
        return False


# Ports Ray takes by default for its other components (seen: a free port of 52365 for the dashboard collided with
# the dashboard agent's default); worker ports are 10002-19999.
RAY_DEFAULT_PORTS = {6379, 8265, 10001, 52365}


def free_port() -> int:
    """A loopback TCP port that nothing listens on now, and none that Ray takes by default."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in RAY_DEFAULT_PORTS:
            return port


def _cluster_for_actors(address: str | None) -> dict[str, str]:
    """RAY_ADDRESS for the actors Ray Train starts: its placement-group cleaner asks Ray's state API, which, without
    it, looks for the Ray on this machine and fails with "Found multiple active Ray instances" when there are several
    (a traceback in ray.log every run on a shared machine)."""
    try:
        from ray._private import services

        gcs = services.canonicalize_bootstrap_address(address)
    except Exception:  # noqa: BLE001 - a private function: without it the actors find the cluster as before
        return {}
    return {"RAY_ADDRESS": gcs} if gcs else {}


def _start_local(ray: object, env_vars: dict[str, str]) -> None:
    """A Ray for this process alone, its session files in a folder of its own that goes when the process ends.

    ray.init's own session folder, /tmp/ray/session_*, is never removed (about 2 MB a run). Ray keeps its secure
    default here: the local start writes ~/.ray/auth_token, and a later `ray start --head` by the user turns token
    authentication on (README, "Ray cluster")."""
    global _private_ray
    temp_dir = tempfile.mkdtemp(prefix="ray-ddp-vs-horovod-", dir="/tmp")  # short: Ray's socket paths must fit
    _private_ray = temp_dir

    def stop() -> None:
        if cli.ending_by_signal():
            # Nothing of this Ray is kept: ray.shutdown() took 9-11 s here (5 s even with its daemons killed first).
            remove_private_ray(temp_dir, at_once=True)
            cli.exit_now(cli.interrupted_exit_code())  # the interpreter's teardown with Ray connected: exit 139
        ray.shutdown()
        remove_private_ray(temp_dir)  # what a shutdown leaves, or a start cut short (Ray's agents, seen after Ctrl-C)

    atexit.register(stop)  # after Ray's own shutdown (registered when ray is imported), so this runs before it
    _reap_after_this_process(temp_dir)
    try:
        # Its GCS port is Ray's choice, its dashboard's ours: the address of Ray's state API for its actors (see
        # _cluster_for_actors), known before it starts.
        port = free_port()
        with _temporary_files_in(temp_dir), _sessions_of_their_own():
            ray.init(log_to_driver=True, _temp_dir=temp_dir, dashboard_port=port, runtime_env={
                "env_vars": {**env_vars, "RAY_API_SERVER_ADDRESS": f"http://127.0.0.1:{port}"}})
    except Exception as error:  # noqa: BLE001 - Ray raises a bare Exception for this one
        if "timed out during startup" not in str(error):
            raise
        stop()
        atexit.unregister(stop)
        raise RunFailed("the local Ray did not start: its raylet did not register within Ray's 30 s (a busy "
                        "machine); run again when the machine is less busy, or start a cluster with `ray start "
                        "--head` and join it") from None


@contextlib.contextmanager
def _sessions_of_their_own() -> Iterator[None]:
    """The processes ray.init starts (its GCS, its raylet, and so the raylet's workers and agents), in a session of
    their own: `timeout` and Ctrl-C signal the command's whole process group, and the raylet ending with it had the
    driver's core worker exit 1 at once, without our line (1 in 16 signals), or ray.init wait ~30 s on a GCS gone.
    The command's own stop ends them instead (see _start_local)."""
    from ray._private import services

    real = services.ConsolePopen

    class InASessionOfItsOwn(real):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **{**kwargs, "start_new_session": True})

    services.ConsolePopen = InASessionOfItsOwn
    try:
        yield
    finally:
        services.ConsolePopen = real


@contextlib.contextmanager
def _temporary_files_in(folder: str) -> Iterator[None]:
    """TMPDIR=folder for the processes ray.init starts, and so for its workers: the folder that Ray's dashboard's
    multiprocessing makes (pymp-*, seen left in /tmp by every run, as the dashboard is stopped, not exited) goes with
    the private Ray's. This process's own temporary files stay where they were."""
    saved, cached = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"] = folder
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved
        tempfile.tempdir = cached


_REAPERS: list[subprocess.Popen] = []
"""Each holds the write end of a reaper's stdin for as long as this process lives."""


def _reap_after_this_process(temp_dir: str) -> None:
    """cluster/reaper.py, in a session of its own: it stops this Ray when this process ends, even by SIGKILL, which
    runs no atexit. Its pipe is not inherited by what Ray starts, so only this process's end closes it."""
    reaper = subprocess.Popen([sys.executable, "-m", "cluster.reaper"], stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    reaper.stdin.write(f"{temp_dir}\n".encode())
    reaper.stdin.flush()
    _REAPERS.append(reaper)


def stop_processes(temp_dir: str | Path, at_once: bool = False) -> int:
    """Stop the Ray whose session folder is `temp_dir`, by PID: `ray stop` stops every Ray on the host.

    Its daemons name the folder on their command lines; its workers and agents are their children. A Ray worker
    may ignore SIGTERM: what is left after STOP_WAIT_S is killed; `at_once`: killed, and not waited for."""
    import psutil

    own = [p for p in psutil.process_iter(["cmdline"])
           if any(arg.endswith(f"={temp_dir}") or f"{temp_dir}/" in arg for arg in p.info["cmdline"] or [])
           or _temporary_files_of(p) == str(temp_dir)]
    family = {p.pid: p for p in own}
    for process in own:
        with contextlib.suppress(psutil.Error):
            family.update({child.pid: child for child in process.children(recursive=True)})
    family.pop(os.getpid(), None)
    for process in family.values():
        with contextlib.suppress(psutil.Error):
            process.kill() if at_once else process.terminate()
    if at_once:
        return len(family)
    _, alive = psutil.wait_procs(list(family.values()), timeout=STOP_WAIT_S)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    return len(family)


def remove_private_ray(temp_dir: str | Path, at_once: bool = False) -> None:
    """Stop the private Ray in `temp_dir` and remove the folder, again while either is found: a process that Ray
    was starting as the stop looked can write there after it (an empty folder was left once, in 8 signals during a
    start, its processes gone). `at_once`: one pass, killing (a command that a signal ends: its reaper, which this
    process's exit wakes, makes the passes after it)."""
    for _ in range(1 if at_once else STOP_PASSES):
        found = stop_processes(temp_dir, at_once)
        shutil.rmtree(temp_dir, ignore_errors=True)
        if not found and not os.path.exists(temp_dir):
            return


def _temporary_files_of(process: object) -> str | None:
    """Its TMPDIR: a private Ray's processes have their folder there (_temporary_files_in), Ray's agents too, whose
    command lines Ray rewrites (`ray::DashboardAgent`); orphaned by a stop during the start, they lived on 60 s."""
    import psutil

    try:
        return process.environ().get("TMPDIR")
    except (psutil.Error, OSError):
        return None


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
    logging InvalidAuthToken each time, then blame the address. Ray's own GCS client is told at once."""
    from ray._raylet import AuthenticationTokenLoader, GcsClient
    from ray.exceptions import AuthenticationError

    token_mode = os.environ.get("RAY_AUTH_MODE", "").strip().lower() == "token"
    if token_mode and not AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True):
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


def user_error(error: BaseException) -> BaseException | None:
    """The user error (bad settings, a diverged run) behind a Ray failure, if one is: Ray wraps a worker's
    exception in RayTaskError (Horovod's RayExecutor) or WorkerGroupError (Ray Train), with a traceback we
    would otherwise print instead of the one line that says what to fix."""
    from contract.errors import PeerLost

    # A lost peer is not the user's to fix: a retry (--max-failures) can get past it.
    user_errors = tuple(kind for kind in cli.EXIT_CODES if kind is not PeerLost)
    seen, todo = set(), [error]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        cause = getattr(current, "cause", None)  # RayTaskError keeps the original exception here
        if isinstance(current, user_errors) and not hasattr(current, "cause"):
            return current
        todo += [cause, current.__cause__, current.__context__, getattr(current, "controller_failure", None),
                 *getattr(current, "worker_failures", {}).values()]
    return None


def worker_failure(error: BaseException, options: RayRunOptions, resume_hint: str) -> BaseException | None:
    """One line for a run that failed because a Ray worker died or lost its peer, or None for other errors.

    Ray raises these with the dead actor's whole story (several tracebacks); what the user needs is which worker
    died and how to go on. A worker that only lost its peer is named only when no worker died; where Ray cannot
    tell which worker went first, every failed rank is named.
    """
    from ray.exceptions import RayActorError, RayError

    from contract.errors import PeerLost

    try:
        from ray.train.v2.api.exceptions import TrainingFailedError
    except ImportError:  # Train V1
        from ray.train import TrainingFailedError
    if not isinstance(error, (RayError, TrainingFailedError, PeerLost)):
        return None
    failures = dict(getattr(error, "worker_failures", None) or {None: error})
    died = {rank: cause for rank, cause in failures.items() if not isinstance(cause, PeerLost)} or failures
    rank, cause = min(died.items(), key=lambda item: -1 if item[0] is None else item[0])
    who = "a Ray worker" if rank is None else f"worker rank {rank}"
    if isinstance(cause, RayActorError):
        what = "died (its process exited: killed, out of memory, or crashed)"
    else:
        lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
        what = f"failed ({type(cause).__name__}: {(lines[0] if lines else '')[:160]})"
    if len(ranks := sorted(r for r in died if r is not None)) > 1:
        # A worker that loses its peer ends its process too (distributed.leave), and Ray's health check, every 2 s,
        # can then find both gone with the same error (seen: rank 1 killed, rank 0 blamed): none is singled out.
        who = f"worker ranks {', '.join(map(str, ranks))}"
        what += ": one died (killed, out of memory, or crashed) and a worker that loses its peer ends too"
    retries = f"retr{'y' if options.max_failures == 1 else 'ies'}"
    tried = f" after {options.max_failures} {retries}" if options.max_failures else ""
    return PeerLost(f"{who} {what}{tried}; {resume_hint}")


def check_local_capacity(workers: int, use_gpu: bool) -> None:
    """Before any Ray starts or any data is made: a Ray this driver would start itself gets this machine's CPUs,
    known now, so more workers than that are refused here rather than after the start (require() checks a
    cluster that is joined)."""
    if not _starts_a_local_ray():
        return
    check_token_folder()
    if use_gpu:
        import torch  # what Ray counts on a local start too; only for --use-gpu (seen: refused 13-20 s in)

        have, kind = torch.cuda.device_count(), "GPU"
    else:
        kind = "CPU"
        try:
            from ray._private.utils import get_num_cpus  # what ray.init() gives a local Ray (cgroup limits included)

            have = get_num_cpus()
        except Exception:  # noqa: BLE001 - a private function: if it moves, count as ray.init() does without it
            have = os.cpu_count() or 1
    if workers > have:
        raise ConfigError(f"--workers {workers} needs {workers} {kind}s but the local Ray this run would start has "
                          f"{have}; lower --workers, or join a bigger cluster with RAY_ADDRESS"
                          f"{' (or drop --use-gpu)' if use_gpu else ''}")


def check_token_folder() -> None:
    """A local start writes Ray's token (~/.ray/auth_token) where there is none; where it cannot (a read-only HOME),
    ray.init ended in Ray's OSError traceback after the data was made. Asked of Ray's own token functions."""
    if os.environ.get("RAY_AUTH_MODE", "token").lower() != "token":
        return  # a local start turns token mode on unless the variable says otherwise
    try:
        from ray._private.authentication.authentication_token_setup import (AuthenticationTokenLoader,
                                                                            _get_default_token_path)

        loader = AuthenticationTokenLoader.instance()
        try:
            if loader.has_token(ignore_auth_mode=True):
                return
        finally:
            # It keeps what it read for the process's life: kept from here, every later run of a process that then
            # joined a cluster without authentication failed, its actors never run (ActorDiedError; the test suite).
            loader.reset_cache()
        path = _get_default_token_path()
    except Exception:  # noqa: BLE001 - private functions: if they move, ray.init decides, as before
        return
    folder = path.parent
    while not folder.exists():
        folder = folder.parent  # Ray makes the missing folders: the first that exists must take them
    if not os.access(folder, os.W_OK):
        raise ConfigError(f"the local Ray this run would start writes its token to {path} (Ray's default), and "
                          f"{folder} cannot be written here; set HOME to a writable folder, point "
                          "RAY_AUTH_TOKEN_PATH at an existing token, or join a running cluster with RAY_ADDRESS")


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

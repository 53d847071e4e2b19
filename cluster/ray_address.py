"""Which Ray cluster a driver joins, decided in seconds before anything starts, and the addresses it refuses: one
that does not answer, answers but is not Ray, wants a token this driver will not send, or is Ray Client."""

import contextlib
import os
import socket
from pathlib import Path

from cluster import own_ray, worker_output
from contract.config import ConfigError

CONNECT_TIMEOUT_S = 10
PROBE_TIMEOUT_S = 5
# The HTTP/2 client connection preface and an empty SETTINGS frame (RFC 9113, section 3.4).
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
HTTP2_SETTINGS = 4


def recorded() -> str:
    """The GCS address `ray start` recorded where ray.init() looks, or ""."""
    return own_ray.recorded_in(recorded_cluster_file().parent)


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
        # Ray advises Ray Jobs, not Ray Client, for Ray Train: the workers' lines would bypass this run's log.
        raise ConfigError(f"RAY_ADDRESS={address} is Ray Client, which Ray advises against for Ray Train (its "
                          "workers' lines bypass this run's log, and a lost connection ends the run); submit the "
                          "command to that cluster instead: `ray job submit --address http://HEAD:8265 -- python -m "
                          "<this command> ...`")
    if address and address != "auto":
        _check_reachable(address, f"the Ray cluster at RAY_ADDRESS={address}",
                         "start it with `ray start --head`, or unset RAY_ADDRESS to run on a local Ray")
        return None
    record = recorded_cluster_file()
    recorded = own_ray.recorded_in(record.parent)
    if recorded:
        unset = "unset RAY_ADDRESS and " if address == "auto" else ""
        _check_reachable(recorded, f"the Ray cluster recorded in {record} ({recorded})",
                         f"start it again with `ray start --head`, or {unset}delete {record} so that this run starts "
                         "a Ray of its own")
        return None
    if address == "auto":
        rays = own_ray.local_rays()
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
        with open(os.devnull, "w") as null, worker_output.stderr_into(null):  # Ray's C++ client's line on a refusal
            GcsClient(address=address)
    except AuthenticationError:
        if not token_mode:
            raise ConfigError(f"{what} uses token authentication; export RAY_AUTH_MODE=token (Ray reads the token "
                              "from ~/.ray/auth_token)") from None
        raise ConfigError(f"{what} refused this driver's token; put the cluster's token in ~/.ray/auth_token (or "
                          "name its file in RAY_AUTH_TOKEN_PATH)") from None
    except Exception:  # noqa: BLE001 - anything but a refused token is ray.init's to report, as before
        return


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    with contextlib.suppress(socket.timeout):
        while len(data) < size and (chunk := sock.recv(size - len(data))):
            data += chunk
    return data

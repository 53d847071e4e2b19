"""Which Ray a driver joins, decided in seconds before anything starts: a token-authenticated cluster without the
token mode, or without the token, and what RAY_ADDRESS=auto may join (a `ray start` cluster, never another
program's private Ray). The cases without a live cluster are rows of test_bad_input.py's table."""

import os
import select
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from cluster.own_ray import local_rays
from tests.helpers import REPO, assert_one_line_error, data_flags, stop_ray

pytestmark = pytest.mark.cluster


def _without_auth(**env: str) -> dict[str, str]:
    """This environment with Ray's defaults for authentication (no mode, no token) and `env` on top."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}, "PYTHONUNBUFFERED": "1", **env}


@pytest.mark.parametrize("auth, needle", [
    ({}, "uses token authentication; export RAY_AUTH_MODE=token"),
    ({"RAY_AUTH_MODE": "token"}, "RAY_AUTH_MODE=token but this machine has no Ray token"),
    ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "not-the-token"}, "refused this driver's token"),
], ids=["no-token-mode", "no-token", "wrong-token"])
def test_a_users_ray_the_driver_cannot_join_is_refused_at_once(users_ray, base_cfg, tmp_path, auth, needle):
    address, _ = users_ray
    # HOME: a home without ~/.ray/auth_token, wherever the tests run.
    env = _without_auth(RAY_ADDRESS=address, HOME=str(tmp_path), **auth)
    result = subprocess.run([sys.executable, "-m", "ray_jobs.train", *data_flags(base_cfg), "--output-dir",
                             str(tmp_path / "out")], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert_one_line_error(result, needle)
    assert result.stdout == "" and not (tmp_path / "out").exists()


def test_with_the_token_the_same_check_lets_the_driver_through(users_ray):
    address, token = users_ray
    env = _without_auth(RAY_ADDRESS=address, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
    probe = "from cluster.ray_address import check_address; print(check_address())"
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "None", "")


def test_auto_tells_a_ray_start_cluster_from_a_program_s_private_ray(ray_cluster):
    """The session cluster was started with `ray start --temp-dir`; a program's ray.init() starts a private one."""
    ray_dir = short_dir()
    private = subprocess.Popen(
        [sys.executable, "-c", "import sys, ray; ray.init(num_cpus=1, include_dashboard=False, "
                               f"_temp_dir={str(ray_dir)!r}); print(ray.get_runtime_context().gcs_address, "
                               "flush=True); sys.stdin.read()"],
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True)
    try:
        # Its address once it is up: an event, bounded.
        assert select.select([private.stdout], [], [], 120)[0], "the private Ray did not start within 120 s"
        gcs = private.stdout.readline().strip()
        rays = local_rays()
        assert rays[gcs] is False, rays
        port = ray_cluster.address.rsplit(":", 1)[1]
        assert [started for address, started in rays.items() if address.endswith(f":{port}")] == [True], rays
    finally:
        private.kill()
        private.wait()
        stop_ray(ray_dir)
        shutil.rmtree(ray_dir, ignore_errors=True)


def test_a_run_on_a_shared_machine_leaves_ray_s_state_api_error_out(ray_cluster, users_ray, base_cfg, tmp_path):
    """Two Rays on the machine (the session's, the token one): Ray Train's placement-group cleaner asked Ray's state
    API without an address, and every run's ray.log held "Found multiple active Ray instances"."""
    env = {**os.environ, "RAY_ADDRESS": ray_cluster.address, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, "-m", "ray_jobs.train", "--workers", "1", "--epochs", "1",
                           "--max-steps-per-epoch", "10", *data_flags(base_cfg), "--output-dir", str(tmp_path / "out")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ray_log = (tmp_path / "out" / "ray.log").read_text()
    assert "PlacementGroupCleaner" not in ray_log and "multiple active Ray instances" not in ray_log, ray_log[-3000:]


def short_dir() -> Path:
    """A Ray temp folder short enough for its socket paths (at most 107 bytes), unlike pytest's."""
    return Path(tempfile.mkdtemp(prefix="ray-test-", dir="/tmp"))


def test_a_ray_of_the_command_s_own_listens_on_none_of_the_ports_a_user_s_ray_starts_on(ray_cluster):
    """A user's `ray start --head` beside such a Ray found its dashboard agent's 52365 taken, and `ray job submit`
    answered "500: No available agent to submit job"; Ray's client server held 10001 too."""
    import psutil

    from runtime.launch import RAY_DEFAULT_PORTS

    ours = [p for p in psutil.process_iter() if _session(p.pid) == ray_cluster.session]
    listening = {c.laddr.port for p in ours for c in _connections(p) if c.status == psutil.CONN_LISTEN}
    assert len(ours) > 3 and listening and not listening & RAY_DEFAULT_PORTS, sorted(listening)


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def _connections(process):
    import psutil

    try:
        return process.net_connections(kind="tcp")
    except psutil.Error:
        return []

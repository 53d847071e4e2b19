"""Does `torchrun --max-restarts` restart a gloo job whose rank died? Plain torch, none of this project's code.

    python tools/torchrun_restart_repro.py --trials 4          # each store setting, interleaved

Each trial runs `torchrun --standalone --nproc-per-node 2 --max-restarts 1` on the worker below: it forms a gloo
group, all-reduces for a while, and on the first attempt rank 1 SIGKILLs itself. A trial *restarted* when the
second attempt formed its group and finished (exit 0). It is run with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=0
(torch's default: the agent's rendezvous store is shared by every attempt) and =1 (a store per attempt), to show
the cause behind the project's refusal of the first (pytorch#135712). A trial still running after --timeout-s
counts as a hang and is killed with its whole process group.
"""

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKER = """
import os, signal, sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, marker = dist.get_rank(), sys.argv[1]
for step in range(40):
    dist.all_reduce(torch.ones(1000))
    if rank == 1 and step == 20 and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.02)
dist.destroy_process_group()
"""


def trial(share_store: bool, timeout_s: float, folder: Path) -> tuple[str, float]:
    marker = folder / "killed"
    worker = folder / "worker.py"
    worker.write_text(WORKER)
    env = {**os.environ, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0" if share_store else "1", "OMP_NUM_THREADS": "1"}
    torchrun = Path(sys.executable).with_name("torchrun")
    log = folder / "torchrun.log"
    start = time.monotonic()
    with log.open("w") as out:
        process = subprocess.Popen([str(torchrun), "--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                                    str(worker), str(marker)], env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        # torch starts each rank in a session of its own: the agent's group does not hold them, their argv does.
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if str(folder).encode() in (proc / "cmdline").read_bytes():
                    os.kill(int(proc.name), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        process.wait()
        return "hung", time.monotonic() - start
    seconds = time.monotonic() - start
    if process.returncode == 0:
        return "restarted", seconds
    output = log.read_text(errors="replace")
    reason = next((line.strip() for line in output.splitlines() if "connectFullMesh" in line or "refused" in line),
                  f"exit {process.returncode}")
    return f"failed: {reason[:120]}", seconds


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    out.add_argument("--trials", type=int, default=4)
    out.add_argument("--timeout-s", type=float, default=90)
    return out


def main() -> int:
    args = parser().parse_args()
    outcomes: dict[bool, list[str]] = {True: [], False: []}
    for index in range(args.trials):
        for share in (True, False):  # interleaved
            with tempfile.TemporaryDirectory() as folder:
                outcome, seconds = trial(share, args.timeout_s, Path(folder))
            outcomes[share].append(outcome)
            print(f"trial {index + 1}, shared store {'yes' if share else 'no'}: {outcome} ({seconds:.1f} s)",
                  flush=True)
    for share, rows in outcomes.items():
        print(f"TORCH_DISABLE_SHARE_RDZV_TCP_STORE={0 if share else 1}: "
              f"{rows.count('restarted')} of {len(rows)} restarted")
    return 0


if __name__ == "__main__":
    sys.exit(main())

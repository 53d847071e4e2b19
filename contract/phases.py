"""Where a run's time goes: seconds from the launcher's start to each phase, from wall-clock stamps on rank 0.

Workers stamp when the rank's code began (the same moment under every launcher, whether its process was new or, on
Ray, started earlier and pooled), when the process group was ready (DistContext.ready_at), the first step and
the end of training. The launcher that knows when it started and returned (launchers.arms, ray_jobs.train) turns the
stamps into `phases` and `end_to_end_s` (runtime/launch.py). A run started by a user's own torchrun, horovodrun or
mp.spawn has the phases measured from that command's start, and its last phase is when the results were written."""

PHASES = ("workers_started", "process_group_ready", "first_step_done", "training_done", "launcher_returned")


def phases(stamps: dict[str, float], start: float, returned: float) -> dict[str, float]:
    """Seconds from `start` to each phase, never decreasing: a worker process that Ray started before this launch
    (a pooled worker) counts as started at the launch. The phases are this attempt's: one that finishes a run from
    its last checkpoint takes no first step, and that phase then lasts no time."""
    out, previous = {}, 0.0
    for name in PHASES:
        at = returned if name == "launcher_returned" else stamps.get(name, start + previous)
        previous = out[name] = max(at - start, previous)
    return out


BLOCK_STEPS = 15
"""The steady window's steps per block (results.json's block_samples_per_s): its rate block by block is the spread
within a launch, which analysis/stats.py's variance_parts sets beside the spread between launches."""
STEP_PHASES = ("data", "forward", "backward", "wait", "optimizer")
"""A training step taken apart, in order (workload/metrics.py's phases_s): waiting for the batch, forward and loss,
backward as the main thread sees it (DDP's and Horovod's hooks run in it; DDP's exposed wait is taken out of it), the
exposed wait for the averaged gradients, and the optimizer's step."""
THREAD_GROUPS = ("training thread", "before the group", "framework", "since training began")
"""A rank's threads, grouped by what started them (workload/threads.py): the thread that runs the loop, then the
others by when they first appeared: before the process group, with it, or once training began."""

"""Whether the kernel's out-of-memory killer ended a process while a run ran. Its victim dies by SIGKILL and says
nothing; its peers see a lost peer, the launcher a signal. /proc/vmstat's oom_kill counts every such kill on this
machine, a memory cgroup's included (Linux 4.13 on), so a run that notes it as it starts can name memory as the
cause."""

from runtime import files


def oom_kills() -> int | None:
    """The kernel's count of out-of-memory kills since boot; None where it keeps none."""
    return files.proc_number("/proc/vmstat", "oom_kill ")


def killed_since(before: int | None) -> str | None:
    """What to tell the user when the kernel has killed for memory since `before` (an oom_kills() reading)."""
    now = oom_kills()
    if before is None or now is None or now <= before:
        return None
    return (f"the kernel's out-of-memory killer ended {now - before} process(es) on this machine while the run ran "
            "(exit status -9 or 137): memory ran out; lower --batch-size, --image-size or the model, start fewer "
            "ranks here, or give the job more memory")

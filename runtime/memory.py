"""Whether the kernel's out-of-memory killer ended a process while a run ran. Its victim dies by SIGKILL and says
nothing; its peers see a lost peer, the launcher a signal. /proc/vmstat's oom_kill counts every such kill on this
machine, a memory cgroup's included (Linux 4.13 on), so a run that notes it as it starts can name memory as the
cause."""

from pathlib import Path

VMSTAT = Path("/proc/vmstat")


def oom_kills() -> int | None:
    """The kernel's count of out-of-memory kills since boot; None where it keeps none."""
    try:
        for line in VMSTAT.read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def killed_since(before: int | None) -> str | None:
    """What to tell the user when the kernel has killed for memory since `before` (an oom_kills() reading)."""
    now = oom_kills()
    if before is None or now is None or now <= before:
        return None
    return (f"the kernel's out-of-memory killer ended {now - before} process(es) on this machine while the run ran "
            "(exit status -9 or 137): memory ran out; lower --batch-size, --image-size or the model, start fewer "
            "ranks here, or give the job more memory")

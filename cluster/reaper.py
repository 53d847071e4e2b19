"""The private Ray's last cleaner: started beside a command that starts a Ray of its own, it waits for that command
to end, however it ends, then stops that Ray's processes and removes its folder.

A command killed with SIGKILL runs no atexit handler, and Ray's agents then outlived it with parent 1 (issue 24). The
command holds the write end of this process's stdin; its end, by any cause, closes it.
"""

import signal
import sys

from cluster.ray_cluster import remove_private_ray


def main() -> None:
    # Ctrl-C and a scheduler's SIGTERM are the command's to handle; this process only outlives it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    temp_dir = sys.stdin.buffer.readline().decode().strip()
    sys.stdin.buffer.read()  # end of file: the command has exited
    if temp_dir:
        remove_private_ray(temp_dir)


if __name__ == "__main__":
    main()

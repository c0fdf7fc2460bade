"""A worker's watchdog (process-group mode): when the worker dies, kill what its tasks left running.
Run as `python -I orphan_watchdog.py <worker pid> <variable> <token prefix>` with a pipe from the
worker as stdin: end of file means the worker is gone. Standard library only: starts fast."""

import os
import signal
import sys
import time


def carriers(needle: bytes) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                environ = b"\0" + handle.read()
        except OSError:
            continue
        if needle in environ:
            found.append(int(name))
    return found


def main() -> None:
    variable, prefix = sys.argv[2], sys.argv[3]
    needle = f"\0{variable}={prefix}".encode()
    while sys.stdin.buffer.read(65536):
        pass  # nobody writes: this returns at end of file, when the worker has died
    quiet, deadline = 0, time.monotonic() + 30
    while quiet < 3 and time.monotonic() < deadline:  # a process mid-fork or exec is seen next pass
        found = [pid for pid in carriers(needle) if pid != os.getpid()]
        quiet = 0 if found else quiet + 1
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.02)


if __name__ == "__main__":
    main()

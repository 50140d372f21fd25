"""Resident memory of a process tree, sampled on a thread, with a hard ceiling.

The hostile-input tests run attacks against a real server process; if a regression lets
an attack balloon, the watchdog kills the server (and its decoder workers) at the ceiling
so the test fails instead of the machine. Linux ``/proc`` only, no dependencies.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from pathlib import Path

_PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_pids(root: int) -> list[int]:
    """``root`` and all its descendants (by parent pid)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        todo.extend(children.get(pid, []))
    return pids


def pss_bytes(pid: int) -> int:
    """Proportional set size: shared pages (libraries, a forked parent's memory) split
    between the processes that map them, so a tree's sum is what it really costs."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return 0


def rss_bytes(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


class MemoryWatchdog:
    """Samples the tree's total RSS (or PSS: ``pss=True``) every ``interval_s``; kills the
    tree above ``ceiling``."""

    def __init__(
        self, root_pid: int, ceiling_bytes: int, interval_s: float = 0.05, *, pss: bool = False
    ) -> None:
        self.root_pid = root_pid
        self._measure = pss_bytes if pss else rss_bytes
        self.ceiling = ceiling_bytes
        self.interval_s = interval_s
        self.peak = 0
        self.tripped = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-watchdog", daemon=True)

    def current(self) -> int:
        return sum(self._measure(pid) for pid in tree_pids(self.root_pid))

    def reset_peak(self) -> None:
        self.peak = self.current()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            used = self.current()
            self.peak = max(self.peak, used)
            if used > self.ceiling:
                self.tripped = True
                for pid in reversed(tree_pids(self.root_pid)):
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                return

    def __enter__(self) -> MemoryWatchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

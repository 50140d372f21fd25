"""A stand-in for the kernel's cgroup and proc files, laid out under a temp dir.

The runtime reads its memory limit and usage from /proc/self/cgroup, /proc/self/mountinfo,
/proc/meminfo and the cgroup files they lead to (sizing/cgroup_memory.py), under a root it is
given. ``cgroup_tree`` writes those files for one case (v2, v1, hybrid, with or without a
cgroup namespace) so the sizing and metrics tests read a machine they describe, not this one.
"""

from __future__ import annotations

from pathlib import Path

# A cgroup2 mount line of /proc/self/mountinfo.
V2_MOUNT = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def cgroup_tree(root: Path, cgroup: str, mountinfo: str, files: dict[str, str]) -> Path:
    """``root`` laid out as a machine whose process is in ``cgroup`` (its /proc/self/cgroup
    text), with ``mountinfo`` and each of ``files`` (path under root -> content)."""
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/cgroup").write_text(cgroup)
    (root / "proc/self/mountinfo").write_text(mountinfo)
    (root / "proc/meminfo").write_text("MemTotal:       16384000 kB\nMemFree: 1 kB\n")
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return root

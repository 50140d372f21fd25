"""The memory limit this process really lives under, read from its own cgroup.

WHY: a pod's memory limit is enforced by the kernel on the pod's cgroup; a process that
sizes its work by the host's RAM (or not at all) is OOM-killed by a request it could have
refused. The limit is found the way the kernel applies it:

- ``/proc/self/cgroup`` names the process's cgroup per hierarchy: ``0::/path`` on the
  unified (v2) hierarchy, ``N:memory:/path`` (or ``N:cpu,memory:/path``) on a v1 memory
  hierarchy. A hybrid host (systemd's default before cgroup v2 won) lists both, and the
  memory controller lives on v1 there; pods on current clusters are v2 only.
- ``/proc/self/mountinfo`` says where each hierarchy is mounted and which part of it the
  mount shows (a container sees its own cgroup as the mount's root, while
  ``/proc/self/cgroup`` may still print the host's path when there is no cgroup namespace).
- Every ancestor up to the mount's root can carry a limit, and the smallest one applies
  (v2 ``memory.max``, ``max`` when none; v1 ``memory.limit_in_bytes``, a huge number when
  none), so all of them are read.

``root`` exists for tests: a temp dir laid out like ``/`` (``proc/self/cgroup``,
``proc/self/mountinfo``, ``sys/fs/cgroup/...``). Nothing here raises on a missing or odd
file: no readable limit is ``None`` (the caller falls back to the host's memory).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

# v1 prints PAGE_COUNTER_MAX rounded to pages (9223372036854771712) for "no limit"; any
# value this large is not a limit a machine could honour.
_UNLIMITED_FROM = 1 << 62
_DEFAULT_V2_MOUNTS = ("sys/fs/cgroup", "sys/fs/cgroup/unified")
_DEFAULT_V1_MOUNT = "sys/fs/cgroup/memory"
_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class MemoryLimit:
    """A memory limit in bytes and where it came from (for logs and error messages)."""

    bytes: int
    source: str  # the file that sets it: ".../memory.max", ".../memory.limit_in_bytes", meminfo

    def describe(self) -> str:
        return f"{self.bytes / 2**30:.2f} GiB ({self.source})"


@dataclass(frozen=True)
class _Mount:
    root: str  # the part of the hierarchy the mount shows
    point: Path  # where it is mounted (under the test root)


def cgroup_memory_limit(root: Path = Path("/")) -> MemoryLimit | None:
    """The smallest memory limit on this process's cgroup and its ancestors (v1 or v2),
    or ``None`` when no cgroup sets one (or none can be read)."""
    limits = [*_v2_limits(root), *_v1_limits(root)]
    return min(limits, key=lambda limit: limit.bytes, default=None)


def host_memory_limit(root: Path = Path("/")) -> MemoryLimit:
    """The cgroup limit, else the machine's RAM (``MemTotal``): what this process may use."""
    limit = cgroup_memory_limit(root)
    if limit is not None:
        return limit
    return MemoryLimit(_mem_total(root), str(root / "proc/meminfo"))


def _cgroup_lines(root: Path) -> list[tuple[str, list[str], str]]:
    try:
        text = (root / "proc/self/cgroup").read_text()
    except OSError:
        return []
    lines = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            lines.append((parts[0], parts[1].split(","), parts[2]))
    return lines


def _mounts(root: Path) -> list[tuple[str, list[str], _Mount]]:
    """(fstype, super options, mount) of every cgroup mount in ``mountinfo``."""
    try:
        text = (root / "proc/self/mountinfo").read_text()
    except OSError:
        return []
    mounts = []
    for line in text.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if not sep or len(fields) < 5 or len(rest) < 3 or not rest[0].startswith("cgroup"):
            continue
        point = root / _unescape(fields[4]).lstrip("/")
        mounts.append((rest[0], rest[2].split(","), _Mount(_unescape(fields[3]), point)))
    return mounts


def _unescape(path: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), path)


def _v2_limits(root: Path) -> list[MemoryLimit]:
    paths = [path for hid, controllers, path in _cgroup_lines(root) if hid == "0"]
    if not paths:
        return []
    mounts = [m for fstype, _, m in _mounts(root) if fstype == "cgroup2"]
    if not mounts:
        mounts = [_Mount("/", root / p) for p in _DEFAULT_V2_MOUNTS]
    found = []
    for mount in mounts:
        found += _walk(mount, paths[0], "memory.max")
    return found


def _v1_limits(root: Path) -> list[MemoryLimit]:
    paths = [path for _, ctrls, path in _cgroup_lines(root) if "memory" in ctrls]
    if not paths:
        return []
    mounts = [m for fs, opts, m in _mounts(root) if fs == "cgroup" and "memory" in opts]
    if not mounts:
        mounts = [_Mount("/", root / _DEFAULT_V1_MOUNT)]
    found = []
    for mount in mounts:
        found += _walk(mount, paths[0], "memory.limit_in_bytes")
    return found


def _walk(mount: _Mount, cgroup: str, filename: str) -> list[MemoryLimit]:
    """Limits in ``filename`` from the process's cgroup directory up to the mount point.

    The cgroup path is made relative to the mount's root; when the mount does not show
    it (a container without a cgroup namespace mounts only its own cgroup), the mount
    point itself is the process's cgroup, so the walk starts there."""
    path, mount_root = PurePosixPath(cgroup), PurePosixPath(mount.root)
    try:
        relative = path.relative_to(mount_root)
    except ValueError:
        relative = PurePosixPath(".")
    if ".." in relative.parts:  # a cgroup outside our namespace's view: not below the mount
        relative = PurePosixPath(".")
    found = []
    directory = mount.point / relative
    while True:
        limit = _read_limit(directory / filename)
        if limit is not None:
            found.append(limit)
        if directory == mount.point or mount.point not in directory.parents:
            return found
        directory = directory.parent


def _read_limit(file: Path) -> MemoryLimit | None:
    try:
        text = file.read_text().strip()
    except OSError:
        return None
    if not text.isdigit():  # "max" (v2: no limit), or garbage
        return None
    value = int(text)
    if value <= 0 or value >= _UNLIMITED_FROM:
        return None
    return MemoryLimit(value, str(file))


def _mem_total(root: Path) -> int:
    try:
        for line in (root / "proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 8 * 2**30  # nothing readable: a conservative guess rather than no limit


@dataclass(frozen=True)
class MemoryUsage:
    """What this process's cgroup uses now and its peak (bytes; the peak may be None on a
    kernel without v2 ``memory.peak``: the caller keeps the highest it saw)."""

    current: int
    peak: int | None


def cgroup_memory_usage(root: Path = Path("/")) -> MemoryUsage | None:
    """Usage of this process's own cgroup (v2 ``memory.current`` / ``memory.peak``, v1
    ``memory.usage_in_bytes`` / ``memory.max_usage_in_bytes``): what the pod's limit is
    charged against, decoders included (``status.capacity``'s pod memory peak). None when
    no cgroup file can be read."""
    for hierarchy, names in (
        ("cgroup2", ("memory.current", "memory.peak")),
        ("cgroup", ("memory.usage_in_bytes", "memory.max_usage_in_bytes")),
    ):
        for directory in _own_directories(root, hierarchy):
            current = _read_limit(directory / names[0])
            if current is not None:
                peak = _read_limit(directory / names[1])
                return MemoryUsage(current.bytes, peak.bytes if peak is not None else None)
    return None


def _own_directories(root: Path, hierarchy: str) -> list[Path]:
    """The process's own cgroup directory under each mount of ``hierarchy`` (as ``_walk``
    finds it: relative to the mount's root, else the mount point itself)."""
    v2 = hierarchy == "cgroup2"
    paths = [
        p for hid, ctrls, p in _cgroup_lines(root) if (hid == "0" if v2 else "memory" in ctrls)
    ]
    if not paths:
        return []
    mounts = [
        m for fs, opts, m in _mounts(root) if fs == hierarchy and (v2 or "memory" in opts)
    ] or (
        [_Mount("/", root / p) for p in _DEFAULT_V2_MOUNTS]
        if v2
        else [_Mount("/", root / _DEFAULT_V1_MOUNT)]
    )
    found = []
    for mount in mounts:
        try:
            relative = PurePosixPath(paths[0]).relative_to(PurePosixPath(mount.root))
        except ValueError:
            relative = PurePosixPath(".")
        if ".." in relative.parts:
            relative = PurePosixPath(".")
        found.append(mount.point / relative)
    return found

"""The runtime finds the memory limit of its own cgroup: fake cgroup trees laid out in a
temp dir (v2, v1, hybrid, containers with and without a cgroup namespace), and this
machine's real cgroup, including a memory cgroup made here with a limit (root only)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from cgroup_tree import V2_MOUNT, cgroup_tree
from docparser_runtime.sizing.cgroup_memory import cgroup_memory_limit, host_memory_limit

GIB = 1024**3
V1_UNLIMITED = "9223372036854771712"


def test_v2_takes_the_smallest_limit_up_the_hierarchy(tmp_path: Path) -> None:
    root = cgroup_tree(
        tmp_path,
        "0::/kubepods/burstable/pod1/ctr\n",
        V2_MOUNT,
        {
            "sys/fs/cgroup/kubepods/memory.max": str(64 * GIB),
            "sys/fs/cgroup/kubepods/burstable/pod1/memory.max": str(2 * GIB),  # the pod
            "sys/fs/cgroup/kubepods/burstable/pod1/ctr/memory.max": "max",  # the container
        },
    )
    limit = cgroup_memory_limit(root)
    assert limit is not None and limit.bytes == 2 * GIB
    assert limit.source.endswith("kubepods/burstable/pod1/memory.max")


def test_v2_container_with_a_cgroup_namespace_sees_itself_as_root(tmp_path: Path) -> None:
    root = cgroup_tree(tmp_path, "0::/\n", V2_MOUNT, {"sys/fs/cgroup/memory.max": "1073741824"})
    assert cgroup_memory_limit(root).bytes == GIB  # type: ignore[union-attr]


def test_v2_without_any_limit_is_none_and_falls_back_to_the_host(tmp_path: Path) -> None:
    files = {"sys/fs/cgroup/user.slice/memory.max": "max"}
    root = cgroup_tree(tmp_path, "0::/user.slice\n", V2_MOUNT, files)
    assert cgroup_memory_limit(root) is None
    fallback = host_memory_limit(root)
    assert fallback.bytes == 16384000 * 1024 and fallback.source.endswith("meminfo")


def test_v1_hybrid_reads_the_memory_hierarchy_not_the_unified_one(tmp_path: Path) -> None:
    mountinfo = (
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
        "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
        "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
    )
    root = cgroup_tree(
        tmp_path,
        "4:memory:/app/job\n2:cpu,cpuacct:/app/job\n0::/app/job\n",
        mountinfo,
        {
            "sys/fs/cgroup/memory/memory.limit_in_bytes": V1_UNLIMITED,
            "sys/fs/cgroup/memory/app/memory.limit_in_bytes": str(3 * GIB),
            "sys/fs/cgroup/memory/app/job/memory.limit_in_bytes": V1_UNLIMITED,
            # a limit in a hierarchy of another controller must not count
            "sys/fs/cgroup/cpu,cpuacct/app/job/memory.limit_in_bytes": "1024",
        },
    )
    limit = cgroup_memory_limit(root)
    assert limit is not None and limit.bytes == 3 * GIB
    assert "/memory/app/memory.limit_in_bytes" in limit.source


def test_v1_container_without_a_cgroup_namespace(tmp_path: Path) -> None:
    """Docker on v1 without cgroupns: /proc/self/cgroup prints the host's path, and the
    memory mount shows only the container's own cgroup (mountinfo's root field)."""
    mountinfo = (
        "600 590 0:32 /docker/abc123 /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n"
    )
    root = cgroup_tree(
        tmp_path,
        "9:memory:/docker/abc123\n",
        mountinfo,
        {"sys/fs/cgroup/memory/memory.limit_in_bytes": str(512 * 2**20)},
    )
    assert cgroup_memory_limit(root).bytes == 512 * 2**20  # type: ignore[union-attr]


def test_a_cgroup_outside_the_namespace_and_escaped_mount_points(tmp_path: Path) -> None:
    mountinfo = r"77 1 0:40 / /sys/fs/cgroup/my\040mem rw - cgroup cgroup rw,memory" + "\n"
    root = cgroup_tree(
        tmp_path,
        "5:memory:/../../elsewhere\n",
        mountinfo,
        {
            "sys/fs/cgroup/my mem/memory.limit_in_bytes": str(GIB),
            "sys/fs/cgroup/memory.limit_in_bytes": "1",  # outside the mount: never read
        },
    )
    assert cgroup_memory_limit(root).bytes == GIB  # type: ignore[union-attr]


def test_missing_or_garbled_files_mean_no_limit(tmp_path: Path) -> None:
    assert cgroup_memory_limit(tmp_path) is None  # no /proc at all
    root = cgroup_tree(tmp_path / "t", "garbage\n0::\n", "nonsense line\n", {})
    assert cgroup_memory_limit(root) is None
    (root / "sys/fs/cgroup").mkdir(parents=True)
    (root / "sys/fs/cgroup/memory.max").write_text("-1\n")
    assert cgroup_memory_limit(root) is None


def test_without_mountinfo_the_usual_mount_points_are_used(tmp_path: Path) -> None:
    root = cgroup_tree(tmp_path, "0::/a\n", "", {"sys/fs/cgroup/a/memory.max": str(5 * GIB)})
    (root / "proc/self/mountinfo").unlink()
    assert cgroup_memory_limit(root).bytes == 5 * GIB  # type: ignore[union-attr]


def test_this_machine_agrees_with_the_kernel() -> None:
    """On the real /proc and /sys: whatever this process's cgroup says, read by hand."""
    limit = host_memory_limit()
    assert limit.bytes > 0
    found = cgroup_memory_limit()
    if found is not None:
        assert Path(found.source).read_text().strip() == str(found.bytes)


def _v1_memory_dir() -> Path | None:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            base = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            return base if base.is_dir() else None
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="making a memory cgroup needs root")
def test_a_real_v1_memory_cgroup_made_here_is_found_by_a_process_inside_it() -> None:
    parent = _v1_memory_dir()
    if parent is None or not os.access(parent, os.W_OK):
        pytest.skip("no writable cgroup v1 memory hierarchy here")
    group = parent / f"docparser-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        (group / "memory.limit_in_bytes").write_text(str(768 * 2**20))
        code = (
            "import os,sys\n"
            "open(sys.argv[1] + '/cgroup.procs', 'w').write(str(os.getpid()))\n"
            "from docparser_runtime.sizing.cgroup_memory import cgroup_memory_limit\n"
            "print(cgroup_memory_limit().bytes)\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code, str(group)], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        assert int(out.stdout.strip()) == 768 * 2**20
    finally:
        group.rmdir()

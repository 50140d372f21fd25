"""Remove what the local cluster left on the host: containers, mounts, network, cgroups.

The namespaced nodes' iptables, routes and bridges live in their network namespaces and go
with them (netns.py); node 0's are the host's and are removed here one by one.

WHY a separate, idempotent pass: containerd's shims outlive containerd, the kubelet's cgroups
and mounts outlive the kubelet, and CNI leaves a bridge and iptables chains. `cluster-down`
runs this after stopping the daemons, and again from a fresh process if a supervisor crashed,
so a second `cluster-up` always starts from a clean machine. Every step tolerates "already
gone"; each one that fails is reported, not raised, so the later steps still run.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

from .configs import BRIDGE, Layout, NodeDirs
from .netns import remove_node_cgroups, teardown_host_network

# Paths outside the work dir that containerd 1.6, CNI and the kubelet use and cannot move.
HOST_PATHS = (
    "/run/containerd/io.containerd.runtime.v2.task/k8s.io",
    "/var/log/containers",
    "/var/tmp/docparser-e2e",  # hostPath volumes of the e2e/cluster scenarios
)
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Fixed paths the kubelets and CNI create outside the work dir. Shared with any other kubelet
# or CNI user on the machine, so only our files go, and a directory only once it is empty.
OUR_FILES = ("/var/lib/kubelet/device-plugins/kubelet.sock",)
EMPTY_DIRS = (
    "/var/lib/kubelet/device-plugins",
    "/var/lib/kubelet",
    "/var/lib/cni/results",
    "/var/lib/cni",
)


def _run(argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def kill_containers(layout: NodeDirs, problems: list[str]) -> None:
    """SIGKILL every task in containerd's k8s.io namespace and delete it (containerd still up)."""
    if not layout.containerd_socket.exists():
        return
    ctr = ["ctr", "--address", str(layout.containerd_socket), "-n", "k8s.io"]
    tasks = _run([*ctr, "tasks", "ls", "-q"])
    for task in tasks.stdout.split():
        _run([*ctr, "tasks", "kill", "-s", "SIGKILL", task])
        _run([*ctr, "tasks", "rm", "-f", task])
    for container in _run([*ctr, "containers", "ls", "-q"]).stdout.split():
        result = _run([*ctr, "containers", "rm", container])
        if result.returncode != 0:
            problems.append(f"container {container}: {result.stderr.strip()}")


def kill_strays(layout: Layout) -> None:
    """Shims (and anything else) still started against our containerd socket or work dir."""
    marker = str(layout.root)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(proc.name), signal.SIGKILL)


def unmount_under(prefixes: list[str], problems: list[str]) -> None:
    """Lazy-unmount every mount below the prefixes, deepest first (volumes, rootfs, netns)."""
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if any(point == p or point.startswith(p.rstrip("/") + "/") for p in prefixes):
            mounts.append(point)
    for point in sorted(set(mounts), key=len, reverse=True):
        result = _run(["umount", "-l", point])
        if result.returncode != 0 and "not mounted" not in result.stderr:
            problems.append(f"umount {point}: {result.stderr.strip()}")


def remove_netns(problems: list[str]) -> None:
    """The network namespaces CNI made for our pods (containerd names them cni-<uuid>)."""
    netns = Path("/run/netns")
    if not netns.is_dir():
        return
    for entry in netns.glob("cni-*"):
        _run(["umount", "-l", str(entry)])
        try:
            entry.unlink()
        except OSError as err:
            problems.append(f"netns {entry}: {err}")


def remove_network(layout: Layout, kube_proxy: Path | None, problems: list[str]) -> None:
    """The bridge, kube-proxy's chains and the CNI masquerade chains."""
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        result = _run(["ip", "link", "delete", BRIDGE])
        if result.returncode != 0:
            problems.append(f"bridge {BRIDGE}: {result.stderr.strip()}")
    if kube_proxy and kube_proxy.exists():
        _run([str(kube_proxy), "--cleanup"], timeout=60)
    ours = ("CNI-", "KUBE-")
    for table in ("nat", "filter", "mangle"):
        listing = _run(["iptables", "-t", table, "-S"]).stdout.splitlines()
        chains = [
            r.split()[1] for r in listing if r.startswith("-N ") and r.split()[1].startswith(ours)
        ]
        for rule in listing:  # jumps from built-in chains (INPUT, POSTROUTING...) into ours
            words = shlex.split(rule)
            jump = words[words.index("-j") + 1] if "-j" in words else ""
            if rule.startswith("-A ") and not words[1].startswith(ours) and jump.startswith(ours):
                _run(["iptables", "-t", table, "-D", *words[1:]])
        for verb in ("-F", "-X"):
            for chain in chains:
                result = _run(["iptables", "-t", table, verb, chain])
                if verb == "-X" and result.returncode != 0:
                    problems.append(f"iptables -t {table} -X {chain}: {result.stderr.strip()}")


def remove_cgroups(problems: list[str]) -> None:
    """The kubelet's /kubepods hierarchy in every cgroup v1 controller (and unified)."""
    if not CGROUP_ROOT.is_dir():
        return
    for controller in CGROUP_ROOT.iterdir():
        top = controller / "kubepods"
        if not top.is_dir():
            continue
        for path in sorted(
            (p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        ):
            with contextlib.suppress(OSError):
                path.rmdir()
        try:
            top.rmdir()
        except OSError as err:
            problems.append(f"cgroup {top}: {err}")


def clean_host(
    layout: Layout, kube_proxy: Path | None = None, *, remove_root: bool = True
) -> list[str]:
    """Every step, in order; returns what could not be removed (empty when all is clean)."""
    problems: list[str] = []
    nodes_dir = layout.root / "nodes"
    for dirs in [layout, *(NodeDirs(d) for d in sorted(nodes_dir.glob("*")))]:
        kill_containers(dirs, problems)
    kill_strays(layout)
    unmount_under([str(layout.root), *HOST_PATHS], problems)
    remove_netns(problems)
    teardown_host_network(layout.root / "ip_forward.saved", problems)
    remove_network(layout, kube_proxy, problems)
    remove_cgroups(problems)
    remove_node_cgroups(problems)
    for path in HOST_PATHS:
        shutil.rmtree(path, ignore_errors=True)
    for path in OUR_FILES:
        with contextlib.suppress(OSError):
            Path(path).unlink()
    for cached in Path("/var/lib/cni/results").glob("docparser-*"):  # CNI's result cache
        with contextlib.suppress(OSError):
            cached.unlink()
    for path in EMPTY_DIRS:
        with contextlib.suppress(OSError):
            Path(path).rmdir()
    for leftover in (
        "/run/containerd/runc/k8s.io",
        "/run/containerd/runc",
        "/run/containerd/s",
        "/run/containerd",
    ):
        with contextlib.suppress(OSError):  # only when empty: another containerd may use them
            Path(leftover).rmdir()
    if remove_root:
        shutil.rmtree(layout.root, ignore_errors=True)
        if layout.root.exists():
            problems.append(f"could not remove {layout.root}")
    return problems

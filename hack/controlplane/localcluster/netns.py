"""The host side of a namespaced node: its network namespace, veth, routes and cgroup root.

WHY plain `ip` commands and `nsenter --net`: a node's containerd, kubelet and kube-proxy must
share the node's network namespace (CNI wires pods into the namespace of the containerd that
calls it; kube-proxy programs the iptables of its own namespace) but NOT get a mount namespace
of their own, which `ip netns exec` would give them: the kubelet's volume mounts must stay
visible to containerd and runc. Every step here is undone by `teardown_host_network` and
`remove_node_cgroups`, which `cluster-down` runs even when the supervisor crashed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from .topology import (
    CGROUP_PREFIX,
    NETNS_PREFIX,
    NODE_BRIDGE,
    NODE_NET,
    NodePlan,
    host_bridge_address,
    node_routes,
)

CGROUP_ROOT = Path("/sys/fs/cgroup")
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")


class NetworkSetupFailed(RuntimeError):
    """An `ip` command failed; says which and why."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise NetworkSetupFailed(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


def in_netns(node: NodePlan, argv: list[str]) -> list[str]:
    """`argv` run in the node's network namespace only (same mounts, same cgroups)."""
    if node.netns is None:
        return argv
    return ["nsenter", f"--net=/run/netns/{node.netns}", "--", *argv]


def ensure_host_bridge(saved_forwarding: Path) -> None:
    """The host bridge and the host's forwarding (its old value saved for cluster-down)."""
    if not Path(f"/sys/class/net/{NODE_BRIDGE}").exists():
        _ip("link", "add", NODE_BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{host_bridge_address()}/{NODE_NET.prefixlen}", "dev", NODE_BRIDGE)
        _ip("link", "set", NODE_BRIDGE, "up")
    if not saved_forwarding.exists():
        saved_forwarding.write_text(IP_FORWARD.read_text())
    # The host forwards between a namespaced node and node 0's pods (dp-cni0).
    IP_FORWARD.write_text("1\n")


def setup_node_network(node: NodePlan, nodes: list[NodePlan]) -> None:
    """Namespace, veth to the host bridge, address, routes to every other node's pods."""
    assert node.netns is not None
    _ip("netns", "add", node.netns)
    _ip("link", "add", node.veth, "type", "veth", "peer", "name", "eth0", "netns", node.netns)
    _ip("link", "set", node.veth, "master", NODE_BRIDGE, "up")
    ns = ["-n", node.netns]
    _ip(*ns, "addr", "add", f"{node.address}/{NODE_NET.prefixlen}", "dev", "eth0")
    _ip(*ns, "link", "set", "lo", "up")
    _ip(*ns, "link", "set", "eth0", "up")
    _ip(*ns, "route", "add", "default", "via", host_bridge_address())
    for destination, gateway in node_routes(node, nodes):
        _ip(*ns, "route", "add", destination, "via", gateway)
    # A new namespace does not forward; the node routes between eth0 and its pods' bridge.
    forward = subprocess.run(
        in_netns(node, ["sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"]),
        capture_output=True,
        text=True,
    )
    if forward.returncode != 0:
        raise NetworkSetupFailed(f"ip_forward in {node.netns}: {forward.stderr.strip()}")
    # The host reaches this node's pods through its veth address.
    _ip("route", "replace", node.pod_cidr, "via", node.address)


def set_node_link(node: NodePlan, up: bool) -> None:
    """Cut (or restore) the node's cable: a dead node's pods time out instead of refusing."""
    _ip("link", "set", node.veth, "up" if up else "down")


def make_cgroup_root(node: NodePlan) -> None:
    """The kubelet refuses a cgroupRoot that does not exist: make it in every hierarchy."""
    name = node.cgroup_root.strip("/")
    if not name:
        return
    for controller in CGROUP_ROOT.iterdir():
        if not controller.is_dir() or controller.is_symlink():
            continue
        path = controller / name
        with contextlib.suppress(FileExistsError):
            path.mkdir()
        if controller.name == "cpuset":  # a v1 cpuset child starts with no CPUs or memory
            for key in ("cpuset.cpus", "cpuset.mems"):
                (path / key).write_text((controller / key).read_text())


def kill_cgroup_processes(top: Path) -> int:
    """SIGKILL every process in a cgroup tree (a node's pods outliving its containerd)."""
    killed = 0
    for procs in top.rglob("cgroup.procs"):
        with contextlib.suppress(OSError):
            for pid in procs.read_text().split():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(pid), signal.SIGKILL)
                    killed += 1
    return killed


def remove_node_cgroups(problems: list[str]) -> None:
    """Every `/docparser-node-*` tree (its processes killed, pods' cgroups first)."""
    if not CGROUP_ROOT.is_dir():
        return
    for top in (CGROUP_ROOT / "pids").glob(f"{CGROUP_PREFIX}*"):
        if kill_cgroup_processes(top):
            time.sleep(0.5)  # SIGKILLed processes leave their cgroups a moment later
    for controller in CGROUP_ROOT.iterdir():
        if not controller.is_dir() or controller.is_symlink():
            continue
        for top in controller.glob(f"{CGROUP_PREFIX}*"):
            for path in sorted(
                (p for p in top.rglob("*") if p.is_dir()),
                key=lambda p: len(p.parts),
                reverse=True,
            ):
                with contextlib.suppress(OSError):
                    path.rmdir()
            try:
                top.rmdir()
            except OSError as err:
                problems.append(f"cgroup {top}: {err}")


def teardown_host_network(saved_forwarding: Path, problems: list[str]) -> None:
    """Node namespaces (their veths, iptables and routes go with them), the bridge, forwarding."""
    netns = Path("/run/netns")
    for entry in sorted(netns.glob(f"{NETNS_PREFIX}*")) if netns.is_dir() else []:
        result = _ip("netns", "delete", entry.name, check=False)
        if result.returncode != 0:
            problems.append(f"netns {entry.name}: {result.stderr.strip()}")
    if Path(f"/sys/class/net/{NODE_BRIDGE}").exists():
        result = _ip("link", "delete", NODE_BRIDGE, check=False)
        if result.returncode != 0:
            problems.append(f"bridge {NODE_BRIDGE}: {result.stderr.strip()}")
    if saved_forwarding.exists():
        with contextlib.suppress(OSError):
            IP_FORWARD.write_text(saved_forwarding.read_text())
        saved_forwarding.unlink()

"""One node's daemons: containerd, the kubelet and kube-proxy (in the node's network namespace).

WHY each node has its own containerd (state, socket, CNI config, image store): that is what a
node is; a kubelet sharing another's runtime would see its pods. A namespaced node's daemons
run under `nsenter --net` (netns.py says why not `ip netns exec`), so they share the host's
mounts: the kubelet's root is a shared mount that containerd and runc see.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from ..processes import ManagedProcess, ProcessFailed
from . import configs
from .configs import Layout, NodeDirs
from .netns import in_netns, make_cgroup_root, setup_node_network
from .topology import NodePlan

# What the kubelet checks with protectKernelDefaults (it exits if the host differs).
KERNEL_DEFAULTS = {"vm/overcommit_memory": "1", "kernel/panic": "10", "kernel/panic_on_oops": "1"}
CTR_TRY_TIMEOUT_S = 10.0  # one `ctr version`; a loaded host has been seen to need over 5 s


class NotReady(ProcessFailed):
    """A readiness command never succeeded within its deadline."""


def wait_for_command(
    argv: list[str],
    what: str,
    deadline_s: float,
    *,
    try_timeout_s: float = CTR_TRY_TIMEOUT_S,
    pause_s: float = 0.5,
    alive: Callable[[], None] = lambda: None,
) -> float:
    """Run ``argv`` until it exits 0 and return the seconds that took; raise NotReady naming
    ``what``, the command, the time waited and the last failure when ``deadline_s`` passes.

    WHY a retry of each try, timeouts included: a `make cluster-up` right after another cluster
    went down (load average near 3) saw one `ctr version` take over 5 s; that single slow answer
    ended the whole start as "the nodes did not come up" with no word of what was waited for.
    A try is cut at ``try_timeout_s`` (or the time left) and counts as one more failure;
    ``alive`` (the daemon's check) ends the wait at once if what is awaited has died."""
    start = time.monotonic()
    tries, last = 0, "no try ran"
    while tries == 0 or time.monotonic() - start + pause_s < deadline_s:
        if tries:
            time.sleep(pause_s)
        alive()
        tries += 1
        limit = max(0.1, min(try_timeout_s, deadline_s - (time.monotonic() - start)))
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            last = f"no answer within {limit:.1f}s"
        except OSError as err:
            last = str(err)
        else:
            if out.returncode == 0:
                return time.monotonic() - start
            said = (out.stderr.strip() or out.stdout.strip())[-500:]
            last = f"exit {out.returncode}: {said or '(no output)'}"
    raise NotReady(
        f"{what}: gave up after {time.monotonic() - start:.1f}s (deadline {deadline_s:g}s) and "
        f"{tries} tries of `{' '.join(argv)}` (each up to {try_timeout_s:g}s); last: {last}"
    )


class NodeAgent:
    """The daemons of one node; `start()` in dependency order, `stop()` in reverse."""

    def __init__(
        self,
        layout: Layout,
        node: NodePlan,
        nodes: list[NodePlan],
        bins: Path,
        kubeconfigs: dict[str, Path],
        ca: Path,
    ):
        self.layout, self.node, self.nodes, self.bins = layout, node, nodes, bins
        self.dirs: NodeDirs = layout.node_dirs(node)
        self.kubeconfigs, self.ca = kubeconfigs, ca
        self.processes: list[ManagedProcess] = []
        self.network_ready = False

    def _spawn(self, daemon: str, argv: list[str]) -> ManagedProcess:
        name = self.layout.node_log(self.node, daemon)
        process = ManagedProcess(name, in_netns(self.node, argv), self.layout.logs / f"{name}.log")
        self.processes.append(process)
        return process

    def start(self, timeout: float) -> None:
        for d in (
            self.layout.logs,
            self.dirs.cni_conf,
            self.dirs.cni_data,
            self.dirs.kubelet_root,
            self.dirs.pod_logs,
            self.dirs.sysctl_overrides,
            self.dirs.containerd,
        ):
            d.mkdir(parents=True, exist_ok=True)
        if self.node.netns is not None and not self.network_ready:
            setup_node_network(self.node, self.nodes)
            self.network_ready = True
        make_cgroup_root(self.node)
        self.start_containerd(timeout)

    def start_containerd(self, timeout: float) -> None:
        config = self.dirs.containerd / "config.toml"
        config.write_text(configs.containerd_config(self.dirs))
        (self.dirs.cni_conf / "10-docparser.conflist").write_text(
            configs.cni_conflist(self.dirs, self.node)
        )
        containerd = self._spawn("containerd", ["containerd", "--config", str(config)])
        socket = self.dirs.containerd_socket
        try:
            wait_for_command(
                ["ctr", "--address", str(socket), "version"],
                f"containerd on {self.node.name} (its socket {socket})",
                timeout,
                alive=containerd.check_alive,
            )
        except NotReady as err:
            raise NotReady(f"{err}\ncontainerd's log:\n{containerd.log_tail()}") from None

    def start_kubelet(self, timeout: float) -> None:
        root = self.dirs.kubelet_root
        mounted = subprocess.run(["mountpoint", "-q", str(root)]).returncode == 0
        if not mounted:  # volumes the kubelet mounts must be visible to runc: a shared mount
            subprocess.run(["mount", "--bind", str(root), str(root)], check=True)
            subprocess.run(["mount", "--make-rshared", str(root)], check=True)
        binds = []
        for entry, value in KERNEL_DEFAULTS.items():
            override = self.dirs.sysctl_overrides / entry.replace("/", "_")
            override.write_text(value + "\n")
            binds.append(f"mount --bind {override} /proc/sys/{entry}")
        config = self.dirs.kubelet_root.parent / f"kubelet-config-{self.node.name}.yaml"
        config.write_text(configs.kubelet_config(self.dirs, self.node, self.ca))
        kubelet = [
            str(self.bins / "kubelet"),
            f"--config={config}",
            f"--kubeconfig={self.kubeconfigs[f'kubelet-{self.node.name}']}",
            f"--root-dir={root}",
            f"--cert-dir={self.layout.pki / f'kubelet-{self.node.name}'}",
            f"--hostname-override={self.node.name}",
            f"--node-ip={self.node.address}",
            f"--node-labels={configs.kubelet_labels(self.node)}",
        ]
        # Own mount namespace: /proc private there, the three sysctls the kubelet checks read
        # the values it expects; the host's real values never change.
        script = " && ".join(["mount --make-private /proc", *binds, 'exec "$@"'])
        process = self._spawn(
            "kubelet",
            [
                "unshare",
                "--mount",
                "--propagation",
                "unchanged",
                "--",
                "sh",
                "-c",
                script,
                "kubelet",
                *kubelet,
            ],
        )
        host = "127.0.0.1" if self.node.netns is None else self.node.address
        process.wait_until(
            lambda: httpx.get(f"http://{host}:10248/healthz", timeout=2).status_code == 200,
            f"kubelet /healthz on {self.node.name}",
            timeout,
        )

    def start_kube_proxy(self) -> None:
        config = self.dirs.kubelet_root.parent / f"kube-proxy-config-{self.node.name}.yaml"
        config.write_text(configs.kube_proxy_config(self.node, self.kubeconfigs["kube-proxy"]))
        self._spawn("kube-proxy", [str(self.bins / "kube-proxy"), f"--config={config}"])

    def start_rest(self, timeout: float) -> None:
        """After the pause image is imported: the kubelet, then kube-proxy."""
        self.start_kubelet(timeout)
        self.start_kube_proxy()

    def check_alive(self) -> None:
        for process in self.processes:
            process.check_alive()

    def kill(self) -> None:
        """Abruptly, as a node dies: every daemon SIGKILLed (its containers are the caller's)."""
        for process in reversed(self.processes):
            process.kill()
        self.processes.clear()

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()


def containerd_tasks(dirs: NodeDirs) -> list[str]:
    out = subprocess.run(
        ["ctr", "--address", str(dirs.containerd_socket), "-n", "k8s.io", "tasks", "ls", "-q"],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise ProcessFailed(f"ctr tasks ls: {out.stderr.strip()}")
    return out.stdout.split()

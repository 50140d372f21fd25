"""Start the local cluster's control plane and its nodes' daemons, children of one supervisor.

WHY one long-lived parent: every daemon is a `ManagedProcess` (own process group, killed by the
kernel if its parent dies), so a crashed supervisor never leaves an API server or a kubelet
running, and nothing turns into a zombie. `__main__.py` runs this in a detached process for
`make cluster-up`; `cluster-down` signals it and it stops everything in reverse order.
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from ..harness import binaries_dir
from ..processes import ManagedProcess, ProcessFailed, write_service_account_keys
from . import configs
from .agent import NodeAgent
from .configs import Layout, Network
from .pki import CertificateAuthority, KeyPair
from .topology import NodePlan

NODE_BINARIES = ("kubelet", "kube-scheduler", "kube-proxy", "kubectl")
ETCD_CLIENT_PORT, ETCD_PEER_PORT = 23790, 23800
GPU_RESOURCE = "nvidia.com/gpu"
# How long a silent node stays Ready (the default is 50 s): a dead node is seen sooner, while
# a kubelet slowed by a busy 2-core machine (lease renewed every 10 s) is not declared lost.
NODE_MONITOR_GRACE = "30s"
# How often the node controller looks (5 s by default): a silent node is marked lost at most
# this long after its grace, and the pods' tolerationSeconds start counting then.
NODE_MONITOR_PERIOD = "2s"


class NodeUnavailable(RuntimeError):
    """Something the node needs is missing (binaries, containerd, root); says what."""


def node_binaries_missing(directory: Path | None = None) -> list[str]:
    directory = directory or binaries_dir()
    names = ("etcd", "kube-apiserver", "kube-controller-manager", *NODE_BINARIES)
    return [n for n in names if not os.access(directory / n, os.X_OK)]


def host_tools_missing() -> list[str]:
    tools = (
        "containerd",
        "containerd-shim-runc-v2",
        "runc",
        "ctr",
        "iptables",
        "unshare",
        "nsenter",
        "mount",
        "ip",
    )
    missing = [t for t in tools if not shutil.which(t)]
    if not Path(configs.CNI_BIN_DIR, "bridge").exists():
        missing.append("containernetworking-plugins")
    return missing


def node_ip() -> str:
    """The first global IPv4 address of the machine (the kubelet rejects a loopback node IP)."""
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True
    ).stdout
    for line in out.splitlines():
        parts = line.split()
        if "inet" in parts:
            address = parts[parts.index("inet") + 1].split("/")[0]
            if not address.startswith("127."):
                return address
    raise NodeUnavailable("no global IPv4 address on this machine: the kubelet needs a node IP")


@dataclass
class Credentials:
    """The PKI and kubeconfigs every component uses."""

    ca: Path
    apiserver: KeyPair
    apiserver_kubelet_client: KeyPair
    sa_public: Path
    sa_private: Path
    kubeconfigs: dict[str, Path] = field(default_factory=dict)


def write_credentials(layout: Layout, network: Network, nodes: list[NodePlan]) -> Credentials:
    ca = CertificateAuthority(layout.pki)
    apiserver = ca.issue(
        "apiserver",
        "kube-apiserver",
        server_names=(
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ),
        server_ips=("127.0.0.1", network.node_ip, network.kubernetes_service_ip),
    )
    kubelet_client = ca.issue(
        "apiserver-kubelet-client", "kube-apiserver-kubelet-client", organization="system:masters"
    )
    sa_public, sa_private = write_service_account_keys(layout.pki)
    creds = Credentials(ca.cert, apiserver, kubelet_client, sa_public, sa_private)
    layout.kubeconfigs.mkdir(parents=True, exist_ok=True)
    users = {
        "admin": ("docparser-local-admin", "system:masters"),
        "controller-manager": ("system:kube-controller-manager", None),
        "scheduler": ("system:kube-scheduler", None),
        "kube-proxy": ("system:kube-proxy", None),
        **{f"kubelet-{node.name}": (f"system:node:{node.name}", "system:nodes") for node in nodes},
    }
    for name, (common_name, group) in users.items():
        pair = ca.issue(name, common_name, organization=group)
        path = layout.admin_kubeconfig if name == "admin" else layout.kubeconfigs / f"{name}.yaml"
        path.write_text(
            configs.kubeconfig(network.server, ca.cert, pair.cert, pair.key, common_name)
        )
        path.chmod(0o600)
        creds.kubeconfigs[name] = path
    return creds


class LocalCluster:
    """The running stack: `start()` brings up the control plane, then every node."""

    def __init__(
        self, layout: Layout, network: Network, nodes: list[NodePlan], bins: Path | None = None
    ):
        self.layout, self.network, self.nodes = layout, network, nodes
        self.bins = bins or binaries_dir()
        self.processes: list[ManagedProcess] = []  # the control plane's
        self.agents: dict[str, NodeAgent] = {}
        self.creds: Credentials | None = None

    # -- helpers -------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str]) -> ManagedProcess:
        process = ManagedProcess(name, argv, self.layout.logs / f"{name}.log")
        self.processes.append(process)
        return process

    def _https_ok(self, url: str, cert: KeyPair | None = None) -> bool:
        assert self.creds is not None
        context = ssl.create_default_context(cafile=str(self.creds.ca))
        if cert:
            context.load_cert_chain(str(cert.cert), str(cert.key))
        return httpx.get(url, verify=context, timeout=3).status_code == 200

    def kubectl(self, *args: str, timeout: float = 60, stdin: str | None = None) -> str:
        out = subprocess.run(
            [str(self.bins / "kubectl"), "--kubeconfig", str(self.layout.admin_kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if out.returncode != 0:
            raise ProcessFailed(f"kubectl {' '.join(args)}: {out.stderr.strip()}")
        return out.stdout

    # -- start ---------------------------------------------------------------------------
    def start_control_plane(self, timeout: float = 120.0) -> None:
        for d in (self.layout.logs, self.layout.etcd):
            d.mkdir(parents=True, exist_ok=True)
        self.creds = write_credentials(self.layout, self.network, self.nodes)
        self._start_etcd(timeout)
        self._start_apiserver(timeout)
        self._start_controllers()

    def agent(self, node: NodePlan) -> NodeAgent:
        assert self.creds is not None
        if node.name not in self.agents:
            self.agents[node.name] = NodeAgent(
                self.layout, node, self.nodes, self.bins, self.creds.kubeconfigs, self.creds.ca
            )
        return self.agents[node.name]

    def _start_etcd(self, timeout: float) -> None:
        client = f"http://127.0.0.1:{ETCD_CLIENT_PORT}"
        peer = f"http://127.0.0.1:{ETCD_PEER_PORT}"
        etcd = self._spawn(
            "etcd",
            [
                str(self.bins / "etcd"),
                "--name=local",
                f"--data-dir={self.layout.etcd}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=local={peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        etcd.wait_until(
            lambda: httpx.get(f"{client}/health", timeout=2).json().get("health") == "true",
            "etcd",
            timeout,
        )

    def _start_apiserver(self, timeout: float) -> None:
        creds = self.creds
        assert creds is not None
        issuer = "https://kubernetes.default.svc.cluster.local"
        apiserver = self._spawn(
            "kube-apiserver",
            [
                str(self.bins / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{ETCD_CLIENT_PORT}",
                f"--bind-address={self.network.node_ip}",
                f"--advertise-address={self.network.node_ip}",
                f"--secure-port={self.network.apiserver_port}",
                f"--tls-cert-file={creds.apiserver.cert}",
                f"--tls-private-key-file={creds.apiserver.key}",
                f"--client-ca-file={creds.ca}",
                f"--kubelet-client-certificate={creds.apiserver_kubelet_client.cert}",
                f"--kubelet-client-key={creds.apiserver_kubelet_client.key}",
                "--kubelet-preferred-address-types=InternalIP",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                f"--service-account-issuer={issuer}",
                f"--service-account-key-file={creds.sa_public}",
                f"--service-account-signing-key-file={creds.sa_private}",
                f"--api-audiences={issuer}",
                f"--service-cluster-ip-range={self.network.service_cidr}",
                "--allow-privileged=true",
                "--profiling=false",
            ],
        )
        admin = KeyPair(self.layout.pki / "admin.crt", self.layout.pki / "admin.key")
        apiserver.wait_until(
            lambda: self._https_ok(f"{self.network.server}/readyz", admin),
            "kube-apiserver /readyz",
            timeout,
        )

    def _start_controllers(self) -> None:
        creds = self.creds
        assert creds is not None
        self._spawn(
            "kube-controller-manager",
            [
                str(self.bins / "kube-controller-manager"),
                f"--kubeconfig={creds.kubeconfigs['controller-manager']}",
                "--controllers=*",
                "--leader-elect=false",
                f"--node-monitor-grace-period={NODE_MONITOR_GRACE}",
                f"--node-monitor-period={NODE_MONITOR_PERIOD}",
                f"--service-account-private-key-file={creds.sa_private}",
                f"--root-ca-file={creds.ca}",
                "--use-service-account-credentials=true",
                "--bind-address=127.0.0.1",
            ],
        )
        scheduler_config = self.layout.kubeconfigs / "scheduler-config.yaml"
        scheduler_config.write_text(configs.scheduler_config(creds.kubeconfigs["scheduler"]))
        self._spawn(
            "kube-scheduler",
            [
                str(self.bins / "kube-scheduler"),
                f"--config={scheduler_config}",
                "--bind-address=127.0.0.1",
            ],
        )
        time.sleep(0.5)  # a bad flag exits at once: report it here
        for p in self.processes:
            p.check_alive()

    # -- nodes ---------------------------------------------------------------------------
    def check_alive(self) -> None:
        for process in self.processes:
            process.check_alive()
        for agent in self.agents.values():
            agent.check_alive()

    def wait_nodes_ready(self, names: list[str], timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                out = self.kubectl(
                    "get",
                    "nodes",
                    "-o",
                    "jsonpath={range .items[*]}{.metadata.name}="
                    "{.status.conditions[?(@.type=='Ready')].status} {end}",
                )
                ready = {w.split("=")[0] for w in out.split() if w.endswith("=True")}
                last = out
            except ProcessFailed as err:
                ready, last = set(), str(err)
            if set(names) <= ready:
                return
            time.sleep(0.5)
        raise ProcessFailed(f"nodes {names} not Ready after {timeout:.0f}s ({last})")

    def advertise_gpus(self, node: NodePlan, count: int = 2) -> None:
        """A fake extended resource, so GPU pods schedule and a full node is real."""
        patch = f'{{"status":{{"capacity":{{"{GPU_RESOURCE}":"{count}"}}}}}}'
        self.kubectl(
            "patch", "node", node.name, "--subresource=status", "--type=merge", "-p", patch
        )

    def stop(self) -> None:
        for agent in reversed(list(self.agents.values())):
            agent.stop()
        self.agents.clear()
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()

"""Pure renderers for the local cluster's config files (no I/O, so they are unit-tested).

WHY these exact settings: each one is a measured need of this kind of machine (a VM with cgroup
v1, no CAP_SYS_RESOURCE, no systemd, no registry), recorded in docs/operations.md. Everything
the stack writes lives under one work dir (`Layout`), so `cluster-down` can remove it whole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from .topology import CLUSTER_CIDR, NODE_NAME, ZONE_LABEL, NodePlan

__all__ = ["NODE_NAME", "Layout", "Network", "NodeDirs"]

BRIDGE = "dp-cni0"  # our own bridge: never the podman/cni0 a person may already have
PAUSE_IMAGE = "docker.io/docparser/pause:local"
CNI_BIN_DIR = "/usr/lib/cni"  # Debian's containernetworking-plugins


@dataclass(frozen=True)
class Network:
    """Addresses: the node's own IP (never loopback: the kubelet rejects it) and the ranges."""

    node_ip: str
    service_cidr: str = "10.96.0.0/24"
    apiserver_port: int = 6443

    @property
    def kubernetes_service_ip(self) -> str:
        """The first address of the service range: the `kubernetes` Service's ClusterIP."""
        base, _ = self.service_cidr.split("/")
        head, last = base.rsplit(".", 1)
        return f"{head}.{int(last) + 1}"

    @property
    def server(self) -> str:
        return f"https://{self.node_ip}:{self.apiserver_port}"


@dataclass(frozen=True)
class NodeDirs:
    """What one node writes (containerd, CNI state, the kubelet's dirs), under one dir.

    Node 0 keeps these directly under the work dir (where the single-node cluster had them);
    node i has its own under `nodes/<name>/`, so no two containerds or kubelets share state.
    """

    root: Path

    @property
    def containerd(self) -> Path:
        return self.root / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd / "containerd.sock"

    @property
    def cni_conf(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_data(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def sysctl_overrides(self) -> Path:
        return self.root / "sysctl"


@dataclass(frozen=True)
class Layout(NodeDirs):
    """Every path the cluster writes, under one work dir (node 0's dirs are at its top)."""

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def etcd(self) -> Path:
        return self.root / "etcd"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def kubeconfigs(self) -> Path:
        return self.root / "kubeconfig.d"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def state_file(self) -> Path:
        return self.root / "cluster.json"

    @property
    def requests(self) -> Path:
        """Where `localcluster node-stop/node-start` leave requests for the supervisor."""
        return self.root / "requests"

    def node_dirs(self, node: NodePlan) -> NodeDirs:
        return self if node.netns is None else NodeDirs(self.root / "nodes" / node.name)

    def node_log(self, node: NodePlan, daemon: str) -> str:
        """A daemon's log name: `kubelet` for node 0 (as before), `kubelet-<name>` otherwise."""
        return daemon if node.netns is None else f"{daemon}-{node.name}"


def containerd_config(layout: NodeDirs) -> str:
    """containerd 1.6 (config v2): CRI with our pause image, our CNI dir, no OOM-score lowering.

    restrict_oom_score_adj: runc cannot lower oom_score_adj without CAP_SYS_RESOURCE, which
    this sandbox lacks; disable_apparmor: no AppArmor here; conf_dir: the podman package puts a
    conflist in /etc/cni/net.d that must not be picked up.
    """
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return "\n".join(
        [
            "version = 2",
            f'root = "{layout.containerd / "root"}"',
            f'state = "{layout.containerd / "state"}"',
            "[grpc]",
            f'  address = "{layout.containerd_socket}"',
            "[ttrpc]",
            f'  address = "{layout.containerd / "containerd.sock.ttrpc"}"',
            f"[{cri}]",
            f'  sandbox_image = "{PAUSE_IMAGE}"',
            "  restrict_oom_score_adj = true",
            "  disable_apparmor = true",
            "  enable_selinux = false",
            f"[{cri}.containerd]",
            '  snapshotter = "overlayfs"',
            '  default_runtime_name = "runc"',
            f"[{cri}.containerd.runtimes.runc]",
            '  runtime_type = "io.containerd.runc.v2"',
            f"[{cri}.containerd.runtimes.runc.options]",
            "  SystemdCgroup = false",
            f"[{cri}.cni]",
            f'  bin_dir = "{CNI_BIN_DIR}"',
            f'  conf_dir = "{layout.cni_conf}"',
            "",
        ]
    )


def cni_conflist(layout: NodeDirs, node: NodePlan) -> str:
    """bridge + host-local (state in the node's dir) + portmap; loopback is added by the CRI.

    The bridge has the same name on every node: each node's is in its own network namespace.
    """
    return json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "docparser",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": True,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(layout.cni_data),
                        "ranges": [[{"subnet": node.pod_cidr, "gateway": node.pod_gateway}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        },
        indent=2,
    )


def kubeconfig(server: str, ca: Path, cert: Path, key: Path, user: str) -> str:
    """A kubeconfig that authenticates with a client cert (paths, so it can be inspected)."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "docparser-local",
                    "cluster": {"server": server, "certificate-authority": str(ca)},
                }
            ],
            "users": [
                {"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}
            ],
            "contexts": [
                {"name": "docparser-local", "context": {"cluster": "docparser-local", "user": user}}
            ],
            "current-context": "docparser-local",
        },
        sort_keys=False,
    )


def kubelet_config(layout: NodeDirs, node: NodePlan, ca: Path) -> str:
    """KubeletConfiguration for cgroup v1 without systemd, all state in the work dir.

    failCgroupV1: 1.37 refuses v1 otherwise. protectKernelDefaults: true so the kubelet never
    rewrites host sysctls; it runs in a mount namespace where the three values it checks are
    bind-mounted (see agent.py). makeIPTablesUtilChains: kube-proxy owns iptables here.
    cgroupRoot: one per node, so no two kubelets manage the same /kubepods. A namespaced node
    serves healthz on its own address (the host cannot reach the namespace's loopback).
    syncFrequency: 10s instead of 1m. A changed ConfigMap reaches a mounted volume on the
    pod's next periodic sync, so on a real node it takes up to a minute plus jitter; the
    scenarios that change one (the shadow's config) waited that minute each. The operator
    and the runtime never assume a delivery time, so a shorter one tests the same code.
    """
    return yaml.safe_dump(
        {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": node.cgroup_root,
            "failSwapOn": False,
            "syncFrequency": "10s",
            "protectKernelDefaults": True,
            "makeIPTablesUtilChains": False,
            "podLogsDir": str(layout.pod_logs),
            "clusterDNS": [],
            "podCIDR": node.pod_cidr,
            "readOnlyPort": 0,
            "address": node.address,
            "healthzBindAddress": "127.0.0.1" if node.netns is None else node.address,
            "healthzPort": 10248,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(ca)},
            },
            "authorization": {"mode": "Webhook"},
            "serializeImagePulls": False,
            "imageGCHighThresholdPercent": 100,  # never garbage-collect our imported images
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
            },
            "staticPodPath": "",
            "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
            "shutdownGracePeriod": "0s",
            "localStorageCapacityIsolation": True,
        },
        sort_keys=False,
    )


def kube_proxy_config(node: NodePlan, kubeconfig_path: Path) -> str:
    """iptables mode (no IPVS in this kernel), no conntrack sysctls, node ports on the node IP.

    clusterCIDR is the whole pod range: traffic from any node's pods is cluster traffic.
    """
    return yaml.safe_dump(
        {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig_path)},
            "mode": "iptables",
            "hostnameOverride": node.name,
            "clusterCIDR": str(CLUSTER_CIDR),
            "bindAddress": node.address,
            "healthzBindAddress": "127.0.0.1:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            "iptables": {"localhostNodePorts": False, "masqueradeAll": False},
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
            "nodePortAddresses": [f"{node.address}/32"],
        },
        sort_keys=False,
    )


def scheduler_config(kubeconfig_path: Path) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig_path)},
            "leaderElection": {"leaderElect": False},
        },
        sort_keys=False,
    )


def kubelet_labels(node: NodePlan) -> str:
    """`--node-labels`: the zone (NodeRestriction lets a kubelet set topology labels)."""
    return f"{ZONE_LABEL}={node.zone}"

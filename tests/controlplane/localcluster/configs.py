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

NODE_NAME = "docparser-node"
BRIDGE = "dp-cni0"  # our own bridge: never the podman/cni0 a person may already have
PAUSE_IMAGE = "docker.io/docparser/pause:local"
CNI_BIN_DIR = "/usr/lib/cni"  # Debian's containernetworking-plugins


@dataclass(frozen=True)
class Network:
    """Addresses: the node's own IP (never loopback: the kubelet rejects it) and the ranges."""

    node_ip: str
    pod_cidr: str = "10.244.0.0/24"
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
class Layout:
    """Every path the cluster writes, under one work dir."""

    root: Path

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

    @property
    def kubeconfigs(self) -> Path:
        return self.root / "kubeconfig.d"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def state_file(self) -> Path:
        return self.root / "cluster.json"


def containerd_config(layout: Layout) -> str:
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


def cni_conflist(layout: Layout, network: Network) -> str:
    """bridge + host-local (state in the work dir) + portmap + loopback is added by the CRI."""
    gateway = network.pod_cidr.split("/")[0].rsplit(".", 1)[0] + ".1"
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
                        "ranges": [[{"subnet": network.pod_cidr, "gateway": gateway}]],
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


def kubelet_config(layout: Layout, network: Network, ca: Path) -> str:
    """KubeletConfiguration for cgroup v1 without systemd, all state in the work dir.

    failCgroupV1: 1.37 refuses v1 otherwise. protectKernelDefaults: true so the kubelet never
    rewrites host sysctls; it runs in a mount namespace where the three values it checks are
    bind-mounted (see node.py). makeIPTablesUtilChains: kube-proxy owns iptables here.
    """
    return yaml.safe_dump(
        {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": "/",
            "failSwapOn": False,
            "protectKernelDefaults": True,
            "makeIPTablesUtilChains": False,
            "podLogsDir": str(layout.pod_logs),
            "clusterDNS": [],
            "podCIDR": network.pod_cidr,
            "readOnlyPort": 0,
            "address": network.node_ip,
            "healthzBindAddress": "127.0.0.1",
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


def kube_proxy_config(network: Network, kubeconfig_path: Path) -> str:
    """iptables mode (no IPVS in this kernel), no conntrack sysctls, node ports on the node IP."""
    return yaml.safe_dump(
        {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig_path)},
            "mode": "iptables",
            "hostnameOverride": NODE_NAME,
            "clusterCIDR": network.pod_cidr,
            "bindAddress": network.node_ip,
            "healthzBindAddress": "127.0.0.1:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            "iptables": {"localhostNodePorts": False, "masqueradeAll": False},
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
            "nodePortAddresses": [f"{network.node_ip}/32"],
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

"""The local cluster's pure parts: config renderers and the PKI (the node itself runs in
e2e/cluster, where every scenario exercises it)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import yaml
from controlplane.localcluster import configs
from controlplane.localcluster.agent import NotReady, wait_for_command
from controlplane.localcluster.configs import Layout, Network
from controlplane.localcluster.pki import CertificateAuthority
from controlplane.localcluster.topology import node_by_name, node_routes, plan_nodes
from controlplane.processes import ManagedProcess, ProcessFailed
from cryptography import x509

NETWORK = Network(node_ip="192.0.2.2")
NODES = plan_nodes(3, NETWORK.node_ip)
HOST_NODE, NODE_1 = NODES[0], NODES[1]


def test_network_addresses():
    assert NETWORK.kubernetes_service_ip == "10.96.0.1"
    assert NETWORK.server == "https://192.0.2.2:6443"


def test_containerd_config_keeps_all_state_in_the_work_dir(tmp_path):
    layout = Layout(tmp_path)
    config = tomllib.loads(configs.containerd_config(layout))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert config["root"].startswith(str(tmp_path)) and config["state"].startswith(str(tmp_path))
    assert config["grpc"]["address"] == str(layout.containerd_socket)
    assert cri["restrict_oom_score_adj"] is True  # no CAP_SYS_RESOURCE here
    assert cri["sandbox_image"] == configs.PAUSE_IMAGE
    assert cri["cni"]["conf_dir"] == str(layout.cni_conf)  # never /etc/cni/net.d
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False


def test_cni_conflist_uses_our_bridge_and_ipam_dir(tmp_path):
    conflist = json.loads(configs.cni_conflist(Layout(tmp_path), HOST_NODE))
    bridge = conflist["plugins"][0]
    assert bridge["bridge"] == configs.BRIDGE and len(configs.BRIDGE) <= 15  # IFNAMSIZ
    assert bridge["ipam"]["dataDir"].startswith(str(tmp_path))
    assert bridge["ipam"]["ranges"][0][0] == {"subnet": "10.244.0.0/24", "gateway": "10.244.0.1"}


def test_kubelet_config_never_touches_host_sysctls(tmp_path):
    config = yaml.safe_load(
        configs.kubelet_config(Layout(tmp_path), HOST_NODE, tmp_path / "ca.crt")
    )
    assert config["protectKernelDefaults"] is True  # checks, never rewrites
    assert config["failCgroupV1"] is False and config["cgroupDriver"] == "cgroupfs"
    assert config["podLogsDir"].startswith(str(tmp_path))
    assert config["authentication"]["anonymous"]["enabled"] is False


def test_kube_proxy_config_writes_no_conntrack_sysctls():
    config = yaml.safe_load(configs.kube_proxy_config(HOST_NODE, Path("/k")))
    assert config["mode"] == "iptables"  # no IPVS in this kernel
    assert all(v in (0, "0s") for v in config["conntrack"].values())
    assert config["iptables"]["localhostNodePorts"] is False
    assert config["nodePortAddresses"] == ["192.0.2.2/32"]


def test_pki_issues_certs_that_chain_to_the_ca(tmp_path):
    ca = CertificateAuthority(tmp_path)
    pair = ca.issue(
        "apiserver", "kube-apiserver", server_ips=("192.0.2.2",), server_names=("kubernetes",)
    )
    client = ca.issue("kubelet", "system:node:n", organization="system:nodes")
    root = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    for path in (pair.cert, client.cert):
        cert = x509.load_pem_x509_certificate(path.read_bytes())
        cert.verify_directly_issued_by(root)
    serving = x509.load_pem_x509_certificate(pair.cert.read_bytes())
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "kubernetes" in sans.get_values_for_type(x509.DNSName)
    subject = x509.load_pem_x509_certificate(client.cert.read_bytes()).subject.rfc4514_string()
    assert "O=system:nodes" in subject and "CN=system:node:n" in subject
    assert oct(pair.key.stat().st_mode & 0o777) == "0o600"


def test_nodes_get_distinct_ranges_zones_namespaces_and_cgroup_roots():
    assert [n.name for n in NODES] == ["docparser-node", "docparser-node-1", "docparser-node-2"]
    assert [n.zone for n in NODES] == ["zone-a", "zone-b", "zone-c"]
    assert HOST_NODE.netns is None and HOST_NODE.address == "192.0.2.2"
    assert HOST_NODE.cgroup_root == "/"  # the single-node cluster as it always was
    for field in ("pod_cidr", "address", "netns", "cgroup_root", "veth"):
        assert len({getattr(n, field) for n in NODES}) == 3, field
    assert all(len(n.veth) <= 15 for n in NODES)  # IFNAMSIZ
    assert NODE_1.pod_cidr == "10.244.1.0/24" and NODE_1.pod_gateway == "10.244.1.1"
    with pytest.raises(ValueError, match="between 1 and"):
        plan_nodes(0, "192.0.2.2")


def test_every_node_routes_to_every_other_nodes_pods():
    for node in NODES:
        routes = dict(node_routes(node, NODES))
        others = {n.pod_cidr for n in NODES if n is not node}
        assert set(routes) == others
    # from a namespace, node 0's pods are behind the host; the others directly
    assert dict(node_routes(NODE_1, NODES)) == {
        "10.244.0.0/24": "10.250.0.1",
        "10.244.2.0/24": "10.250.0.12",
    }
    assert node_by_name(NODES, "docparser-node-2").index == 2
    with pytest.raises(KeyError, match="no node"):
        node_by_name(NODES, "elsewhere")


def test_a_namespaced_node_has_its_own_dirs_cgroup_root_and_labels(tmp_path):
    layout = Layout(tmp_path)
    dirs = layout.node_dirs(NODE_1)
    assert layout.node_dirs(HOST_NODE) is layout
    assert dirs.root == tmp_path / "nodes" / "docparser-node-1"
    kubelet = yaml.safe_load(configs.kubelet_config(dirs, NODE_1, tmp_path / "ca.crt"))
    assert kubelet["cgroupRoot"] == "/docparser-node-1"
    assert kubelet["podCIDR"] == "10.244.1.0/24"
    assert kubelet["containerRuntimeEndpoint"] == f"unix://{dirs.containerd_socket}"
    assert kubelet["healthzBindAddress"] == NODE_1.address  # reachable from the host
    proxy = yaml.safe_load(configs.kube_proxy_config(NODE_1, Path("/k")))
    assert proxy["hostnameOverride"] == "docparser-node-1"
    assert proxy["clusterCIDR"] == "10.244.0.0/16"  # every node's pods are cluster traffic
    assert configs.kubelet_labels(NODE_1) == "topology.kubernetes.io/zone=zone-b"
    containerd = tomllib.loads(configs.containerd_config(dirs))
    assert containerd["root"].startswith(str(dirs.root))
    assert layout.node_log(NODE_1, "kubelet") == "kubelet-docparser-node-1"
    assert layout.node_log(HOST_NODE, "kubelet") == "kubelet"


# A probe that answers as a loaded containerd did: its first try hangs past the try's timeout,
# its second fails, its third succeeds. Each try counts itself in the file given as $1.
SLOW_THEN_UP = 'n=$(cat "$1" 2>/dev/null || echo 0); echo $((n + 1)) > "$1"; '
SLOW_THEN_UP += '[ "$n" = 0 ] && exec sleep 30; [ "$n" = 1 ] && { echo refused >&2; exit 1; }; :'


def test_the_readiness_wait_retries_a_try_that_timed_out(tmp_path):
    """The `ctr version` probe that took over 5 s on a loaded host ended the cluster's start;
    a slow or failed try is now one more try until the deadline."""
    tries = tmp_path / "tries"
    argv = ["sh", "-c", SLOW_THEN_UP, "probe", str(tries)]
    wait_for_command(argv, "the probe", 60, try_timeout_s=0.5, pause_s=0.05)
    assert tries.read_text().strip() == "3"


def test_the_readiness_wait_says_what_it_waited_for_when_it_gives_up():
    refused = ["sh", "-c", "echo 'connection refused: no socket' >&2; exit 1"]
    with pytest.raises(NotReady) as err:
        wait_for_command(refused, "containerd on node-1 (its socket /x.sock)", 0.3, pause_s=0.05)
    message = str(err.value)
    assert message.startswith("containerd on node-1 (its socket /x.sock): gave up after ")
    assert "(deadline 0.3s)" in message and f"`{' '.join(refused)}`" in message
    assert message.endswith("last: exit 1: connection refused: no socket")
    with pytest.raises(NotReady, match=r"last: no answer within 0\.\ds$"):
        # a try never outlives the deadline, whatever its own timeout
        wait_for_command(["sleep", "30"], "a hung probe", 0.3, try_timeout_s=20)


def test_the_readiness_wait_ends_when_the_daemon_dies(tmp_path):
    daemon = ManagedProcess("containerd", ["sh", "-c", "exit 3"], tmp_path / "containerd.log")
    daemon.popen.wait(timeout=10)
    with pytest.raises(ProcessFailed, match="containerd exited with 3"):
        wait_for_command(["false"], "containerd", 60, alive=daemon.check_alive)
    daemon.stop()

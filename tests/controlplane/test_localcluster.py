"""The local cluster's pure parts: config renderers and the PKI (the node itself runs in
e2e/cluster, where every scenario exercises it)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import yaml
from cryptography import x509

from controlplane.localcluster import configs
from controlplane.localcluster.configs import Layout, Network
from controlplane.localcluster.pki import CertificateAuthority

NETWORK = Network(node_ip="192.0.2.2")


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
    conflist = json.loads(configs.cni_conflist(Layout(tmp_path), NETWORK))
    bridge = conflist["plugins"][0]
    assert bridge["bridge"] == configs.BRIDGE and len(configs.BRIDGE) <= 15  # IFNAMSIZ
    assert bridge["ipam"]["dataDir"].startswith(str(tmp_path))
    assert bridge["ipam"]["ranges"][0][0] == {"subnet": "10.244.0.0/24", "gateway": "10.244.0.1"}


def test_kubelet_config_never_touches_host_sysctls(tmp_path):
    config = yaml.safe_load(configs.kubelet_config(Layout(tmp_path), NETWORK, tmp_path / "ca.crt"))
    assert config["protectKernelDefaults"] is True  # checks, never rewrites
    assert config["failCgroupV1"] is False and config["cgroupDriver"] == "cgroupfs"
    assert config["podLogsDir"].startswith(str(tmp_path))
    assert config["authentication"]["anonymous"]["enabled"] is False


def test_kube_proxy_config_writes_no_conntrack_sysctls():
    config = yaml.safe_load(configs.kube_proxy_config(NETWORK, Path("/k")))
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

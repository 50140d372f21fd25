"""Which nodes the local cluster has and how their networks connect (pure: unit-tested).

WHY node 0 stays in the host's network namespace: its kube-proxy then programs the host's
iptables, so the host (the e2e suite, a person's curl) reaches every ClusterIP exactly as a
cluster member does, and the single-node cluster of earlier versions is unchanged. Every other
node lives in a network namespace of its own, joined to the host by a veth on one host bridge
(`NODE_BRIDGE`); each has its own /24 of the pod range and a route to every other node's /24
through that node's address, so pod-to-pod traffic crosses nodes with no overlay.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

NODE_NAME = "docparser-node"  # node 0 (the name the single-node cluster always had)
NODE_BRIDGE = "dp-nodes"  # host bridge joining the nodes' namespaces (<= 15 chars: IFNAMSIZ)
NODE_NET = ipaddress.ip_network("10.250.0.0/24")  # host .1, node i at .(10 + i)
CLUSTER_CIDR = ipaddress.ip_network("10.244.0.0/16")  # node i's pods: 10.244.i.0/24
NETNS_PREFIX = "docparser-node-"  # /run/netns/docparser-node-<i>
CGROUP_PREFIX = "docparser-node-"  # /sys/fs/cgroup/<controller>/docparser-node-<i>
VETH_PREFIX = "dp-veth"  # host end of node i's veth: dp-veth<i>
ZONE_LABEL = "topology.kubernetes.io/zone"
MAX_NODES = 26  # zone-a .. zone-z


def host_bridge_address() -> str:
    """The host's address on the node bridge: every namespaced node's default gateway."""
    return str(NODE_NET.network_address + 1)


@dataclass(frozen=True)
class NodePlan:
    """One node: its name, zone, pod range, address and where it runs."""

    index: int
    name: str
    zone: str
    pod_cidr: str
    address: str  # the node IP (InternalIP): the host's for node 0, the veth's otherwise
    netns: str | None  # None: the host's network namespace
    cgroup_root: str  # the kubelet's cgroupRoot ("/" for node 0)

    @property
    def veth(self) -> str:
        return f"{VETH_PREFIX}{self.index}"

    @property
    def pod_gateway(self) -> str:
        """The first address of the pod range: the node's CNI bridge."""
        return str(ipaddress.ip_network(self.pod_cidr).network_address + 1)


def plan_nodes(count: int, host_ip: str) -> list[NodePlan]:
    """`count` nodes: node 0 on the host at `host_ip`, nodes 1.. in namespaces, zones a, b, c..."""
    if not 1 <= count <= MAX_NODES:
        raise ValueError(f"NODES must be between 1 and {MAX_NODES}, not {count}")
    subnets = list(CLUSTER_CIDR.subnets(new_prefix=24))
    nodes = []
    for index in range(count):
        namespaced = index > 0
        nodes.append(
            NodePlan(
                index=index,
                name=NODE_NAME if index == 0 else f"{NODE_NAME}-{index}",
                zone=f"zone-{chr(ord('a') + index)}",
                pod_cidr=str(subnets[index]),
                address=str(NODE_NET.network_address + 10 + index) if namespaced else host_ip,
                netns=f"{NETNS_PREFIX}{index}" if namespaced else None,
                cgroup_root=f"/{CGROUP_PREFIX}{index}" if namespaced else "/",
            )
        )
    return nodes


def node_routes(node: NodePlan, nodes: list[NodePlan]) -> list[tuple[str, str]]:
    """(destination, gateway) routes the node needs for every other node's pods.

    In a namespace, node 0's pods are behind the host (the host forwards to its CNI bridge);
    the others are reached directly over the node bridge. On the host, each namespaced node's
    pods are behind that node's veth address.
    """
    routes = []
    for other in nodes:
        if other.index == node.index:
            continue
        if node.netns is None:
            routes.append((other.pod_cidr, other.address))
        elif other.netns is None:
            routes.append((other.pod_cidr, host_bridge_address()))
        else:
            routes.append((other.pod_cidr, other.address))
    return routes


def node_by_name(nodes: list[NodePlan], name: str) -> NodePlan:
    for node in nodes:
        if node.name == name:
            return node
    raise KeyError(f"no node {name!r} (nodes: {', '.join(n.name for n in nodes)})")

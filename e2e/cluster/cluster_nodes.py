"""What the multi-node scenarios share: the nodes, pods per node, and a small HTTP workload.

WHY a busybox workload: the network scenarios test nodes, routes and kube-proxy, not the
runtime; the local cluster's pause image is a static busybox (already on every node), whose
`httpd` answers in milliseconds with the pod's name, so every answer says which pod (and so
which node) served it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from cluster_support import Target

ZONE = "topology.kubernetes.io/zone"
GPU = "nvidia.com/gpu"
BUSYBOX = "docker.io/docparser/pause:local"  # the local cluster's pause image (busybox-static)


def ready_nodes(target: Target) -> list[dict[str, Any]]:
    nodes = json.loads(target.kubectl("get", "nodes", "-o", "json"))["items"]
    return [
        n
        for n in nodes
        if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])
    ]


def require_nodes(target: Target, count: int) -> list[dict[str, Any]]:
    """The Ready nodes, or a skip that says how to get enough of them."""
    nodes = ready_nodes(target)
    if len(nodes) < count:
        pytest.skip(
            f"needs {count} Ready nodes, the cluster has {len(nodes)} "
            "(make cluster-down && make cluster-up NODES=3)"
        )
    return nodes


def echo_deployment(name: str, namespace: str, replicas: int) -> list[dict[str, Any]]:
    """`replicas` busybox httpd pods, at most one per node (DoNotSchedule), and a Service."""
    labels = {"app": name}
    script = (
        "mkdir -p /www && /bin/busybox hostname > /www/index.html && "
        "exec /bin/busybox httpd -f -p 8080 -h /www"
    )
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "topologySpreadConstraints": [
                            {
                                "maxSkew": 1,
                                "topologyKey": "kubernetes.io/hostname",
                                "whenUnsatisfiable": "DoNotSchedule",
                                "labelSelector": {"matchLabels": labels},
                            }
                        ],
                        "containers": [
                            {
                                "name": "httpd",
                                "image": BUSYBOX,
                                "imagePullPolicy": "Never",
                                "command": ["/bin/busybox", "sh", "-c", script],
                                "ports": [{"containerPort": 8080}],
                                "readinessProbe": {
                                    "httpGet": {"path": "/", "port": 8080},
                                    "periodSeconds": 1,
                                },
                                "resources": {"requests": {"cpu": "5m", "memory": "8Mi"}},
                            }
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    ]

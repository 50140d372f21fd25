"""A real Gateway API implementation on the local cluster: Envoy Gateway's control plane.

WHY: every HTTPRoute status in the tests used to be written by the tests themselves; a real
controller judges the routes the operator renders (`status.parents`: Accepted, ResolvedRefs,
observedGeneration) in its own words. `scripts/build-envoy-gateway.sh` builds it from its Go
module (pinned) with the CRDs it ships (the Gateway API at the version it requires) and its Helm
chart; here its binary becomes an image (scratch + the static binary, buildah, no registry),
imported into every node, and the chart is installed as users install it.

No Envoy binary or image can be had here, so the data plane carries no traffic: the Gateway
`web` points at an EnvoyProxy with `replicas: 0`, and Envoy Gateway keeps an Envoy Deployment
of 0 pods (nothing pulls, nothing fails). The Gateway is Accepted, never Programmed; routes
are still judged, which is what the scenarios need. Its translation (the xDS IR, with each
backend's weight) is logged at debug level (`gateway-api: debug`), and the scenarios read it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import yaml

from .images import ImageError, _run

VERSION = "v1.9.1"
IMAGE = f"docker.io/docparser/envoy-gateway:{VERSION}"
RELEASE, NAMESPACE = "eg", "envoy-gateway-system"
CONTROLLER_NAME = "gateway.envoyproxy.io/gatewayclass-controller"
GATEWAY_CLASS, GATEWAY_NAMESPACE, GATEWAY = "envoy-gateway", "gateway-system", "web"
ZERO_PROXY = "no-data-plane"


def cache() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "docparser" / "envoy-gateway" / VERSION


def missing() -> str | None:
    """Why Envoy Gateway cannot be installed (None when it can)."""
    if not (cache() / "envoy-gateway").is_file() or not (cache() / "crds" / ".complete").exists():
        return (
            f"Envoy Gateway {VERSION} not built in {cache()} "
            "(`bash scripts/build-envoy-gateway.sh`; `make controlplane` runs it, bounded)"
        )
    return None


def crd_files() -> list[Path]:
    """The Gateway API CRDs Envoy Gateway requires, then its own (EnvoyProxy, ...)."""
    return sorted((cache() / "crds").glob("*.yaml"))


def image_archive() -> Path:
    """A docker-archive of scratch + the binary, cached by the binary's hash."""
    binary = cache() / "envoy-gateway"
    digest = hashlib.sha256(binary.read_bytes()).hexdigest()[:12]
    archive = cache() / f"image-{digest}.tar"
    if archive.exists():
        return archive
    container = _run(["buildah", "from", "scratch"])
    try:
        _run(["buildah", "copy", container, str(binary), "/usr/local/bin/envoy-gateway"])
        _run(
            [
                "buildah",
                "config",
                "--entrypoint",
                '["/usr/local/bin/envoy-gateway"]',
                "--env",
                "PATH=/usr/local/bin",
                "--user",
                "65532:65532",
                container,
            ]
        )
        image = _run(["buildah", "commit", "--rm", container, IMAGE])
    except ImageError:
        subprocess.run(["buildah", "rm", container], capture_output=True)
        raise
    partial = archive.with_suffix(".tmp")
    partial.unlink(missing_ok=True)
    _run(["buildah", "push", image, f"docker-archive:{partial}:{IMAGE}"])
    subprocess.run(["buildah", "rmi", image], capture_output=True)
    partial.rename(archive)
    for old in cache().glob("image-*.tar"):
        if old != archive:
            old.unlink()
    return archive


def helm_values() -> str:
    """Our settings over the chart's: our image, CRDs applied apart, debug IR logging."""
    return yaml.safe_dump(
        {
            "crds": {"enabled": False},  # applied server-side before (too big for annotations)
            "topologyInjector": {"enabled": False},  # no pod-binding webhook on our cluster
            "deployment": {
                "envoyGateway": {
                    "image": {"repository": "docparser/envoy-gateway", "tag": VERSION},
                    "imagePullPolicy": "Never",
                    "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}},
                }
            },
            "global": {"images": {"envoyGateway": {"pullPolicy": "Never"}}},
            "config": {
                "envoyGateway": {
                    "gateway": {"controllerName": CONTROLLER_NAME},
                    "provider": {"type": "Kubernetes"},
                    "logging": {"level": {"default": "info", "gateway-api": "debug"}},
                }
            },
        },
        sort_keys=False,
    )


def gateway_objects() -> list[dict[str, object]]:
    """GatewayClass, namespace, an EnvoyProxy with no replicas, and the Gateway `web`."""
    return [
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "GatewayClass",
            "metadata": {"name": GATEWAY_CLASS},
            "spec": {"controllerName": CONTROLLER_NAME},
        },
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": GATEWAY_NAMESPACE}},
        {
            "apiVersion": "gateway.envoyproxy.io/v1alpha1",
            "kind": "EnvoyProxy",
            "metadata": {"name": ZERO_PROXY, "namespace": GATEWAY_NAMESPACE},
            "spec": {
                "provider": {
                    "type": "Kubernetes",
                    "kubernetes": {"envoyDeployment": {"replicas": 0}},
                }
            },
        },
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {"name": GATEWAY, "namespace": GATEWAY_NAMESPACE},
            "spec": {
                "gatewayClassName": GATEWAY_CLASS,
                "infrastructure": {
                    "parametersRef": {
                        "group": "gateway.envoyproxy.io",
                        "kind": "EnvoyProxy",
                        "name": ZERO_PROXY,
                    }
                },
                "listeners": [
                    {
                        "name": "http",
                        "port": 80,
                        "protocol": "HTTP",
                        "allowedRoutes": {"namespaces": {"from": "All"}},
                    }
                ],
            },
        },
    ]

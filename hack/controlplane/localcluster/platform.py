"""What `cluster-up` puts on a Ready node: our images, the CRDs and the chart (operator as a pod).

WHY here and not in the supervisor: images and the chart change with every source edit, the
node does not. A second `make cluster-up` reuses the running node and only rebuilds (cached by
content hash), re-imports and upgrades what changed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from ..gateway_crds import crds_dir
from ..harness import binaries_dir
from . import gateway
from .configs import Layout, NodeDirs
from .images import ImageError, import_archive
from .supervisor import load_state

REPO = Path(__file__).resolve().parents[3]
RELEASE, NAMESPACE = "docparser-operator", "docparser-system"
OPERATOR_IMAGE, RUNTIME_IMAGE = "docparser/operator:dev", "docparser/runtime:dev"
HELM_VERSION_FILE = REPO / "scripts" / "build-helm.sh"


class PlatformError(RuntimeError):
    """Images, CRDs or the chart could not be installed; says which step."""


def helm_binary() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "docparser" / "helm"
    found = sorted(root.glob("*/helm"))
    if not found:
        raise PlatformError(
            "helm is not built: run `bash scripts/build-helm.sh` (make controlplane)"
        )
    return found[-1]


def _run(
    argv: list[str],
    what: str,
    timeout: float,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
) -> str:
    try:
        result = subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired as err:
        raise PlatformError(f"{what}: timed out after {timeout:.0f}s") from err
    if result.returncode != 0:
        raise PlatformError(f"{what} failed:\n{(result.stdout + result.stderr)[-3000:]}")
    return result.stdout


def build_images(timeout: float) -> dict[str, Path]:
    """Run scripts/build_images.py (cached by content hash); returns image name -> archive."""
    out = _run(
        [sys.executable, str(REPO / "scripts" / "build_images.py")], "building the images", timeout
    )
    archives = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "image":
            archives[parts[1].removeprefix("docker.io/")] = Path(parts[2])
    if not archives:
        raise PlatformError(
            f"scripts/build_images.py printed no `image NAME ARCHIVE` lines:\n{out[-2000:]}"
        )
    return archives


def node_dirs(layout: Layout) -> dict[str, NodeDirs]:
    """Every node's dirs, from the supervisor's state (node 0's are the work dir's top)."""
    state = load_state(layout)
    if not state or not state.nodes:
        return {"docparser-node": layout}
    return {name: NodeDirs(socket.parent.parent) for name, socket in state.sockets().items()}


def _import_into(node: str, dirs: NodeDirs, archives: dict[str, Path]) -> None:
    marker_dir = dirs.root / "imported"
    marker_dir.mkdir(parents=True, exist_ok=True)
    for name, archive in archives.items():
        marker = marker_dir / name.replace("/", "_").replace(":", "_")
        if marker.exists() and marker.read_text() == str(archive):
            continue
        try:
            import_archive(dirs, archive)
        except ImageError as err:
            raise PlatformError(f"importing {name} into {node}: {err}") from err
        marker.write_text(str(archive))


def import_images(layout: Layout, archives: dict[str, Path]) -> None:
    """Import each archive into every node's containerd, unless this exact archive was the last
    one imported there. The nodes import at once (one `ctr` each, each node its own
    containerd), so the gzip layers' decompression uses both cores when they are free; one
    after another, each node took ~18 s on one core."""
    nodes = node_dirs(layout)
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        done = [pool.submit(_import_into, node, dirs, archives) for node, dirs in nodes.items()]
    for future in done:
        future.result()  # the first node's error, once every import has ended


def apply_gateway_api_crds(layout: Layout) -> None:
    """The Gateway API CRDs (with Envoy Gateway's own) applied server-side, in one kubectl: the
    version Envoy Gateway requires when it is built (it ships them), else the suite's. Before
    either chart, which both need them."""
    env = {**os.environ, "KUBECONFIG": str(layout.admin_kubeconfig)}
    if gateway.missing() is None:
        crds = gateway.crd_files()
    else:
        folder = crds_dir()
        crds = sorted(folder.glob("gateway.networking.k8s.io_*.yaml")) if folder.is_dir() else []
    if crds:
        files = [arg for crd in crds for arg in ("-f", str(crd))]
        _run(
            [
                str(binaries_dir() / "kubectl"),
                "apply",
                "--server-side",
                "--force-conflicts",
                *files,
            ],
            f"applying the Gateway API CRDs ({', '.join(c.name for c in crds)})",
            120,
            env,
        )


def install_chart(layout: Layout, timeout: float, image_id: str) -> None:
    """The chart upgraded (it renders and upgrades our CRD too); `image_id` (the archive's
    name) in a pod annotation, so a rebuilt operator image rolls the operator pod and an
    unchanged one does not."""
    env = {**os.environ, "KUBECONFIG": str(layout.admin_kubeconfig)}
    kubectl = str(binaries_dir() / "kubectl")
    repository, tag = OPERATOR_IMAGE.split(":")
    _run(
        [
            str(helm_binary()),
            "upgrade",
            "--install",
            RELEASE,
            str(REPO / "charts" / "docparser-operator"),
            "--namespace",
            NAMESPACE,
            "--create-namespace",
            "--take-ownership",  # a CRD applied by hand (an older cluster-up) is adopted
            "--set",
            f"image.repository={repository}",
            "--set",
            f"image.tag={tag}",
            "--set",
            "image.pullPolicy=Never",
            "--set",
            "resyncIntervalSeconds=15",
            # The batch scenario waits for its pool to go back to 0 (120 s by default); 10 s is
            # still two backlog readings, and a reading Redis cannot give keeps the pool's size.
            "--set",
            "batchCooldownSeconds=10",
            "--set-string",
            f"podAnnotations.docparser\\.io/image-archive={image_id}",
            "--wait",
            "--timeout",
            f"{int(timeout)}s",
        ],
        "helm upgrade --install",
        timeout + 30,
        env,
    )
    _run(
        [
            kubectl,
            "-n",
            NAMESPACE,
            "rollout",
            "status",
            f"deployment/{RELEASE}",
            f"--timeout={int(timeout)}s",
        ],
        "waiting for the operator",
        timeout + 10,
        env,
    )


def install_envoy_gateway(layout: Layout, timeout: float) -> None:
    """Its chart (image imported before), then the GatewayClass and the Gateway `web`, waited
    for until the controller accepts them (gateway.py says why no Envoy runs)."""
    env = {**os.environ, "KUBECONFIG": str(layout.admin_kubeconfig)}
    kubectl = str(binaries_dir() / "kubectl")
    values = layout.root / "envoy-gateway-values.yaml"
    values.write_text(gateway.helm_values())
    _run(
        [
            str(helm_binary()),
            "upgrade",
            "--install",
            gateway.RELEASE,
            str(gateway.cache() / "chart"),
            "--namespace",
            gateway.NAMESPACE,
            "--create-namespace",
            "-f",
            str(values),
            "--wait",
            "--timeout",
            f"{int(timeout)}s",
        ],
        "helm upgrade --install Envoy Gateway",
        timeout + 30,
        env,
    )
    _run(
        [kubectl, "apply", "--server-side", "--force-conflicts", "-f", "-"],
        "applying the GatewayClass and Gateway",
        60,
        env,
        stdin=yaml.safe_dump_all(gateway.gateway_objects()),
    )
    for kind, name, namespace in (
        ("gatewayclass", gateway.GATEWAY_CLASS, None),
        ("gateway", gateway.GATEWAY, gateway.GATEWAY_NAMESPACE),
    ):
        where = ["-n", namespace] if namespace else []
        _run(
            [
                kubectl,
                *where,
                "wait",
                f"{kind}/{name}",
                "--for=condition=Accepted",
                "--timeout=120s",
            ],
            f"waiting for {kind} {name} to be Accepted by Envoy Gateway",
            130,
            env,
        )


def _envoy_gateway(layout: Layout, archive: Path, timeout: float, start: float) -> None:
    """Envoy Gateway's image into every node, then its chart and Gateway."""
    import_images(layout, {gateway.IMAGE.removeprefix("docker.io/"): archive})
    install_envoy_gateway(layout, timeout)
    print(
        f"cluster-up: Envoy Gateway {gateway.VERSION} judging routes of Gateway "
        f"{gateway.GATEWAY_NAMESPACE}/{gateway.GATEWAY} ({time.monotonic() - start:.1f}s)"
    )


def install_platform(layout: Layout, *, images: bool, timeout: float) -> None:
    """Images, the chart and Envoy Gateway, overlapped: each node's `ctr import` is CPU-bound
    decompression and each chart mostly waits on its pods, so one after another (every image,
    then each chart) took ~95 s of the ~105 s of `up` on this 2-core machine. The operator's
    image goes into every node first (its chart's pods need it); then Envoy Gateway (its image,
    then its chart), the operator's chart and the runtime image, the largest, which only the
    scenarios' DocParsers use, run side by side. `up` returns once all are done."""
    start = time.monotonic()
    if not images:
        return
    archives = build_images(timeout)
    envoy_image = gateway.IMAGE.removeprefix("docker.io/")
    envoy_archive = None
    if gateway.missing() is None:
        try:
            envoy_archive = archives[envoy_image] = gateway.image_archive()
        except ImageError as err:
            raise PlatformError(f"building the Envoy Gateway image: {err}") from err
    import_images(layout, {OPERATOR_IMAGE: archives[OPERATOR_IMAGE]})
    apply_gateway_api_crds(layout)
    with ThreadPoolExecutor(max_workers=2) as pool:
        rest = {n: a for n, a in archives.items() if n not in (OPERATOR_IMAGE, envoy_image)}
        runtime = pool.submit(import_images, layout, rest)
        envoy = (
            pool.submit(_envoy_gateway, layout, envoy_archive, timeout, start)
            if envoy_archive is not None
            else None
        )
        install_chart(layout, timeout, archives[OPERATOR_IMAGE].name)
        print(f"cluster-up: operator running in {NAMESPACE} ({time.monotonic() - start:.1f}s)")
        if envoy is None:
            print(f"cluster-up: no Gateway API controller: {gateway.missing()}")
        else:
            envoy.result()
        runtime.result()
    print(
        f"cluster-up: images {', '.join(archives)} in every node ({time.monotonic() - start:.1f}s)"
    )

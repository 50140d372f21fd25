"""What the e2e/cluster scenarios share: kubectl, waits that explain themselves, documents,
pvc:// weights, and a bounded load generator that records every request.

WHY kubectl and plain HTTP: the suite runs against any KUBECONFIG (the local cluster in
`make test`, kind or a real cluster for users), exactly as a person would drive it; the only
thing it needs from the network is that Service ClusterIPs answer from this host, which the
local cluster's kube-proxy gives (`Target.cluster_ip_reachable` says when it does not).
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml
from docparser_runtime.weights.manifest import MANIFEST_NAME, build_manifest
from PIL import Image, ImageDraw, ImageFont

REPO = Path(__file__).resolve().parents[2]
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"


@dataclass(frozen=True)
class Target:
    """The cluster under test and the images the scenarios deploy."""

    kubeconfig: Path
    kubectl_bin: str
    runtime_image: str
    local: bool

    def kubectl(
        self, *args: str, stdin: str | None = None, timeout: float = 60, check: bool = True
    ) -> str:
        result = subprocess.run(
            [self.kubectl_bin, "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def apply(self, *objects: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))

    def get(self, kind: str, name: str, namespace: str) -> dict[str, Any]:
        return json.loads(self.kubectl("-n", namespace, "get", kind, name, "-o", "json"))

    def find(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        """The object, or None while it does not exist (yet: the operator renders it later)."""
        out = self.kubectl("-n", namespace, "get", kind, name, "-o", "json", "--ignore-not-found")
        return json.loads(out) if out.strip() else None

    def items(self, kind: str, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
        args = ["-n", namespace, "get", kind, "-o", "json"]
        if selector:
            args += ["-l", selector]
        return json.loads(self.kubectl(*args))["items"]

    def explain(self, namespace: str) -> str:
        """What a person would look at when a wait fails: objects, pods and recent events."""
        parts = []
        for args in (
            ("get", "docparsers,deployments,pods,services", "-o", "wide"),
            ("get", "docparsers", "-o", "yaml"),
            ("get", "events", "--sort-by=.lastTimestamp"),
        ):
            parts.append(self.kubectl("-n", namespace, *args, check=False)[-4000:])
        return "\n".join(parts)


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def wait_for(
    target: Target, namespace: str, what: str, probe, timeout: float, interval: float = 1.0
):
    """Poll `probe()` until it returns something truthy; fail with the namespace's story."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{what} not reached within {timeout:.0f}s\n{target.explain(namespace)}")


def wait_ready(target: Target, namespace: str, name: str, timeout: float = 300) -> dict[str, Any]:
    """Ready=True for the current generation and no rollout in flight (kstatus Current)."""

    def current() -> dict[str, Any] | None:
        obj = target.get("docparser", name, namespace)
        status = obj.get("status") or {}
        conds = conditions(obj)
        if (
            status.get("observedGeneration") == obj["metadata"]["generation"]
            and (conds.get("Ready") or {}).get("status") == "True"
            and (conds.get("Progressing") or {}).get("status") != "True"
        ):
            return obj
        return None

    return wait_for(target, namespace, f"DocParser {namespace}/{name} Ready", current, timeout)


def service_url(target: Target, namespace: str, name: str) -> str:
    svc = target.get("service", name, namespace)
    port = svc["spec"]["ports"][0]["port"]
    return f"http://{svc['spec']['clusterIP']}:{port}"


def serving_url(
    target: Target, namespace: str, name: str, timeout: float = 60, in_a_row: int = 3
) -> str:
    """The Service's ClusterIP URL once traffic through it reaches Ready pods.

    EndpointSlices say which pods are Ready; kube-proxy turns them into iptables rules a
    moment later (its 1 s minSyncPeriod at least, more on a busy node). Until then a Service
    that had no Ready endpoint rejects connections ("Connection refused") although the
    DocParser is Ready. That is the node's data plane catching up, not capacity the rollout
    dropped, so a scenario that measures traffic starts after it: its settled start
    (cluster_settle.py: the Ready pods, the EndpointSlice and the host's Service rules agree,
    the DocParser at rest), then ``in_a_row`` answers of /readyz, each on a new connection."""
    from cluster_settle import settled_start  # it builds on Target, defined here

    settled_start(target, namespace, name, docparser=name, timeout=timeout)
    url = service_url(target, namespace, name)
    streak = 0

    def answered() -> bool:
        nonlocal streak
        try:
            ok = httpx.get(f"{url}/readyz", timeout=5).status_code == 200
        except httpx.HTTPError:
            ok = False
        streak = streak + 1 if ok else 0
        return streak >= in_a_row

    wait_for(target, namespace, f"{in_a_row} answers in a row from {url}", answered, timeout, 0.2)
    return url


def page_png(lines: tuple[str, ...] = ("Invoice number 4711", "Total due 1280 EUR")) -> bytes:
    font = ImageFont.truetype(FONT, 36)
    img = Image.new("RGB", (900, 120 + 100 * len(lines)), "white")
    draw = ImageDraw.Draw(img)
    for i, line in enumerate(lines):
        draw.text((40, 60 + 100 * i), line, fill="black", font=font)
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def parse(url: str, document: bytes, timeout: float = 60) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/document/parse",
        files={"file": ("page.png", document, "image/png")},
        timeout=timeout,
    )


# -- weights on a PersistentVolume -----------------------------------------------------------


@dataclass(frozen=True)
class Weights:
    """A tiny model directory on a PVC: `uri` and `sha256` go into the DocParser."""

    version: str
    uri: str
    sha256: str


def weights_volume(target: Target, namespace: str, versions: tuple[str, ...]) -> dict[str, Weights]:
    """One PVC (a hostPath PV on the node) holding a small weights directory per version.

    The files are made here, hashed with the runtime's own manifest code, shipped in a
    ConfigMap and copied onto the volume by a pod, so this works on any cluster whose node
    can do hostPath (kind, the local cluster), not only where the test shares a disk.
    """
    claim = "weights"
    data: dict[str, str] = {}
    result: dict[str, Weights] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for version in versions:
            directory = Path(tmp) / version
            directory.mkdir()
            (directory / "config.json").write_text(json.dumps({"model": "e2e", "version": version}))
            (directory / "model.safetensors").write_text(f"weights of {version}\n" * 64)
            manifest = build_manifest(directory)
            (directory / MANIFEST_NAME).write_bytes(manifest.to_bytes())
            for f in directory.iterdir():
                data[f"{version}__{f.name}"] = f.read_text()
            result[version] = Weights(version, f"pvc://{claim}/{version}", manifest.digest())
    pv_name = f"{namespace}-weights"
    host_path = f"/var/tmp/docparser-e2e/{namespace}"
    copy = " && ".join(
        f'mkdir -p /pv/{v} && for f in /src/{v}__*; do cp "$f" /pv/{v}/"${{f#/src/{v}__}}"; done'
        for v in versions
    )
    target.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "weights-src", "namespace": namespace},
            "data": data,
        },
        hostpath_volume(
            namespace,
            pv_name,
            claim,
            host_path,
            size="1Gi",
            modes=["ReadWriteOnce", "ReadOnlyMany"],
        ),
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "",
                "volumeName": pv_name,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
        # root to write into a fresh hostPath dir; the runtime pods only read it.
        root_pod(
            namespace,
            "seed-weights",
            target.runtime_image,
            copy,
            {
                "src": {"configMap": {"name": "weights-src"}},
                "pv": {"persistentVolumeClaim": {"claimName": claim}},
            },
        ),
    )

    def seeded() -> bool:
        phase = (target.get("pod", "seed-weights", namespace).get("status") or {}).get("phase")
        assert phase != "Failed", target.kubectl(
            "-n", namespace, "logs", "seed-weights", check=False
        )
        return phase == "Succeeded"

    wait_for(target, namespace, "weights copied onto the volume", seeded, 120)
    return result


def hostpath_volume(
    namespace: str, name: str, claim: str, host_path: str, *, size: str, modes: list[str]
) -> dict[str, Any]:
    """A hostPath PersistentVolume on the node, pre-bound to ``claim`` (the local cluster has no
    volume provisioner); labelled so the namespace's teardown deletes it."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {"docparser-e2e": namespace}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": modes,
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": host_path, "type": "DirectoryOrCreate"},
            "claimRef": {"namespace": namespace, "name": claim},
        },
    }


def root_pod(
    namespace: str, name: str, image: str, script: str, volumes: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """A one-shot pod running ``script`` as root with ``volumes`` mounted at /<name>."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsUser": 0},
            "containers": [
                {
                    "name": "run",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", script],
                    "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                    "volumeMounts": [{"name": v, "mountPath": f"/{v}"} for v in volumes],
                }
            ],
            "volumes": [{"name": v, **source} for v, source in volumes.items()],
        },
    }


def delete_weights_volume(target: Target, namespace: str) -> None:
    target.kubectl("delete", "pv", "-l", f"docparser-e2e={namespace}", "--wait=false", check=False)


# -- load --------------------------------------------------------------------------------


def record(name: str, line: str) -> None:
    """Scenario figures for docs/benchmarks.md: printed (pytest -s) and kept in a results file."""
    print(line)
    out = Path(tempfile.gettempdir()) / "docparser-e2e-cluster-results.txt"
    with out.open("a") as f:
        f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {name}: {line}\n")


def kubectl_path() -> str | None:
    return shutil.which("kubectl")


def docparser(
    name: str,
    namespace: str,
    image: str,
    *,
    weights: Weights | None = None,
    canary: Weights | None = None,
    canary_weight: int = 0,
    replicas: int = 1,
    max_surge: int | None = None,
    gpu: int | None = None,
    max_batch_size: int | None = None,
) -> dict[str, Any]:
    """A rapidocr DocParser sized for a 2-core node: small CPU requests, 1.5 GiB per pod.

    Measured (a runtime process on this machine, children included): 436 MiB idle, 839 MiB
    at the peak of one parse of an invoice page (688 vision tokens), 1013 MiB with four
    parses at once. At 1 GiB a canary pod was OOM-killed by its first parses under load,
    and requests to it were refused until its endpoints caught up."""
    spec: dict[str, Any] = {
        "engine": "rapidocr",
        "runtime": {"image": image, "imagePullPolicy": "IfNotPresent"},
        "replicas": {"min": replicas, "max": replicas, "desired": replicas},
        "resources": {"cpu": "100m", "memory": "1536Mi"},
    }
    if weights:
        spec["weights"] = {"uri": weights.uri, "version": weights.version, "sha256": weights.sha256}
    if canary:
        spec["canary"] = {
            "weights": {"uri": canary.uri, "version": canary.version, "sha256": canary.sha256},
            "weight": canary_weight,
        }
    if max_surge is not None:
        spec["rollout"] = {"maxSurge": max_surge}
    if gpu is not None:
        spec["resources"]["gpu"] = gpu
    if max_batch_size is not None:
        spec["runtime"]["maxBatchSize"] = max_batch_size
    return {
        "apiVersion": "docparser.io/v1alpha1",
        "kind": "DocParser",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def owned_children(target: Target, namespace: str, name: str) -> list[str]:
    """Every object in the namespace labelled as this DocParser's (Deployments, Services, ...)."""
    out = target.kubectl(
        "-n",
        namespace,
        "get",
        "deployments,replicasets,pods,services,horizontalpodautoscalers,poddisruptionbudgets,configmaps",
        "-l",
        f"app.kubernetes.io/instance={name}",
        "-o",
        "name",
    )
    return out.split()

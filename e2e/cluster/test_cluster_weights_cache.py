"""The weights cache on real pods: weights served over HTTP inside the cluster and a DocParser
with ``weightsCache.mode: PersistentVolume``. The cache is filled once by its Job and mounted
read-only by every pod; a pod added later starts without a download. As a benchmark
(``DOCPARSER_E2E_CACHE_MIB``) a DocParser with the emptyDir default is timed beside it.

The node has no volume provisioner, so the cache claim binds to a hostPath PersistentVolume
made here for its name (as a cluster admin or a static provisioner would).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from cluster_support import (
    Target,
    conditions,
    docparser,
    hostpath_volume,
    page_png,
    parse,
    record,
    root_pod,
    serving_url,
    wait_for,
    wait_ready,
)
from docparser_runtime.weights.manifest import MANIFEST_NAME, build_manifest

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

# DOCPARSER_E2E_CACHE_MIB=1536 is the benchmark: bigger weights, where the download clearly
# shows, and the same start without the cache (docs/benchmarks.md). By default the scenario
# checks the behaviour only, with small weights, in about half a minute.
BENCHMARK = bool(os.environ.get("DOCPARSER_E2E_CACHE_MIB"))
WEIGHTS_MIB = int(os.environ.get("DOCPARSER_E2E_CACHE_MIB") or "256")
VERSION = "v1"
BLOCK = b"docparser weights cache e2e block\n"


CHUNK = BLOCK * ((1 << 20) // len(BLOCK))  # whole blocks, about 1 MiB


def _write_weights(path: Path) -> None:
    """WEIGHTS_MIB MiB of repeated blocks (the pod writes the same bytes the same way)."""
    size = WEIGHTS_MIB << 20
    with path.open("wb") as f:
        while size > 0:
            f.write(CHUNK[:size])
            size -= min(size, len(CHUNK))


def _weights_dir(tmp_path: Path) -> tuple[Path, str]:
    """The model directory the HTTP pod will serve, made here to know its manifest digest."""
    directory = tmp_path / VERSION
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"model": "e2e-cache"}))
    _write_weights(directory / "model.safetensors")
    manifest = build_manifest(directory)
    (directory / MANIFEST_NAME).write_bytes(manifest.to_bytes())
    return directory, manifest.digest()


def _http_weights(target: Target, namespace: str, directory: Path) -> str:
    """A pod of the runtime image serving ``directory`` over HTTP; the big file is rebuilt
    in the pod from the same block (a ConfigMap holds 1 MiB at most; it also lists its own
    ``..data`` links, skipped)."""
    small = {p.name: p.read_text() for p in directory.iterdir() if p.name != "model.safetensors"}
    size = WEIGHTS_MIB << 20
    script = (
        "import os,sys\n"
        f"d='/data/{VERSION}'\nos.makedirs(d, exist_ok=True)\n"
        "for n in [n for n in os.listdir('/src') if not n.startswith('..')]:\n"
        "    open(os.path.join(d, n), 'wb').write(open(os.path.join('/src', n), 'rb').read())\n"
        f"chunk={BLOCK!r}*({1 << 20}//{len(BLOCK)})\nsize={size}\n"
        "f=open(os.path.join(d,'model.safetensors'),'wb')\n"
        "while size>0:\n    f.write(chunk[:size]); size-=min(size,len(chunk))\n"
        "f.close()\n"
        "os.chdir('/data')\n"
        "from http.server import ThreadingHTTPServer, SimpleHTTPRequestHandler\n"
        "ThreadingHTTPServer(('', 8080), SimpleHTTPRequestHandler).serve_forever()\n"
    )
    labels = {"app": "weights-http"}
    target.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "weights-files", "namespace": namespace},
            "data": small,
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "weights-http", "namespace": namespace, "labels": labels},
            "spec": {
                "containers": [
                    {
                        "name": "http",
                        "image": target.runtime_image,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["python", "-c", script],
                        "ports": [{"containerPort": 8080}],
                        "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                        "volumeMounts": [
                            {"name": "src", "mountPath": "/src"},
                            {"name": "data", "mountPath": "/data"},
                        ],
                    }
                ],
                "volumes": [
                    {"name": "src", "configMap": {"name": "weights-files"}},
                    {"name": "data", "emptyDir": {}},
                ],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "weights-http", "namespace": namespace},
            "spec": {"selector": labels, "ports": [{"port": 8080, "targetPort": 8080}]},
        },
    )

    def ready() -> bool:
        pod = target.get("pod", "weights-http", namespace)
        return any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (pod.get("status") or {}).get("conditions") or []
        )

    wait_for(target, namespace, "the weights HTTP server", ready, 180)
    # By ClusterIP: the local cluster runs no DNS.
    ip = target.get("service", "weights-http", namespace)["spec"]["clusterIP"]
    return f"http://{ip}:8080/{VERSION}"


def _cache_volume(target: Target, namespace: str, claim: str) -> None:
    """A hostPath PV pre-bound to the cache claim, writable by the runtime's user."""
    host_path = f"/var/tmp/docparser-e2e/{namespace}-cache"
    target.apply(
        hostpath_volume(
            namespace, f"{namespace}-cache", claim, host_path, size="4Gi", modes=["ReadWriteOnce"]
        ),
        root_pod(
            namespace,
            "cache-perms",
            target.runtime_image,
            "chown 10001:10001 /pv && chmod 0755 /pv",
            {"pv": {"hostPath": {"path": host_path}}},
        ),
    )
    wait_for(
        target,
        namespace,
        "cache volume prepared",
        lambda: (
            (target.get("pod", "cache-perms", namespace).get("status") or {}).get("phase")
            == "Succeeded"
        ),
        120,
    )


def _spec(name: str, namespace: str, image: str, uri: str, sha: str, **extra: Any) -> dict:
    obj = docparser(name, namespace, image)
    obj["spec"]["weights"] = {"uri": uri, "version": VERSION, "sha256": sha}
    obj["spec"].update(extra)
    return obj


def _ready_pods(target: Target, namespace: str, name: str) -> int:
    pods = target.items(
        "pods", namespace, f"app.kubernetes.io/name=docparser,app.kubernetes.io/instance={name}"
    )
    return sum(
        1
        for p in pods
        if any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (p.get("status") or {}).get("conditions") or []
        )
    )


def _parse_time(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ"))


def _pod_start(target: Target, namespace: str, name: str) -> tuple[float, float]:
    """(init container seconds, creation to Ready seconds) of the newest Ready pod of
    ``name``, from the kubelet's own timestamps (one-second resolution)."""
    selector = f"app.kubernetes.io/name=docparser,app.kubernetes.io/instance={name}"
    pod = max(
        target.items("pods", namespace, selector),
        key=lambda p: p["metadata"]["creationTimestamp"],
    )
    init = pod["status"]["initContainerStatuses"][0]["state"]["terminated"]
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    return (
        _parse_time(init["finishedAt"]) - _parse_time(init["startedAt"]),
        _parse_time(ready["lastTransitionTime"])
        - _parse_time(pod["metadata"]["creationTimestamp"]),
    )


def _scale_to_two(target: Target, namespace: str, name: str) -> float:
    """Seconds from asking for a second pod until it is Ready."""
    started = time.monotonic()
    target.kubectl(
        "-n",
        namespace,
        "patch",
        "docparser",
        name,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"replicas": {"min": 2, "max": 2, "desired": 2}}}),
    )
    wait_for(
        target,
        namespace,
        f"{name}: 2 Ready pods",
        lambda: _ready_pods(target, namespace, name) >= 2,
        300,
        interval=0.5,
    )
    return time.monotonic() - started


def test_cache_fills_once_and_later_pods_start_without_a_download(cluster, namespace, tmp_path):
    directory, sha = _weights_dir(tmp_path)
    uri = _http_weights(cluster, namespace, directory)
    claim = f"cached-weights-{sha[:12]}"
    _cache_volume(cluster, namespace, claim)
    cache = {"mode": "PersistentVolume", "accessMode": "ReadWriteOnce", "volumeSize": "4Gi"}

    t0 = time.monotonic()
    cluster.apply(_spec("cached", namespace, cluster.runtime_image, uri, sha, weightsCache=cache))
    obj = wait_ready(cluster, namespace, "cached", timeout=420)
    cold = time.monotonic() - t0
    assert conditions(obj)["WeightsCached"]["status"] == "True", conditions(obj)
    fill = cluster.get("job", claim, namespace)["status"]
    fill_s = _parse_time(fill["completionTime"]) - _parse_time(fill["startTime"])
    warm = _scale_to_two(cluster, namespace, "cached")
    warm_init, warm_ready = _pod_start(cluster, namespace, "cached")

    # One fill for the cached DocParser, whatever its pods did; each serves the same weights.
    jobs = cluster.items("jobs", namespace, "app.kubernetes.io/instance=cached")
    assert [j["metadata"]["name"] for j in jobs] == [claim]
    assert (jobs[0].get("status") or {}).get("succeeded") == 1
    pods = cluster.items(
        "pods", namespace, "app.kubernetes.io/name=docparser,app.kubernetes.io/instance=cached"
    )
    assert len(pods) == 2
    for pod in pods:
        volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "weights")
        assert volume["persistentVolumeClaim"] == {"claimName": claim, "readOnly": True}
    reply = parse(serving_url(cluster, namespace, "cached"), page_png())
    assert reply.status_code == 200 and reply.json()["model"]["version"] == VERSION, reply.text
    digest = hashlib.sha256((directory / MANIFEST_NAME).read_bytes()).hexdigest()
    assert digest == sha

    line = (
        f"{WEIGHTS_MIB} MiB weights over in-cluster HTTP, 1 node. Cache: DocParser Ready "
        f"{cold:.0f}s after create (fill Job {fill_s:.0f}s), a second pod Ready {warm:.0f}s after "
        f"the scale-up (init wait-weights {warm_init:.0f}s, pod created->Ready {warm_ready:.0f}s)."
    )
    if BENCHMARK:  # the same weights without the cache, for docs/benchmarks.md
        t0 = time.monotonic()
        emptydir = {"volumeSize": "4Gi"}
        cluster.apply(
            _spec("fetched", namespace, cluster.runtime_image, uri, sha, weightsCache=emptydir)
        )
        wait_ready(cluster, namespace, "fetched", timeout=420)
        empty_first = time.monotonic() - t0
        empty_second = _scale_to_two(cluster, namespace, "fetched")
        empty_init, empty_ready = _pod_start(cluster, namespace, "fetched")
        line += (
            f" emptyDir: Ready {empty_first:.0f}s after create, a second pod {empty_second:.0f}s "
            f"(init fetch-weights {empty_init:.0f}s, pod created->Ready {empty_ready:.0f}s)"
        )
    record("weights-cache", line)

"""Scale to zero on real pods: a DocParser with `replicas.min: 0` goes to 0 after its idle window,
a job submitted at 0 is accepted at once by the front and completes once a pod is up, and it
goes back to 0. Redis is a `redis-server` on this host at the node bridge's address (every
node's default gateway), so it runs on the local cluster only.
"""

from __future__ import annotations

import base64
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest
from cluster_support import (
    conditions,
    docparser,
    page_png,
    record,
    service_url,
    wait_for,
    wait_ready,
)

pytestmark = [pytest.mark.slow, pytest.mark.cluster]
IDLE_AFTER = "15s"


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@pytest.fixture
def redis_url(cluster) -> Iterator[str]:
    if not cluster.local or shutil.which("redis-server") is None:
        pytest.skip("needs the local cluster and a redis-server binary on this host")
    from controlplane.localcluster.topology import host_bridge_address

    host = host_bridge_address()
    port = _free_port(host)
    server = subprocess.Popen(
        [
            *("redis-server", "--bind", host, "--port", str(port)),
            *("--save", "", "--appendonly", "no", "--protected-mode", "no"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection((host, port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"redis://{host}:{port}/0"
    finally:
        server.terminate()
        server.wait(10)


def _state(cluster, namespace: str, name: str) -> str:
    obj = cluster.get("docparser", name, namespace)
    return ((obj.get("status") or {}).get("scaleToZero") or {}).get("state", "")


def _runtime_pods(cluster, namespace: str, name: str) -> int:
    pods = cluster.items("pods", namespace, f"app.kubernetes.io/instance={name}")
    return sum(
        1
        for p in pods
        if p["metadata"]["labels"].get("app.kubernetes.io/name") == "docparser"
        and not p["metadata"].get("deletionTimestamp")
    )


def _at_zero(cluster, namespace: str, name: str) -> bool:
    return (
        _state(cluster, namespace, name) == "Idle" and _runtime_pods(cluster, namespace, name) == 0
    )


def test_a_job_at_zero_is_accepted_wakes_a_pod_completes_and_it_sleeps_again(
    cluster, namespace, redis_url
):
    name = "night"
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "redis", "namespace": namespace},
        "data": {"url": base64.b64encode(redis_url.encode()).decode()},
    }
    dp = docparser(name, namespace, cluster.runtime_image)
    dp["spec"]["replicas"] = {"min": 0, "max": 2, "scaleToZero": {"after": IDLE_AFTER}}
    dp["spec"]["runtime"]["redisUrlSecretRef"] = {"name": "redis"}
    cluster.apply(secret, dp)
    started = time.monotonic()
    wait_ready(cluster, namespace, name, timeout=180)
    slept = wait_for(
        cluster, namespace, "idle at 0 pods", lambda: _at_zero(cluster, namespace, name), 90
    )
    assert slept
    obj = cluster.get("docparser", name, namespace)
    ready = conditions(obj)["Ready"]
    assert (ready["status"], ready["reason"]) == ("True", "Idle"), ready
    assert conditions(obj)["Stalled"]["status"] == "False"
    assert conditions(obj)["Reconciling"]["status"] == "False"
    idle_at = time.monotonic()

    # At 0 the endpoint's ClusterIP reaches the front: the job is accepted at once.
    url = service_url(cluster, namespace, name)
    submitted = time.monotonic()
    reply = wait_for(
        cluster,
        namespace,
        "the front accepting a job",
        lambda: _submit(url),
        timeout=30,
        interval=0.5,
    )
    accepted_s = time.monotonic() - submitted
    assert reply.status_code == 202, reply.text
    job = reply.json()["id"]
    done = wait_for(
        cluster,
        namespace,
        "the job done by a woken pod",
        lambda: _finished(url, job),
        timeout=180,
        interval=1.0,
    )
    done_s = time.monotonic() - submitted
    assert done["status"] == "succeeded", done
    assert "4711" in done["result"]["content"]
    assert _state(cluster, namespace, name) in ("Waking", "Awake")

    again = wait_for(
        cluster, namespace, "idle again", lambda: _at_zero(cluster, namespace, name), 120
    )
    assert again
    record(
        "scale-to-zero",
        f"first Ready {idle_at - started:.0f}s incl. the {IDLE_AFTER} window; job at 0 accepted "
        f"in {accepted_s:.2f}s, done in {done_s:.1f}s (pod start from 0 + parse); back at 0 "
        f"{time.monotonic() - submitted:.0f}s after the job",
    )


def _submit(url: str) -> httpx.Response | None:
    try:
        reply = httpx.post(
            f"{url}/v1/jobs", files={"file": ("p.png", page_png(), "image/png")}, timeout=10
        )
    except httpx.HTTPError:
        return None  # kube-proxy may still be moving the ClusterIP to the front
    return reply if reply.status_code == 202 else None


def _finished(url: str, job: str) -> dict | None:
    try:
        body = httpx.get(f"{url}/v1/jobs/{job}", timeout=10).json()
    except (httpx.HTTPError, ValueError):
        return None
    return body if body.get("status") in ("succeeded", "failed", "cancelled") else None

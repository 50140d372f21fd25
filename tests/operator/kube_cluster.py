"""The `cluster` the operator tests run against, behind one small interface.

Backends:
- ``emulator`` (default): kmock-based API emulator (tests/fakes/kube_emulator.py) served on
  127.0.0.1 from its own thread and event loop, so sync tests and kopf's thread both reach it.
- ``apiserver``: a real kube-apiserver + etcd from hack/controlplane/harness.py (H5).
- ``kubeconfig``: an existing cluster named by ``DOCPARSER_TEST_KUBECONFIG`` (opt-in).

Every backend is reached through a recording front: the emulator records natively, and real
servers sit behind a small recording reverse proxy (tests/operator/recording_proxy.py), so the
same assertions on request logs ("a no-op resync makes zero writes") run everywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from docparser_operator.api.kinds import ResourceRef
from docparser_operator.kube.client import KubeClient, load_configuration

T = TypeVar("T")
TEST_AGENT = "docparser-tests/0.1"
WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


@dataclass(frozen=True)
class Recorded:
    """One request as a server saw it."""

    method: str
    path: str
    query: dict[str, str]
    user_agent: str

    @property
    def is_write(self) -> bool:
        return self.method in WRITE_METHODS

    @property
    def from_tests(self) -> bool:
        return self.user_agent.startswith("docparser-tests")


class LoopThread:
    """An asyncio loop in a daemon thread, for servers that must outlive sync test code."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def write_kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig for a plain-HTTP, unauthenticated local front (emulator or proxy)."""
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": server}}],
        "users": [{"name": "test", "user": {"token": "local-test-front"}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        "current-context": "test",
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


def client_for(kubeconfig: Path, user_agent: str = TEST_AGENT) -> KubeClient:
    from docparser_operator.kube.client import k8s_client
    from kubernetes import config as k8s_config

    cfg = k8s_client.Configuration()
    k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    return KubeClient(cfg, user_agent=user_agent)


@dataclass
class Cluster:
    """What tests get: a kubeconfig for the operator, a client for the test, request records."""

    backend: str
    kubeconfig: Path
    client: KubeClient
    namespace: str
    records: Callable[[], list[Recorded]]
    has_garbage_collector: bool
    emulator: Any = None
    has_controllers: bool = False  # a Deployment/ReplicaSet controller makes pods
    _finalizers: list[Callable[[], None]] = field(default_factory=list)

    def mark(self) -> int:
        """A position in the request log; pass it to ``requests_since``."""
        return len(self.records())

    def requests_since(self, mark: int, *, include_tests: bool = False) -> list[Recorded]:
        return [r for r in self.records()[mark:] if include_tests or not r.from_tests]

    def writes_since(self, mark: int) -> list[Recorded]:
        """Writes by anything but the test itself (the operator and kopf)."""
        return [r for r in self.requests_since(mark) if r.is_write]

    def get(self, ref: ResourceRef, name: str) -> dict[str, Any] | None:
        return self.client.get(ref, self.namespace, name)

    def list(self, ref: ResourceRef, selector: str | None = None) -> list[dict[str, Any]]:
        return self.client.list(ref, self.namespace, selector=selector)

    def settle(self, *, quiet_s: float = 1.0, timeout: float = 30.0) -> None:
        """Wait until the cluster's own controllers have finished reacting to the last writes.

        The controller manager talks to the API server directly, not through the recording
        front, so ``quiet()`` cannot see it. A real Deployment controller updates a child's
        status (and its ReplicaSet controller creates pods) some time after our apply; a
        reconcile pass in between legitimately has new facts to report. Settled means: every
        Deployment has observed its generation, every ReplicaSet has created the pods its
        spec asks for, and no Deployment, ReplicaSet or Pod changed for ``quiet_s`` seconds.
        On the emulator nothing reacts by itself, so it is settled at once.
        """
        if not self.has_controllers:
            return
        from docparser_operator.api.kinds import KNOWN_KINDS, ResourceRef

        rs_ref = ResourceRef("apps/v1", "ReplicaSet", "replicasets")
        refs = (KNOWN_KINDS["Deployment"], rs_ref, KNOWN_KINDS["Pod"])

        def snapshot() -> tuple[tuple[str, str, str], ...] | None:
            objects = {ref.kind: self.list(ref) for ref in refs}
            for obj in objects["Deployment"] + objects["ReplicaSet"]:
                status = obj.get("status") or {}
                if (status.get("observedGeneration") or 0) < obj["metadata"]["generation"]:
                    return None
            for rs in objects["ReplicaSet"]:
                if ((rs.get("status") or {}).get("replicas") or 0) != rs["spec"].get("replicas", 1):
                    return None
            return tuple(
                sorted(
                    (kind, o["metadata"]["name"], o["metadata"]["resourceVersion"])
                    for kind, objs in objects.items()
                    for o in objs
                )
            )

        deadline = time.monotonic() + timeout
        last, since = None, time.monotonic()
        while time.monotonic() < deadline:
            now_snapshot = snapshot()
            if now_snapshot is None or now_snapshot != last:
                last, since = now_snapshot, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                return
            time.sleep(0.1)
        raise AssertionError(f"the cluster's controllers did not settle within {timeout}s")


def wait_for(
    what: str, probe: Callable[[], T], *, timeout: float = 20.0, interval: float = 0.1
) -> T:
    """Poll until ``probe()`` is truthy (and return it), or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last={last!r}")


def emulator_cluster(tmp: Path, namespace: str) -> Iterator[Cluster]:
    import kmock
    from kube_emulator import KubeEmulator

    lt = LoopThread()
    emulator = KubeEmulator()
    server = kmock.Server(emulator)

    async def start() -> None:
        await emulator.__aenter__()
        await server.__aenter__()

    async def stop() -> None:
        await server.__aexit__(None, None, None)
        await emulator.__aexit__(None, None, None)

    lt.run(start())

    def records() -> list[Recorded]:
        return [
            Recorded(
                method=str(r.method.value).upper(),
                path=r.url.path,
                query=dict(r.params),
                user_agent=r.headers.get("User-Agent", ""),
            )
            for r in list(emulator._requests)
        ]

    kubeconfig = write_kubeconfig(tmp / "kubeconfig", f"http://127.0.0.1:{server.port}")
    clients_to_close = [client_for(kubeconfig)]
    clients_to_close[0].create(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    try:
        yield Cluster(
            backend="emulator",
            kubeconfig=kubeconfig,
            client=clients_to_close[0],
            namespace=namespace,
            records=records,
            has_garbage_collector=True,
            emulator=emulator,
        )
    finally:
        for client in clients_to_close:
            client._rest.pool_manager.clear()
        try:
            lt.run(stop(), timeout=10)
        finally:
            lt.stop()


def proxied_cluster(
    backend: str, real_kubeconfig: Path, tmp: Path, namespace: str
) -> Iterator[Cluster]:
    """A real API server behind the recording proxy, in a fresh namespace."""
    from recording_proxy import RecordingProxy

    lt = LoopThread()
    proxy = RecordingProxy(load_configuration_from(real_kubeconfig))
    port = lt.run(proxy.start())
    kubeconfig = write_kubeconfig(tmp / "kubeconfig", f"http://127.0.0.1:{port}")
    client = client_for(kubeconfig)
    client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    try:
        yield Cluster(
            backend=backend,
            kubeconfig=kubeconfig,
            client=client,
            namespace=namespace,
            records=proxy.records,
            has_garbage_collector=False,  # a bare kube-apiserver runs no controllers
        )
    finally:
        with contextlib.suppress(Exception):
            client.request("DELETE", f"/api/v1/namespaces/{namespace}")
        client._rest.pool_manager.clear()
        with contextlib.suppress(TimeoutError):
            lt.run(proxy.stop(), timeout=10)
        lt.stop()


def load_configuration_from(kubeconfig: Path) -> Any:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    cfg = k8s_client.Configuration()
    k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    return cfg


__all__ = ["Cluster", "Recorded", "emulator_cluster", "load_configuration", "wait_for"]


# simulated pods -------------------------------------------------------------------------------
# No scheduler or kubelet runs in any test backend, so tests play the kubelet: they write pod
# statuses for a model state. On the emulator (no controllers) the test also plays the
# Deployment controller: it creates the pods and writes the Deployment's status.

POD_STATES = ("ready", "loading", "downloading", "failed")


def pod_status(state: str, image: str = "runtime:test") -> dict[str, Any]:
    now = "2026-01-01T00:00:00Z"
    ready = state == "ready"

    def cond(ctype: str, ok: bool) -> dict[str, Any]:
        return {"type": ctype, "status": "True" if ok else "False", "lastTransitionTime": now}

    def ctr(name: str, state_obj: dict[str, Any], is_ready: bool) -> dict[str, Any]:
        return {
            "name": name,
            "image": image,
            "imageID": "",
            "ready": is_ready,
            "restartCount": 0,
            "state": state_obj,
        }

    init_done = {
        "terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}
    }
    init = {
        "ready": init_done,
        "loading": init_done,
        "downloading": {"running": {"startedAt": now}},
        "failed": {
            "terminated": {"exitCode": 1, "reason": "Error", "startedAt": now, "finishedAt": now}
        },
    }[state]
    main = (
        {"running": {"startedAt": now}}
        if state in ("ready", "loading")
        else {"waiting": {"reason": "PodInitializing"}}
    )
    return {
        "phase": "Running" if state in ("ready", "loading") else "Pending",
        "conditions": [
            cond("PodScheduled", True),
            cond("Initialized", state in ("ready", "loading")),
            cond("ContainersReady", ready),
            cond("Ready", ready),
        ],
        "initContainerStatuses": [ctr("fetch-weights", init, state in ("ready", "loading"))],
        "containerStatuses": [ctr("runtime", main, ready)],
    }


def _selector(dep: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(dep["spec"]["selector"]["matchLabels"].items()))


def simulate_pods(
    cluster: Cluster, deployment: str, state: str = "ready", *, timeout: float = 30
) -> None:
    """Make the pods of ``deployment`` report ``state`` (and, on the emulator, its status)."""
    from docparser_operator.api.kinds import KNOWN_KINDS

    dep_ref, pod_ref = KNOWN_KINDS["Deployment"], KNOWN_KINDS["Pod"]
    dep = wait_for(f"deployment {deployment}", lambda: cluster.get(dep_ref, deployment))
    want = dep["spec"].get("replicas", 1)
    if not cluster.has_controllers:
        for pod in cluster.list(pod_ref, _selector(dep)):
            cluster.client.delete(
                pod_ref, cluster.namespace, pod["metadata"]["name"], uid=pod["metadata"]["uid"]
            )
        gen = dep["metadata"]["generation"]
        template = dep["spec"]["template"]
        for i in range(want):
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{deployment}-g{gen}-{i}",
                    "namespace": cluster.namespace,
                    "labels": dict(template["metadata"]["labels"]),
                },
                "spec": template["spec"],
            }
            cluster.client.create(pod)
            cluster.client.patch_status(
                pod_ref, cluster.namespace, pod["metadata"]["name"], pod_status(state)
            )
        n_ready = want if state == "ready" else 0
        cluster.client.patch_status(
            dep_ref,
            cluster.namespace,
            deployment,
            {
                "observedGeneration": gen,
                "replicas": want,
                "updatedReplicas": want,
                "readyReplicas": n_ready,
                "availableReplicas": n_ready,
            },
        )
        return

    # real controllers: patch the pods the ReplicaSet controller made for the newest template;
    # a maxSurge-0 rollout creates them one by one as earlier ones become ready, so loop
    def current_pods() -> list[dict[str, Any]]:
        d = cluster.get(dep_ref, deployment) or {}
        version = d["spec"]["template"]["metadata"]["labels"].get("docparser.io/version")
        return [
            p
            for p in cluster.list(pod_ref, _selector(d))
            if not p["metadata"].get("deletionTimestamp")
            and p["metadata"]["labels"].get("docparser.io/version") == version
        ]

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = current_pods()
        for pod in pods:
            # a pod replaced meanwhile by the rollout fails here; the next round patches the new one
            with contextlib.suppress(Exception):
                cluster.client.patch_status(
                    pod_ref, cluster.namespace, pod["metadata"]["name"], pod_status(state)
                )
        d = cluster.get(dep_ref, deployment) or {}
        st = d.get("status") or {}
        if state != "ready" and pods:
            return
        if (
            state == "ready"
            and st.get("observedGeneration", 0) >= d["metadata"]["generation"]
            and st.get("readyReplicas", 0) >= want
            and st.get("updatedReplicas", 0) >= want
            and st.get("replicas", 0) <= want
        ):
            return
        time.sleep(0.3)
    raise AssertionError(f"deployment {deployment} did not report {state} within {timeout}s")

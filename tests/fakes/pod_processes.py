"""A kubelet stand-in whose every pod is its own real runtime process, and a Service
stand-in that spreads requests over the Ready ones.

WHY (beside kubelet_sim.py, which gives all pods of a revision one address): a latency
autoscaler is about queues, and each pod has its own. Adding a pod only helps if the new pod
is a separate server with a separate queue that takes its share of new requests, and only
once it is Ready. So each pod the ReplicaSet controller creates gets a ``docparser-runtime
serve`` process of the deterministic test engine (``serve_test_engine.py``: every engine call
takes ``delay_s``) on its own loopback address (its pod IP) and the runtime port; the pod
turns Running when the process starts and Ready when the process answers ``/readyz``, as the
kubelet's readiness probe would say. A deleted pod's process is stopped and the pod removed
(grace 0), as a kubelet finishes a deletion.

``Endpoints`` plays kube-proxy: round-robin over the pods the API server says are Ready.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from docparser_operator.api import naming
from docparser_operator.api.kinds import KNOWN_KINDS
from kube_cluster import Cluster, pod_status
from ticker import Ticker

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
from live_server import LiveServer

DEPLOY, POD = KNOWN_KINDS["Deployment"], KNOWN_KINDS["Pod"]
MANAGED = "app.kubernetes.io/managed-by=docparser-operator"


def _selector(dep: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(dep["spec"]["selector"]["matchLabels"].items()))


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class ProcessKubelet(Ticker):
    def __init__(
        self,
        cluster: Cluster,
        *,
        delay_s: float,
        env: dict[str, object],
        octet: int,
        max_pods: int = 6,
        interval: float = 0.2,
    ) -> None:
        """``octet``: the pods get 127.``octet``.0.2, .3, ... (pick one per run: no clash on
        the runtime port with another test's processes). Past ``max_pods`` live processes a
        pod stays Pending (a bound on what a test can start on a shared machine)."""
        super().__init__("process-kubelet", interval)
        self.cluster, self.delay_s, self.env = cluster, delay_s, env
        self.octet, self.max_pods = octet, max_pods
        self.servers: dict[str, LiveServer] = {}  # pod uid -> its process
        self.started: dict[str, float] = {}  # pod name -> when its process started (monotonic)
        self.ready_at: dict[str, float] = {}  # pod name -> when it first answered /readyz
        self._ready: set[str] = set()  # uids
        self._written: dict[str, str] = {}
        self._addresses = itertools.count(2)
        self._stopping: list[threading.Thread] = []

    def tick(self) -> None:
        seen: set[str] = set()
        for dep in self.cluster.list(DEPLOY, MANAGED):
            for pod in self.cluster.list(POD, _selector(dep)):
                uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
                if pod["metadata"].get("deletionTimestamp"):
                    self._finish_deletion(uid, name)
                    continue
                seen.add(uid)
                server = self.servers.get(uid)
                if server is None:
                    if len(self.servers) >= self.max_pods:
                        continue  # stays Pending: no "node" room
                    host = f"127.{self.octet}.0.{next(self._addresses)}"
                    server = LiveServer(
                        gated_delay_s=self.delay_s, host=host, port=naming.HTTP_PORT, env=self.env
                    ).start()
                    self.servers[uid], self.started[name] = server, time.monotonic()
                state = "ready" if self._probe(uid, name, server) else "loading"
                written = f"{state}@{server.host}"
                if self._written.get(uid) != written:
                    status = pod_status(state) | {"podIP": server.host}
                    with contextlib.suppress(Exception):  # deleted meanwhile
                        self.cluster.client.patch_status(POD, self.cluster.namespace, name, status)
                        self._written[uid] = written
        for uid in set(self.servers) - seen:
            self._retire(uid)

    def _probe(self, uid: str, name: str, server: LiveServer) -> bool:
        """The readiness probe: once the process answered ``/readyz``, the pod stays Ready."""
        if uid in self._ready:
            return True
        try:
            ok = httpx.get(f"{server.url}/readyz", timeout=0.5).status_code == 200
        except httpx.HTTPError:
            return False
        if ok:
            self._ready.add(uid)
            self.ready_at.setdefault(name, time.monotonic())
        return ok

    def _finish_deletion(self, uid: str, name: str) -> None:
        self._retire(uid)
        with contextlib.suppress(Exception):  # gone already
            self.cluster.client.request(
                "DELETE",
                POD.path(self.cluster.namespace, name),
                body={"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
            )

    def _retire(self, uid: str) -> None:
        server = self.servers.pop(uid, None)
        if server is not None:  # stopping waits for the process: not on the tick's thread
            thread = threading.Thread(target=server.stop, daemon=True)
            thread.start()
            self._stopping.append(thread)

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        for uid in list(self.servers):
            self._retire(uid)
        for thread in self._stopping:
            thread.join(20)


class Endpoints(Ticker):
    """The Ready pods' addresses, re-read from the API server every ``interval`` seconds;
    ``next()`` hands them out in turn (kube-proxy's round-robin)."""

    def __init__(self, cluster: Cluster, selector: str, *, interval: float = 0.3) -> None:
        super().__init__("endpoints", interval)
        self.cluster, self.selector = cluster, selector
        self._urls: list[str] = []
        self._turn = itertools.count()
        self._lock = threading.Lock()

    def tick(self) -> None:
        pods = self.cluster.list(POD, self.selector)
        urls = sorted(
            f"http://{p['status']['podIP']}:{naming.HTTP_PORT}"
            for p in pods
            if is_ready(p)
            and not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("podIP")
        )
        with self._lock:
            self._urls = urls

    def count(self) -> int:
        with self._lock:
            return len(self._urls)

    def next(self) -> str | None:
        with self._lock:
            if not self._urls:
                return None
            return self._urls[next(self._turn) % len(self._urls)]

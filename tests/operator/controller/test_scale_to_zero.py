"""Scale to zero with the real operator, on the emulator and on a real kube-apiserver: an idle ->
wake -> idle cycle, sampled throughout.

Pods report loopback addresses where a small HTTP server serves contract-shaped ``/metrics``
(the front's ``docparser_front_*`` on one, a runtime pod's series on another) whose values the
test sets, as the canary analysis tests stand real processes behind pod IPs. A sampler reads,
every few hundred milliseconds, what routes traffic and the pods behind it (never a moment
without a Ready pod behind the endpoint once it served: the front or the runtime pods), the
operator's decision (``status.scaleToZero``, the Deployment's replicas) and the DocParser as
Flux (kstatus) and Argo CD (the chart's health Lua) read it (never Failed, always agreeing).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from docparser_operator.api.kinds import DOCPARSER, KNOWN_KINDS
from dp_helpers import condition, create, docparser, event_reasons, revision, set_spec
from gitopscheck.checker import GitOpsCheck
from kube_cluster import Cluster, wait_for
from kubelet_sim import Kubelet
from operator_runner import running_operator
from pod_endpoint import loopback_subnet, metrics_endpoint
from traffic_sampler import TrafficSampler

DEPLOY, SERVICE, HPA = (
    KNOWN_KINDS["Deployment"],
    KNOWN_KINDS["Service"],
    KNOWN_KINDS["HorizontalPodAutoscaler"],
)
pytestmark = pytest.mark.slow  # two 10 s idle windows (the shortest `after`) and a wake
FRONT_SELECTOR = {
    "app.kubernetes.io/name": "docparser-front",
    "app.kubernetes.io/instance": "night",
}


@dataclass
class Metrics:
    """What one address's /metrics says; the test changes it as work comes and goes."""

    front: bool
    values: dict[str, float] = field(default_factory=dict)

    def text(self) -> str:
        v = {"held": 0, "queued": 0, "running": 0, "in_flight": 0, "requests": 0, **self.values}
        if self.front:
            return (
                f"docparser_front_held_requests {v['held']}\n"
                f"docparser_front_queued_jobs {v['queued']}\n"
                "# TYPE docparser_front_requests_total counter\n"
                f"docparser_front_requests_total {v['requests']}\n"
            )
        return (
            "# TYPE docparser_requests_total counter\n"
            f'docparser_requests_total{{route="/v1/jobs",method="POST",status="202"}} '
            f"{v['requests']}\n"
            f"docparser_outstanding_requests {v['in_flight']}\n"
            f"docparser_jobs_queued {v['queued']}\n"
            f"docparser_jobs_running {v['running']}\n"
        )


@pytest.fixture
def addresses() -> Iterator[tuple[str, Metrics, str, Metrics]]:
    front, pods = Metrics(front=True), Metrics(front=False)
    subnet = loopback_subnet()
    with (
        metrics_endpoint(f"{subnet}.4", front.text) as front_host,
        metrics_endpoint(f"{subnet}.5", pods.text) as pods_host,
    ):
        yield front_host, front, pods_host, pods


@dataclass
class Decisions:
    """The operator's decision at every sample: (state, Deployment replicas, endpoint)."""

    cluster: Cluster
    seen: list[tuple[str, int, str]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> Decisions:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.seen.append(self.read())  # the state the test last waited for

    def _loop(self) -> None:
        while not self._stop.is_set() and len(self.seen) < 5000:
            with contextlib.suppress(Exception):  # an object replaced between reads
                self.seen.append(self.read())
            self._stop.wait(0.3)

    def read(self) -> tuple[str, int, str]:
        dp = self.cluster.get(DOCPARSER, "night") or {}
        state = ((dp.get("status") or {}).get("scaleToZero") or {}).get("state", "")
        pods = sum(
            d["spec"].get("replicas", 0)
            for d in self.cluster.list(DEPLOY, "app.kubernetes.io/instance=night")
            if d["metadata"]["name"] != "night-front"
        )
        svc = self.cluster.get(SERVICE, "night") or {}
        to = "front" if (svc.get("spec") or {}).get("selector") == FRONT_SELECTOR else "pods"
        return state, pods, to


def state(cluster: Cluster) -> dict[str, Any]:
    dp = cluster.get(DOCPARSER, "night") or {}
    return (dp.get("status") or {}).get("scaleToZero") or {}


def runtime_replicas(cluster: Cluster) -> int:
    deps = cluster.list(DEPLOY, "app.kubernetes.io/instance=night")
    return sum(d["spec"].get("replicas", 0) for d in deps if d["metadata"]["name"] != "night-front")


def test_idle_wake_idle(
    cluster: Cluster,
    gitops_check: GitOpsCheck,
    addresses: tuple[str, Metrics, str, Metrics],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCPARSER_OPERATOR_IDLE_POLL_INTERVAL_S", "1")
    # no resync in the test's span: every decision below comes from a reading (a pass reads
    # some children by name; a reading that changes nothing must cost no request at all)
    monkeypatch.setenv("DOCPARSER_OPERATOR_RESYNC_INTERVAL_S", "600")
    front_host, front, pod_host, pods = addresses
    spec = docparser(
        "night",
        replicas={"min": 0, "max": 3, "scaleToZero": {"after": "10s"}},
        runtime={
            "image": "ghcr.io/example/docparser-runtime:0.1.0",
            "redisUrlSecretRef": {"name": "redis"},
        },
        autoscaling={"metric": "backlog", "target": 4},
    )
    ips = {"": front_host}  # the front's pods carry no revision
    with running_operator(cluster) as operator, Kubelet(cluster, ready_after=0.3, pod_ip=ips):
        create(cluster, spec)
        ips[wait_for("stable revision", lambda: revision(cluster, "night"))] = pod_host
        pods.values["requests"] = 3  # it served a little, then nothing
        wait_for(
            "serving",
            lambda: condition(cluster, "night", "Ready").get("reason") == "Loaded",
            timeout=60,
        )
        sampler = TrafficSampler(cluster, "night", floor=1, interval=0.3, gitops=gitops_check)
        with sampler, Decisions(cluster) as decisions:
            # idle: 10 s without work -> 0 pods, the endpoint on the front, Ready Idle
            wait_for("idle", lambda: state(cluster).get("state") == "Idle", timeout=60)
            wait_for("at 0", lambda: runtime_replicas(cluster) == 0, timeout=30)
            ready = condition(cluster, "night", "Ready")
            assert (ready["status"], ready["reason"]) == ("True", "Idle"), ready
            assert condition(cluster, "night", "Reconciling")["status"] == "False"
            assert condition(cluster, "night", "Stalled")["status"] == "False"
            dp = cluster.get(DOCPARSER, "night")
            assert gitops_check.verdict(dp) == ("Current", "Healthy")
            assert cluster.get(HPA, "night") is None  # no autoscaler over zero pods
            wait_for(
                "the ScaledToZero event",
                lambda: "ScaledToZero" in event_reasons(cluster, "night"),
                timeout=20,
            )
            # at rest at zero: the operator reads /metrics every second, the API nothing
            time.sleep(1.5)
            mark = cluster.mark()
            time.sleep(3.5)
            # (the cordoned nodes come through an open watch, kube/nodes.py: no request either)
            asked = cluster.requests_since(mark)
            assert asked == [], asked
            before = operator.reconciles(cluster.namespace, "night")
            assert before > 0
            # a spec change while idle: a new revision at 0 pods, Current at once
            changed = {**spec["spec"], "runtime": {**spec["spec"]["runtime"], "maxBatchSize": 4}}
            set_spec(cluster, "night", changed)
            wait_for(
                "the new generation observed",
                lambda: (
                    (cluster.get(DOCPARSER, "night") or {})["status"]["observedGeneration"]
                    == (cluster.get(DOCPARSER, "night") or {})["metadata"]["generation"]
                ),
                timeout=20,
            )
            ips[wait_for("new revision", lambda: revision(cluster, "night"))] = pod_host
            assert runtime_replicas(cluster) == 0
            assert gitops_check.verdict(cluster.get(DOCPARSER, "night")) == ("Current", "Healthy")
            # wake: 9 jobs queued at the front -> ceil(9 / 4) = 3 pods, traffic back once Ready
            front.values.update(queued=9, requests=1)
            wait_for("waking", lambda: state(cluster).get("state") in ("Waking", "Awake"))
            woke = state(cluster)
            assert "9 job(s) queued" in woke["reason"] and woke.get("wakeReplicas") == 3, woke
            wait_for("awake", lambda: state(cluster).get("state") == "Awake", timeout=30)
            assert runtime_replicas(cluster) == 3
            front.values.update(queued=0)
            pods.values.update(running=2, requests=12)  # the jobs run on the pods
            wait_for(
                "the autoscaler back",
                lambda: cluster.get(HPA, "night") is not None,
                timeout=20,
            )
            time.sleep(2)
            assert runtime_replicas(cluster) == 3  # no pod taken from under running jobs
            pods.values.update(running=0)
            wait_for("idle again", lambda: state(cluster).get("state") == "Idle", timeout=60)
            wait_for("at 0 again", lambda: runtime_replicas(cluster) == 0, timeout=30)
        assert sampler.violations == [], sampler.report()
        reasons = event_reasons(cluster, "night")
        assert {"ScaledToZero", "Waking", "Awake"} <= reasons, reasons
    # the decisions in the order they came: awake, idle at 0 on the front, waking with 3 pods
    # while still on the front, awake on the pods, idle again
    order: list[tuple[str, int, str]] = []
    for seen in decisions.seen:
        if not order or order[-1] != seen:
            order.append(seen)
    states = [s for s, _, _ in order]
    assert "Idle" in states and "Awake" in states, order
    for st, replicas, to in order:
        if st == "Idle" and replicas == 0:
            assert to == "front", order
    first_idle = states.index("Idle")
    assert "Awake" in states[first_idle:] and "Idle" in states[states.index("Awake", first_idle) :]
    assert all(replicas <= 3 for _, replicas, _ in order), order  # never past max (+ surge)

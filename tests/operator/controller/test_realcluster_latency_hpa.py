"""Latency-target autoscaling (issue 36) with Kubernetes' own HPA controller: a load step
raises replicas before the measured p95 queue wait crosses ``targetSeconds``.

The chain is the production one, every link real but the kubelet and the traffic source:
the real operator renders the HPA of ``autoscaling.metric: latency`` (the pods' average
``docparser_estimated_wait_seconds`` kept at ``targetSeconds``); kube-controller-manager's
HPA controller (the same Go build as the API server, 1 s sync) reads that metric through
the aggregated custom-metrics API (metrics_adapter.py: prometheus-adapter's part, reading
each pod's ``/metrics``) and writes the DocParser's scale; the operator sizes the Deployment;
the ReplicaSet controller creates pods; each pod is a real runtime process (pod_processes.py)
whose every page holds its one decode slot ``SERVICE_S`` seconds, so its queue wait is known.

The traffic is open-loop (arrivals at a fixed rate, whatever the answers): ``BASE_RATE``
pages/s, one pod at half its capacity, then a step to ``STEP_RATE``, more than two pods'
worth. Each page's queue wait is the runtime's own measurement (``timings_ms.queue``: from
the page's arrival in the queue to its slot), known at ``sent + wait``. The measured p95 at a
moment is over the pages whose waits became known in the ``WINDOW_S`` before it.

Why the order holds when the metric is right: the gauge is the wait a page arriving *now*
will have, while a measured wait is known only once the page has waited it. So the gauge
crosses the target ``targetSeconds`` before any measured wait can, and the HPA has that long
(less the 10 % tolerance) to act. A metric that lags the queue (the wait of pages already
served, say) would only move after the waits had crossed.

Asserted: the HPA read the latency metric through the adapter; nothing scaled during the
baseline; the Deployment's replicas rose; and they rose before the measured p95 crossed the
target (if it crossed at all). Speeds are only printed (the timeline, per second).
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from controlplane.harness import ControlPlane
from docparser_operator.api import naming
from docparser_operator.api.kinds import KNOWN_KINDS
from dp_helpers import create, docparser
from kube_cluster import Cluster, wait_for
from metrics_adapter import hpa_controller, hpa_log, registered_adapter
from operator_runner import running_operator
from pod_processes import MANAGED, Endpoints, ProcessKubelet
from queue_waits import Sample, first, open_loop, p95_crossing, timeline
from ticker import Ticker

pytestmark = [pytest.mark.slow, pytest.mark.realcluster, pytest.mark.timeout(600)]
DOCPARSER, DEPLOY = KNOWN_KINDS["DocParser"], KNOWN_KINDS["Deployment"]
HPA = KNOWN_KINDS["HorizontalPodAutoscaler"]
GAUGE = "docparser_estimated_wait_seconds"

SERVICE_S = 1.0  # seconds every page holds the one decode slot of its pod
TARGET_S = 6.0  # autoscaling.targetSeconds: the p95 queue wait promised
BASE_RATE = 0.5  # pages/s before the step
STEP_RATE = 2.5  # pages/s after it
BASELINE_S = 12.0
STEP_S = 25.0
WINDOW_S = 10.0  # the measured p95 is over the waits known in the last WINDOW_S
RUNTIME_ENV = {
    "DOCPARSER_MAX_BATCH_SIZE": 1,  # one decode slot: a page's wait is the pages ahead of it
    "DOCPARSER_CACHE_MAX_BYTES": 0,  # every page reaches the engine
    "DOCPARSER_MAX_QUEUE_PAGES": 1000,  # no 429s: the queue is what is measured
}


class Watch(Ticker):
    """Samples the scaling chain every 0.25 s (test reads: not counted as the operator's)."""

    def __init__(self, cluster: Cluster, name: str, endpoints: Endpoints, adapter: Any) -> None:
        super().__init__("watch", 0.25)
        self.cluster, self.name, self.endpoints, self.adapter = cluster, name, endpoints, adapter
        self.samples: list[Sample] = []

    def tick(self) -> None:
        dp = self.cluster.get(DOCPARSER, self.name) or {}
        deployments = [
            d
            for d in self.cluster.list(DEPLOY, MANAGED)
            if d["metadata"]["name"] != naming.front(self.name)
        ]
        answers = self.adapter.answers
        values = answers[-1].values if answers else {}
        self.samples.append(
            Sample(
                at=time.monotonic(),
                scale=int(dp.get("spec", {}).get("replicas", {}).get("desired", 1)),
                replicas=sum(int(d["spec"].get("replicas") or 0) for d in deployments),
                ready=self.endpoints.count(),
                gauge=sum(values.values()) / len(values) if values else None,
            )
        )


def test_a_load_step_raises_replicas_before_the_measured_p95_wait_crosses_the_target(
    real_apiserver: ControlPlane, real_cluster: Cluster
) -> None:
    cluster, name = real_cluster, "lat"
    spec = docparser(
        name,
        replicas={"min": 1, "max": 4},
        autoscaling={"metric": "latency", "targetSeconds": TARGET_S},
    )
    octet = random.randint(10, 250)  # another loopback /24 per run
    with (
        registered_adapter(real_apiserver, cluster.namespace, (GAUGE,)) as adapter,
        hpa_controller(real_apiserver),
        running_operator(cluster),
        ProcessKubelet(cluster, delay_s=SERVICE_S, env=RUNTIME_ENV, octet=octet) as kubelet,
    ):
        create(cluster, spec)
        selector = wait_for(
            "status.selector",
            lambda: ((cluster.get(DOCPARSER, name) or {}).get("status") or {}).get("selector"),
            timeout=60,
        )
        with Endpoints(cluster, selector) as endpoints:
            wait_for("the first pod Ready", endpoints.count, timeout=200)

            def read_by_hpa() -> Any:
                hpa = cluster.get(HPA, name) or {}
                current = (hpa.get("status") or {}).get("currentMetrics") or []
                return [m for m in current if m.get("pods", {}).get("metric", {}).get("name")]

            metrics = wait_for(
                f"the HPA reading {GAUGE}\n{hpa_log(real_apiserver)}", read_by_hpa, timeout=90
            )
            assert metrics[0]["pods"]["metric"]["name"] == GAUGE, metrics
            with Watch(cluster, name, endpoints, adapter) as watch:
                phases = [(BASE_RATE, BASELINE_S), (STEP_RATE, STEP_S)]
                pages, step = open_loop(endpoints.next, phases)
                # then, for the timeline only, until the pods the step asked for serve
                # (their processes start slowly on a loaded machine): bounded, not asserted
                deadline = time.monotonic() + 90
                while (
                    endpoints.count() < watch.samples[-1].replicas and time.monotonic() < deadline
                ):
                    time.sleep(0.5)
        errors = [p for p in pages if p.status != 200]
        started = dict(kubelet.started)
    samples = watch.samples
    risen = first(samples, lambda s: s.replicas > 1)
    crossing = p95_crossing(pages, step - BASELINE_S, TARGET_S, WINDOW_S)
    moments = {
        "HPA scale > 1 (its decision)": first(samples, lambda s: s.scale > 1),
        "Deployment replicas > 1": risen,
        "second pod Ready": first(samples, lambda s: s.ready > 1),
        f"measured p95 > {TARGET_S:g} s": crossing,
    }
    title = (
        f"latency autoscaler: {SERVICE_S:g} s/page, 1 slot/pod, target {TARGET_S:g} s, "
        f"{BASE_RATE:g} -> {STEP_RATE:g} pages/s at t = 0, p95 over {WINDOW_S:g} s"
    )
    print("\n" + timeline(title, samples, pages, step, WINDOW_S, moments))
    ready = {pod: f"{at - step:+.1f} s" for pod, at in sorted(kubelet.ready_at.items())}
    print(f"pods started: {len(started)}, Ready at: {ready}; kubelet errors: {kubelet.errors[:3]}")
    print(f"pages {len(pages)}, not answered 200: {len(errors)}")
    assert not errors, [(p.url, p.status) for p in errors[:5]]
    baseline = [s for s in watch.samples if s.at < step]
    assert baseline and all(s.replicas == 1 and s.scale == 1 for s in baseline), baseline[-3:]
    assert risen is not None, f"replicas never rose\n{hpa_log(real_apiserver)}"
    assert risen >= step, risen - step
    assert crossing is None or risen < crossing, (risen - step, crossing - step)

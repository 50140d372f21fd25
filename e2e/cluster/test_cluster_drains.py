"""The loss of the operator leader's node on 3 nodes, under paced load (drains follow).

One namespace and one DocParser (rapidocr, no weights, 1 GPU a pod) serve the whole module,
scaled per scenario:

e. the node holding the operator's leader dies (cable, daemons, pods): the failed requests
   (connections to the dead node's pod) and the time to recover are measured, the Lease moves
   and reconciles go on.

During every transition a sampler records the Ready endpoints behind the Service, the pods per
node and the DocParser's conditions. Figures go to bench/cluster_drains.py.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from cluster_drain import (
    ClusterSampler,
    PodView,
    endpoints_on,
    figure,
    leader,
    leader_on_a_failable_node,
    pod_view,
    uncordon,
    unreachable_toleration_s,
)
from cluster_load import Load
from cluster_nodes import node_ctl, require_nodes
from cluster_support import Target, docparser, page_png, serving_url, wait_for, wait_ready

# Bounded by their waits; the first also brings the session cluster up.
pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.timeout(600)]

NAME = "drained"
DOCUMENT = page_png(("Total 12",))
HOLD_S = 20  # spec.rollout.drainTimeout of the blocked drain: short, the scenario waits it out
DRAIN_LIMIT_S = 240  # kubectl drain --timeout: a drain the operator never lets through fails
KUBE_PROXY_SYNC_S = 3  # kube-proxy's iptables minSyncPeriod (1 s) with a margin


@dataclass(frozen=True)
class Fleet:
    target: Target
    namespace: str
    url: str

    def manifest(self, replicas: int, drain_timeout: str | None = None, max_surge: int = 1):
        obj = docparser(NAME, self.namespace, self.target.runtime_image, replicas=replicas, gpu=1)
        obj["spec"]["rollout"] = {"maxSurge": max_surge}
        if drain_timeout:
            obj["spec"]["rollout"]["drainTimeout"] = drain_timeout
        return obj

    def pods(self) -> list[PodView]:
        items = self.target.items("pods", self.namespace, f"app.kubernetes.io/instance={NAME}")
        return [pod_view(p) for p in items]

    def ready(self) -> list[PodView]:
        return [p for p in self.pods() if p.ready and not p.terminating]

    def settle(self, replicas: int, **changes) -> list[PodView]:
        """Apply the DocParser at `replicas` and wait until it is Ready with exactly that many
        Ready pods and none Pending (a scenario starts from a steady state)."""
        self.target.apply(self.manifest(replicas, **changes))
        generation = self.target.get("docparser", NAME, self.namespace)["metadata"]["generation"]
        wait_for(
            self.target,
            self.namespace,
            "the change observed",
            lambda: (
                self.target.get("docparser", NAME, self.namespace)["status"].get(
                    "observedGeneration"
                )
                == generation
            ),
            60,
            0.5,
        )
        wait_ready(self.target, self.namespace, NAME, timeout=300)

        def steady() -> list[PodView] | None:
            pods = [p for p in self.pods() if not p.terminating]
            ready = [p for p in pods if p.ready]
            return ready if len(ready) == replicas == len(pods) else None

        return wait_for(self.target, self.namespace, f"{replicas} Ready pods", steady, 180)

    @contextlib.contextmanager
    def traffic(self, timeout: httpx.Timeout | None = None) -> Iterator[tuple[Load, Any]]:
        """Paced parses through the Service (2 clients, 20 a second, a new connection each)
        and the sampler, both running for the body of the `with`."""
        load = Load(
            self.url,
            DOCUMENT,
            clients=2,
            pace_s=0.1,
            max_requests=20_000,
            max_seconds=420,
            timeout=timeout or httpx.Timeout(60),
        )
        with load, ClusterSampler(self.target, self.namespace, NAME) as sampler:
            wait_for(
                self.target,
                self.namespace,
                "first answers and a first sample",
                lambda: len(load.samples) >= 10 and sampler.samples,
                60,
                0.2,
            )
            yield load, sampler
        assert not load.ran_out, load.report("the load ran out before the transition ended")


@pytest.fixture(scope="module")
def fleet(cluster: Target) -> Iterator[Fleet]:
    nodes = [n["metadata"]["name"] for n in require_nodes(cluster, 3)]
    if not cluster.local:
        pytest.skip("takes every GPU with the local cluster's busybox and fails its nodes")
    namespace = f"e2e-drain-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", namespace)
    try:
        cluster.apply(
            docparser(NAME, namespace, cluster.runtime_image, replicas=1, gpu=1),
        )
        wait_ready(cluster, namespace, NAME, timeout=300)
        yield Fleet(cluster, namespace, serving_url(cluster, namespace, NAME))
    finally:
        uncordon(cluster, *nodes)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_e_losing_the_leaders_node(fleet: Fleet):
    """The node of the operator's leader and of one of 3 pods dies. Unavoidable: connections
    to its pod until the node controller marks it not Ready and kube-proxy drops the endpoint.
    Measured: those failures, the new leader, status naming the lost node, a spec change
    reconciled by the new leader, and Ready capacity on the live nodes again."""
    began = time.monotonic()
    fleet.settle(3)
    holder, victim = leader_on_a_failable_node(fleet.target)
    target, ns = fleet.target, fleet.namespace
    before = {p.node for p in fleet.ready()}
    assert victim in before, (victim, before)
    pods = target.items("pods", ns, f"app.kubernetes.io/instance={NAME}")
    tolerated = unreachable_toleration_s(pods[0])
    marks: dict[str, float] = {}
    try:
        # 2 s to connect: a connection to the dead node's pod is given up on as a user would.
        with fleet.traffic(httpx.Timeout(10, connect=2)) as (load, sampler):
            lost_at = time.monotonic()
            node_ctl("node-stop", victim)

            def mark(what: str, probe, timeout: float) -> None:
                wait_for(target, ns, what, probe, timeout, 0.5)
                marks[what] = round(time.monotonic() - lost_at, 1)

            mark("leader moved", lambda: leader(target)[0] not in ("", holder), 120)
            mark(
                "NodeLost reported",
                lambda: (
                    (d := sampler.samples[-1].conditions.get("Degraded"))
                    and d[1] == "NodeLost"
                    and victim in d[2]
                ),
                180,
            )
            # Reconciles go on: a change made now is observed by the new leader.
            target.apply(fleet.manifest(3, max_surge=2))
            generation = target.get("docparser", NAME, ns)["metadata"]["generation"]
            mark(
                "change reconciled",
                lambda: (
                    target.get("docparser", NAME, ns)["status"].get("observedGeneration")
                    == generation
                ),
                120,
            )
            mark("dead endpoint gone", lambda: not endpoints_on(target, ns, NAME, victim), 120)
            time.sleep(KUBE_PROXY_SYNC_S)
            quiet_from = time.monotonic()
            if tolerated <= 120:
                mark(
                    "3 Ready pods on live nodes",
                    lambda: len([p for p in fleet.ready() if p.node != victim]) == 3,
                    tolerated + 120,
                )
            wait_for(
                target, ns, "answers after", lambda: load.samples[-1].started > quiet_from + 5, 30
            )
    finally:
        node_ctl("node-start", victim)
    late = [s for s in load.failed if s.started >= quiet_from]
    assert not late, f"failures after the dead endpoint left: {late[:5]}\n{sampler.story()}"
    failed = load.failed
    last = max((s.started for s in failed), default=lost_at) - lost_at
    figure(
        "node loss: the operator leader's node",
        failed=len(failed),
        requests=len([s for s in load.samples if s.started >= lost_at]),
        recovery_s=round(max(last, 0.0), 1),
        errors=sorted({(s.error or "").split(":")[0] for s in failed}),
        tolerated_s=tolerated,
        fewest_ready=sampler.fewest_ready,
        took_s=round(time.monotonic() - began),
        **{k.replace(" ", "_") + "_s": v for k, v in marks.items()},
    )

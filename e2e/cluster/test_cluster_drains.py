"""Node drains and the loss of the operator leader's node on 3 nodes, under paced load.

One namespace and one DocParser (rapidocr, no weights, 1 GPU a pod) serve the whole module,
scaled per scenario, in this order (each also runs alone, `-k`):

a. `kubectl drain` of the node holding a replicas-1 DocParser's only pod: 0 failed requests;
b. and d. a rolling drain of all 3 nodes (cordon, drain, uncordon, next), as an upgrade does:
   0 failed requests; its first node holds one of 3 pods, and that drain is measured alone (b);
c. 3 pods and every other GPU taken: the drain is held until
   `spec.rollout.drainTimeoutSeconds`, then ends with at least one Ready pod, the rest
   Unschedulable, and status saying so;
e. the node holding the operator's leader dies (cable, daemons, pods): the failed requests
   (connections to the dead node's pod) and the time to recover are measured, the Lease moves
   and reconciles go on.

During every transition a sampler records the Ready endpoints behind the Service, the pods per
node and the DocParser's conditions; a drain fails its scenario at any moment with fewer Ready
endpoints than replicas (capacity first, then the eviction). Figures: bench/cluster_drains.py.
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
    HOST_NODE,
    ClusterSampler,
    DrainResult,
    PodView,
    assert_served,
    drain,
    endpoints_on,
    figure,
    leader,
    leader_on_a_failable_node,
    one_pod_node,
    pod_view,
    uncordon,
    unreachable_toleration_s,
)
from cluster_load import Load
from cluster_nodes import (
    fill_gpus,
    forget_host_flows_to,
    node_ctl,
    ready_nodes,
    require_nodes,
    wait_host_rules_without,
)
from cluster_settle import settled_start
from cluster_support import Target, docparser, page_png, serving_url, wait_for, wait_ready

# Bounded by their waits; the first also brings the session cluster up.
pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.timeout(600)]

NAME = "drained"
DOCUMENT = page_png(("Total 12",))
# spec.rollout.drainTimeoutSeconds of the blocked drain, which the scenario waits out: above
# the operator's 5 s cordon poll plus kubectl's 5 s eviction retry, so a held drain is seen
HOLD_S = 14
DRAIN_LIMIT_S = 240  # kubectl drain --timeout: a drain the operator never lets through fails


@dataclass(frozen=True)
class Fleet:
    target: Target
    namespace: str
    url: str

    def manifest(self, replicas: int, drain_timeout_s: int | None = None, max_surge: int = 1):
        obj = docparser(NAME, self.namespace, self.target.runtime_image, replicas=replicas, gpu=1)
        obj["spec"]["rollout"] = {"maxSurge": max_surge}
        if drain_timeout_s is not None:
            obj["spec"]["rollout"]["drainTimeoutSeconds"] = drain_timeout_s
        return obj

    def pods(self) -> list[PodView]:
        items = self.target.items("pods", self.namespace, f"app.kubernetes.io/instance={NAME}")
        return [pod_view(p) for p in items]

    def ready(self) -> list[PodView]:
        return [p for p in self.pods() if p.ready and not p.terminating]

    def settle(self, replicas: int, **changes) -> list[PodView]:
        """Apply the DocParser at `replicas` and wait until it is Ready with exactly that many
        Ready pods and none Pending, and traffic reaches exactly those (the settled start: a
        drain's first sample once saw 2 endpoints of 3 Ready pods, before any cordon)."""
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
        self.wait_steady(replicas)
        return self.settled(replicas)

    def settled(self, replicas: int) -> list[PodView]:
        """The settled start (cluster_settle.py) at `replicas`; the Ready pods it holds for."""
        settled_start(
            self.target, self.namespace, NAME, docparser=NAME, replicas=replicas, timeout=180
        )
        return self.ready()

    def wait_steady(self, replicas: int, timeout: float = 180) -> list[PodView]:
        """Exactly `replicas` pods, all Ready, none Pending (Terminating ones aside)."""

        def steady() -> list[PodView] | None:
            pods = [p for p in self.pods() if not p.terminating]
            ready = [p for p in pods if p.ready]
            return ready if len(ready) == replicas == len(pods) else None

        return wait_for(self.target, self.namespace, f"{replicas} Ready pods", steady, timeout)

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


def _drained(fleet: Fleet, result, what: str, sampler: ClusterSampler) -> None:
    """kubectl drain ended well; if not: its distinct lines, the samples, the budget."""
    if result.returncode == 0:
        return
    lines = list(dict.fromkeys(result.output.splitlines()))  # kubectl repeats each retry
    budget = fleet.target.kubectl("-n", fleet.namespace, "get", "pdb", "-o", "yaml", check=False)
    raise AssertionError(
        f"{what}: kubectl drain failed after {result.seconds:.0f}s ({result.held} held):\n"
        + "\n".join(lines[-20:])
        + f"\n{sampler.story()}\n{budget[-2500:]}\n{fleet.target.explain(fleet.namespace)}"
    )


def test_a_drain_of_the_only_pods_node_loses_no_request(fleet: Fleet):
    began = time.monotonic()
    (pod,) = fleet.settle(1)
    try:
        with fleet.traffic() as (load, sampler):
            result = drain(fleet.target, pod.node or "", DRAIN_LIMIT_S)
            fleet.wait_steady(1)  # sampled until the replacement serves, if it does not yet
    finally:
        uncordon(fleet.target, pod.node or "")
    _drained(fleet, result, "replicas 1", sampler)
    assert_served(load, sampler, 1, "replicas 1")
    after = fleet.ready()
    assert [p.node for p in after] and pod.node not in {p.node for p in after}, after
    figure(
        "drain, replicas 1",
        drain_s=round(result.seconds, 1),
        requests=len(load.samples),
        failed=len(load.failed),
        fewest_ready=sampler.fewest_ready,
        evictions_held=sum(result.held.values()),
        took_s=round(time.monotonic() - began),
    )


def test_b_d_a_rolling_drain_of_every_node_loses_no_request(fleet: Fleet):
    """An upgrade: each node in turn cordoned, drained and uncordoned, the next one at once,
    under one load. The first node holds one of the 3 pods (scenario b, its own figures); then
    the node holding fewer of the pods (node 0, where this host's tools run, last of equals).
    The first drain's replacement lands on a node still to drain, so one of them holds 2 pods
    and is drained pod by pod (maxSurge 1) whatever the order; draining the other next sends
    its replacement to the drained node, where a fixed order could have sent it to the 2-pod
    node (a third pod to move there, ~20 s more)."""
    began = time.monotonic()
    pods = fleet.settle(3)
    first = one_pod_node(pods)
    names = [n["metadata"]["name"] for n in ready_nodes(fleet.target)]
    nodes = [first]
    windows: dict[str, tuple[float, float, DrainResult]] = {}
    try:
        with fleet.traffic() as (load, sampler):
            for _ in names:  # each node once; the next one chosen after each drain
                node = nodes[-1]
                start = time.monotonic()
                result = drain(fleet.target, node, DRAIN_LIMIT_S)
                uncordon(fleet.target, node)
                _drained(fleet, result, f"rolling drain of {node}", sampler)
                windows[node] = (start, time.monotonic(), result)
                held = [p.node for p in fleet.pods() if not p.terminating]
                left = [n for n in names if n not in nodes]
                if left:
                    nodes.append(min(left, key=lambda n: (held.count(n), n == HOST_NODE, n)))
            fleet.wait_steady(3)
    finally:
        uncordon(fleet.target, *nodes)
    start, end, result = windows[first]
    during = [s for s in load.samples if start <= s.started <= end]
    seen = [s.ready_endpoints for s in sampler.between(start, end)]
    assert seen, sampler.story()
    figure(
        "drain, 1 of 3 pods",
        drain_s=round(result.seconds, 1),
        requests=len(during),
        failed=len([s for s in during if s.status != 200]),
        fewest_ready=min(seen),
        evictions_held=sum(result.held.values()),
    )
    assert_served(load, sampler, 3, "rolling drain")
    figure(
        "rolling drain of 3 nodes",
        drain_s=round(sum(r.seconds for _, _, r in windows.values()), 1),
        per_node_s={n: round(r.seconds, 1) for n, (_, _, r) in windows.items()},
        requests=len(load.samples),
        failed=len(load.failed),
        fewest_ready=sampler.fewest_ready,
        took_s=round(time.monotonic() - began),
    )


def test_c_a_drain_without_room_ends_at_its_deadline(fleet: Fleet):
    """Every other GPU is taken, so no replacement can start: the eviction waits for the
    drain deadline, then proceeds; at least one pod stays Ready, the replacement is
    Unschedulable, and status says both."""
    began = time.monotonic()
    node = one_pod_node(fleet.settle(3, drain_timeout_s=HOLD_S))
    hogs = fill_gpus(fleet.target, fleet.namespace, leave=0)

    def hogs_running() -> bool:
        found = fleet.target.items("pods", fleet.namespace, "app=gpu-hog")
        return len([p for p in found if p["status"].get("phase") == "Running"]) == hogs

    try:
        wait_for(fleet.target, fleet.namespace, f"{hogs} GPU pods Running", hogs_running, 120)
        fleet.settled(3)
        with fleet.traffic() as (load, sampler):
            # Held for HOLD_S (from when the operator sees the cordon, polled every 5 s), then
            # kubectl's next retry (every 5 s) and the pod's graceful end.
            result = drain(fleet.target, node, HOLD_S + 90)
            _drained(fleet, result, "no room", sampler)
            # What status says once the drain has gone through: capacity lost, and why.
            after = wait_for(
                fleet.target,
                fleet.namespace,
                "status naming the lost capacity",
                lambda: (
                    (s := sampler.samples[-1]).conditions.get("Degraded", ("",))[0] == "True"
                    and any(p.unschedulable for p in s.pods)
                    and s
                ),
                60,
                0.5,
            )
        assert_served(load, sampler, 1, "no room")  # the evicted pod drains while 2 others serve
        blocked = sampler.first(
            lambda s: (
                s.conditions.get("Degraded", ("", "", ""))[1] == "DrainBlocked"
                and node in s.conditions["Degraded"][2]
            )
        )
        # Held without a Blocked status before the deadline (one run), the DeadlineExceeded
        # status lasts only until kubectl's next 5 s retry: it may fall between two samples.
        # The operator's Event of that same status write stays.
        told = fleet.target.kubectl(
            "-n", fleet.namespace, "get", "events", "-o",
            "jsonpath={range .items[*]}{.reason}: {.message}{'\\n'}{end}", check=False,
        )  # fmt: skip
        said = [
            line
            for line in told.splitlines()
            if line.startswith(("DrainBlocked:", "DrainDeadlineExceeded:"))
            and f"node {node}" in line
        ]
        assert blocked is not None or said, f"never Degraded DrainBlocked {node}\n{sampler.story()}"
        assert result.seconds >= HOLD_S - 2, (result.seconds, sampler.story())
        assert after.ready_per_node() and sum(after.ready_per_node().values()) >= 1, after.line()
        assert all(p.ready or p.unschedulable or p.terminating for p in after.pods), after.line()
        assert node not in after.ready_per_node(), after.line()
    finally:
        fleet.target.kubectl(
            "-n", fleet.namespace, "delete", "deployment", "gpu-hog", "--wait=false", check=False
        )
        uncordon(fleet.target, node)
    figure(
        f"drain, no room (drainTimeoutSeconds {HOLD_S})",
        drain_s=round(result.seconds, 1),
        requests=len(load.samples),
        failed=len(load.failed),
        fewest_ready=sampler.fewest_ready,
        blocked_at_s=round(blocked.at, 1) if blocked is not None else None,
        gpus_taken_by_others=hogs,
        status_after=after.condition("Degraded"),
        took_s=round(time.monotonic() - began),
    )


def test_e_losing_the_leaders_node(fleet: Fleet):
    """The node of the operator's leader and of one of 3 pods dies. Unavoidable: connections
    to its pod until the node controller marks it not Ready and kube-proxy drops the endpoint.
    Measured: those failures, the new leader, status naming the lost node, a spec change
    reconciled by the new leader, and Ready capacity on the live nodes again."""
    began = time.monotonic()
    fleet.settle(3)
    holder, victim, cordoned = leader_on_a_failable_node(fleet.target)
    if cordoned:
        # Moving the leader cordoned node 0 for a while, and the operator replaces pods of a
        # cordoned node: let it see the uncordon (its poll: 5 s) and return to 3 pods.
        time.sleep(6)
    fleet.wait_steady(3)
    target, ns = fleet.target, fleet.namespace
    # The pods spread by preference only (ScheduleAnyway), and the rolling drain leaves the
    # node it drained last without any; the leader may run there (drained operator pods land
    # on the emptiest node). Move a pod of the fullest node: spread sends it to the empty one.
    for _ in range(3):
        ready = fleet.ready()
        per_node = [p.node for p in ready]
        if victim in per_node:
            break
        fullest = max(ready, key=lambda p, nodes=per_node: nodes.count(p.node))
        target.kubectl("-n", ns, "delete", "pod", fullest.name, "--wait=false")
        fleet.wait_steady(3)
    fleet.settled(3)
    before = {p.node for p in fleet.ready()}
    assert victim in before, (victim, before)
    pods = target.items("pods", ns, f"app.kubernetes.io/instance={NAME}")
    tolerated = unreachable_toleration_s(pods[0])
    dead_ips = {
        p["status"]["podIP"]
        for p in pods
        if p["spec"].get("nodeName") == victim and p["status"].get("podIP")
    }
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
            # The host's kube-proxy (its rules carry this load) may rewrite its rules seconds
            # later on a loaded machine: the window opens once they hold no dead pod, and the
            # host's conntrack no flow to one (a reused source port would follow it there).
            wait_host_rules_without(target, ns, dead_ips)
            stale_flows = forget_host_flows_to(dead_ips)
            quiet_from = time.monotonic()
            wait_for(
                target, ns, "answers after", lambda: load.samples[-1].started > quiet_from + 5, 30
            )
            quiet_to = time.monotonic()
            if tolerated <= 120:
                mark(
                    "3 Ready pods on live nodes",
                    lambda: len([p for p in fleet.ready() if p.node != victim]) == 3,
                    tolerated + 120,
                )
    finally:
        node_ctl("node-start", victim)
    late = [s for s in load.failed if quiet_from <= s.started <= quiet_to]
    assert not late, f"failures after the dead endpoint left: {late[:5]}\n{sampler.story()}"
    # After that window (the dead pod evicted past its toleration, the replacement loading):
    # counted, not asserted yet (3 ConnectTimeouts once: flows to the dead pod, see
    # forget_host_flows_to, now deleted when the window opens).
    replacing = [s for s in load.failed if s.started > quiet_to]
    failed = load.failed
    last = max((s.started for s in failed if s.started <= quiet_to), default=lost_at) - lost_at
    figure(
        "node loss: the operator leader's node",
        failed=len(failed),
        requests=len([s for s in load.samples if s.started >= lost_at]),
        recovery_s=round(max(last, 0.0), 1),
        failed_while_replacing=len(replacing),
        stale_flows_deleted=stale_flows,
        failed_at_s=[round(s.started - lost_at, 1) for s in failed][:40],
        quiet_s=[round(quiet_from - lost_at, 1), round(quiet_to - lost_at, 1)],
        errors=sorted({(s.error or "").split(":")[0] for s in failed}),
        tolerated_s=tolerated,
        fewest_ready=sampler.fewest_ready,
        took_s=round(time.monotonic() - began),
        **{k.replace(" ", "_") + "_s": v for k, v in marks.items()},
    )

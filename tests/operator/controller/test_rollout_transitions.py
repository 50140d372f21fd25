"""Rollouts on a cluster, sampled while they change: no moment without Ready capacity.

Each scenario runs the real operator against the `cluster` fixture (the emulator, and the real
kube-apiserver with its Deployment and ReplicaSet controllers), with ``Kubelet`` making pods
Ready after a delay, and a ``TrafficSampler`` reading the traffic objects every half second
through the whole scenario. The test fails on any sample where a weighted backend (or the
endpoint Service) had no Ready pod, or Ready pods behind traffic fell below the size, and on
any moment with more pods than ``size + rollout.maxSurge``. Pure planner properties (every
tick of many more transitions) are in test_rollout.py.

With tests/gitopscheck built, every sample also asks Flux's kstatus and Argo CD's health script
(their own code) what they make of the DocParser: they agree, neither says Failed during these
healthy walks, each rollout is seen InProgress/Progressing, and each resting point (``settle``)
is Current/Healthy, as is every moment of an HPA scale-up and of a serving pod's restart.
"""

from __future__ import annotations

import copy
import sys
from typing import Any

from docparser_operator.api.kinds import DOCPARSER
from dp_helpers import (
    CANARY_WEIGHTS,
    DEPLOY,
    GATEWAY,
    ROUTE,
    condition,
    create,
    dep_name,
    docparser,
    revision,
    revision_in,
    role_deployment,
    route_weights,
    scale_to,
    set_spec,
    spec_of,
)
from gitopscheck.checker import GitOpsCheck
from kube_cluster import Cluster, wait_for
from kubelet_sim import Kubelet
from traffic_sampler import TrafficSampler, unsettled

STEP_TIMEOUT = 60


def settled(cluster: Cluster, name: str) -> bool:
    """The operator acted on the current spec and the rollout is over (Progressing False)."""
    dp = cluster.get(DOCPARSER, name) or {}
    status = dp.get("status") or {}
    if status.get("observedGeneration") != dp.get("metadata", {}).get("generation"):
        return False
    return condition(cluster, name, "Progressing").get("status") == "False"


def settle(
    cluster: Cluster, name: str, what: str, check: GitOpsCheck | None = None
) -> dict[str, Any]:
    """Wait until the rollout is over; then (with ``check``) Flux and Argo CD say it is."""
    wait_for(what, lambda: settled(cluster, name), timeout=STEP_TIMEOUT, interval=0.2)
    dp = cluster.get(DOCPARSER, name)
    if check is not None:
        assert check.verdict(dp) == ("Current", "Healthy"), (what, dp["status"]["conditions"])
    return dp["status"]


def stays_current(
    cluster: Cluster, name: str, check: GitOpsCheck | None, what: str, until: Any
) -> int:
    """Ask both tools every 0.1 s until ``until()`` holds: Current/Healthy at every moment the
    status describes the spec (an autoscaler or a restart is no rollout). The HPA's write of
    spec.replicas.desired is a new generation: until the operator's next status write both
    tools wait (InProgress/Progressing, as for a Deployment the HPA scales); never longer.
    Returns the number of verdicts taken on a current status."""
    taken = 0

    def probe() -> bool:
        nonlocal taken
        if check is not None:
            dp = cluster.get(DOCPARSER, name)
            found = check.verdict(dp)
            lag = dp["status"].get("observedGeneration") != dp["metadata"].get("generation")
            if not (lag and found == ("InProgress", "Progressing")):
                assert found == ("Current", "Healthy"), (what, dp["status"]["conditions"])
                taken += 1
        return bool(until())

    wait_for(what, probe, timeout=STEP_TIMEOUT, interval=0.1)
    return taken


def walked(sampler: TrafficSampler, check: GitOpsCheck | None) -> None:
    """The tools saw the rollout as one: InProgress/Progressing while it ran (and the sampler
    recorded any disagreement or Failed as a violation)."""
    if check is not None:
        assert ("InProgress", "Progressing") in sampler.verdicts(), sampler.verdicts()


def pods_of(cluster: Cluster, name: str) -> int:
    return sum(
        (d.get("spec") or {}).get("replicas", 0)
        for d in cluster.list(DEPLOY, f"app.kubernetes.io/instance={name}")
    )


def test_canary_walk_promote_and_revert_on_gateway(
    cluster: Cluster, operator: Any, gitops_check_optional: GitOpsCheck | None
) -> None:
    """v1 -> dark canary -> 25% -> 100% -> promote -> git revert of the promotion -> rollback
    to v1, with 2 pods and one spare GPU: capacity and routing stay safe at every sample."""
    spec = docparser("inv", traffic=GATEWAY, replicas={"min": 2, "max": 2})["spec"]
    with Kubelet(cluster, ready_after=1.5):  # slow enough that samples land mid-transition
        create(cluster, docparser("inv", **spec))
        settle(cluster, "inv", "v1 serving", gitops_check_optional)
        v1 = revision(cluster, "inv")
        with TrafficSampler(
            cluster, "inv", floor=2, interval=0.25, gitops=gitops_check_optional
        ) as sampler:
            spec = spec_of(cluster, "inv")
            spec["canary"] = {"weights": CANARY_WEIGHTS, "weight": 0}
            set_spec(cluster, "inv", spec)
            st = settle(cluster, "inv", "dark canary Ready", gitops_check_optional)
            assert st["canary"]["readyReplicas"] == 1 and st["canary"]["weight"] == 0
            assert pods_of(cluster, "inv") == 3  # size + maxSurge
            v2 = revision(cluster, "inv", "canary")

            spec["canary"]["weight"] = 25
            set_spec(cluster, "inv", spec)
            assert settle(cluster, "inv", "25%", gitops_check_optional)["canary"]["weight"] == 25

            spec["canary"]["weight"] = 100
            set_spec(cluster, "inv", spec)
            st = settle(cluster, "inv", "100%", gitops_check_optional)
            assert st["canary"]["weight"] == 100 and st["canary"]["readyReplicas"] == 2
            assert condition(cluster, "inv", "Ready")["status"] == "True"  # healthy at rest

            at_100 = copy.deepcopy(spec)
            promoted = copy.deepcopy(spec)
            promoted["weights"] = promoted.pop("canary")["weights"]
            canary_pods = role_deployment(cluster, "inv", "canary")["status"]
            set_spec(cluster, "inv", promoted)  # promote: one commit
            st = settle(cluster, "inv", "promoted", gitops_check_optional)
            assert st["stable"]["revision"] == v2 and st["stable"]["version"] == "2026-03-01"
            live = cluster.get(DEPLOY, f"inv-{v2}")
            assert live["status"]["readyReplicas"] == canary_pods["readyReplicas"] == 2
            assert cluster.get(DEPLOY, f"inv-{v1}")["spec"]["replicas"] == 0  # kept

            set_spec(cluster, "inv", at_100)  # git revert of the promotion
            st = settle(cluster, "inv", "reverted to 100%", gitops_check_optional)
            assert st["canary"]["revision"] == v2 and st["canary"]["weight"] == 100

            del spec["canary"]
            set_spec(cluster, "inv", spec)  # roll back to v1 alone
            st = settle(cluster, "inv", "back on v1", gitops_check_optional)
            assert st["stable"]["revision"] == v1 and "canary" not in st
            assert route_weights(cluster, "inv") == {"stable": 100}
        sys.__stderr__.write(f"\n{cluster.backend}: {sampler.report()}\n")  # docs/benchmarks.md
        assert sampler.violations == [], sampler.report()
        walked(sampler, gitops_check_optional)
        assert len(sampler.samples) >= 20, sampler.report()
        assert max(s.behind for s in sampler.samples) >= 2


def test_service_router_autoscaled_within_n_gpus(
    cluster: Cluster, operator: Any, gitops_check_optional: GitOpsCheck | None
) -> None:
    """router service, min 2 / max 4, maxSurge 0: a canary at 50%, the autoscaler raising the
    size through the scale subresource, then promotion, never exceeding the size."""
    spec = docparser("inv", replicas={"min": 2, "max": 4}, rollout={"maxSurge": 0})["spec"]
    with Kubelet(cluster, ready_after=0.5):
        create(cluster, docparser("inv", **spec))
        settle(cluster, "inv", "v1 serving", gitops_check_optional)
        with TrafficSampler(cluster, "inv", floor=1, gitops=gitops_check_optional) as sampler:
            spec = spec_of(cluster, "inv")
            spec["canary"] = {"weights": CANARY_WEIGHTS, "weight": 50}
            set_spec(cluster, "inv", spec)
            st = settle(cluster, "inv", "50% by pods", gitops_check_optional)
            assert st["canary"]["weight"] == 50 and st["replicas"] == 2
            assert pods_of(cluster, "inv") == 2  # maxSurge 0: never a third GPU

            scale_to(cluster, "inv", 4)  # what the HPA does: not a rollout, so no Progressing
            stays_current(
                cluster,
                "inv",
                gitops_check_optional,
                "4 pods Ready",
                lambda: cluster.get(DOCPARSER, "inv")["status"]["replicas"] == 4,
            )
            st = settle(cluster, "inv", "scaled to 4", gitops_check_optional)
            assert st["rollout"]["size"] == 4 and st["canary"]["weight"] == 50
            assert (st["stable"]["readyReplicas"], st["canary"]["readyReplicas"]) == (2, 2)
            assert condition(cluster, "inv", "Ready")["status"] == "True"

            promoted = spec_of(cluster, "inv")
            promoted["weights"] = promoted.pop("canary")["weights"]
            set_spec(cluster, "inv", promoted)
            st = settle(cluster, "inv", "promoted", gitops_check_optional)
            assert st["stable"]["version"] == "2026-03-01" and st["stable"]["readyReplicas"] == 4
        sys.__stderr__.write(f"\n{cluster.backend}: {sampler.report()}\n")  # docs/benchmarks.md
        assert sampler.violations == [], sampler.report()
        walked(sampler, gitops_check_optional)
        budget = max(s.behind for s in sampler.samples)
        assert budget <= 4, sampler.report()


def test_promotion_at_100_with_an_autoscaler_keeps_every_pod(
    cluster: Cluster, operator: Any, gitops_check_optional: GitOpsCheck | None
) -> None:
    """The issue's permanent outage: autoscaled (min 1, max 4, the HPA chose 3), a canary at
    100 %, then the documented promotion in one commit. The promoted revision keeps its 3
    Ready pods and becomes stable; no moment has fewer than 3 Ready pods behind traffic."""
    spec = docparser("inv", traffic=GATEWAY, replicas={"min": 1, "max": 4})["spec"]
    with Kubelet(cluster, ready_after=0.5):
        create(cluster, docparser("inv", **spec))
        settle(cluster, "inv", "serving", gitops_check_optional)
        scale_to(cluster, "inv", 3)  # what the HPA does
        wait_for(
            "3 pods Ready",
            lambda: cluster.get(DOCPARSER, "inv")["status"]["replicas"] == 3,
            timeout=STEP_TIMEOUT,
        )
        settle(cluster, "inv", "at 3", gitops_check_optional)
        with TrafficSampler(
            cluster, "inv", floor=3, interval=0.25, gitops=gitops_check_optional
        ) as sampler:
            spec = spec_of(cluster, "inv")
            spec["canary"] = {"weights": CANARY_WEIGHTS, "weight": 100}
            set_spec(cluster, "inv", spec)
            st = settle(cluster, "inv", "100% on the canary", gitops_check_optional)
            assert st["canary"]["weight"] == 100 and st["canary"]["readyReplicas"] == 3
            v2 = revision(cluster, "inv", "canary")
            promoted = spec_of(cluster, "inv")
            promoted["weights"] = promoted.pop("canary")["weights"]
            set_spec(cluster, "inv", promoted)
            st = settle(cluster, "inv", "promoted", gitops_check_optional)
        assert st["stable"]["revision"] == v2 and st["stable"]["readyReplicas"] == 3
        assert condition(cluster, "inv", "Ready")["status"] == "True"
        sys.__stderr__.write(f"\n{cluster.backend}: {sampler.report()}\n")  # docs/benchmarks.md
        assert sampler.violations == [], sampler.report()
        walked(sampler, gitops_check_optional)


def test_runtime_change_rolls_a_new_revision_make_before_break(
    cluster: Cluster, operator: Any, gitops_check_optional: GitOpsCheck | None
) -> None:
    spec = docparser("inv", traffic=GATEWAY, replicas={"min": 2, "max": 2})["spec"]
    with Kubelet(cluster, ready_after=0.5):
        create(cluster, docparser("inv", **spec))
        settle(cluster, "inv", "serving", gitops_check_optional)
        old = dep_name(cluster, "inv")
        with TrafficSampler(cluster, "inv", floor=2, gitops=gitops_check_optional) as sampler:
            spec = spec_of(cluster, "inv")
            spec["runtime"]["image"] = "ghcr.io/example/docparser-runtime:0.2.0"
            set_spec(cluster, "inv", spec)
            st = settle(cluster, "inv", "new image serving", gitops_check_optional)
        assert dep_name(cluster, "inv") != old
        assert cluster.get(DEPLOY, old)["spec"]["replicas"] == 0
        assert st["stable"]["readyReplicas"] == 2
        sys.__stderr__.write(f"\n{cluster.backend}: {sampler.report()}\n")  # docs/benchmarks.md
        assert sampler.violations == [], sampler.report()
        walked(sampler, gitops_check_optional)


def test_router_change_with_a_canary_keeps_ready_capacity(
    cluster: Cluster, operator: Any, gitops_check_optional: GitOpsCheck | None
) -> None:
    """service -> gateway -> service with a 50% canary on 2 pods: the split moves from pod
    ratio to route weights and back, never without Ready capacity behind traffic."""
    spec = docparser("inv", replicas={"min": 2, "max": 2})["spec"]
    with Kubelet(cluster, ready_after=1.0):  # slow enough that samples land mid-transition
        create(cluster, docparser("inv", **spec))
        settle(cluster, "inv", "serving", gitops_check_optional)
        with TrafficSampler(
            cluster, "inv", floor=2, interval=0.25, gitops=gitops_check_optional
        ) as sampler:
            spec = spec_of(cluster, "inv")
            spec["canary"] = {"weights": CANARY_WEIGHTS, "weight": 50}
            set_spec(cluster, "inv", spec)
            assert (
                settle(cluster, "inv", "50% by pods", gitops_check_optional)["canary"]["weight"]
                == 50
            )
            spec["traffic"] = GATEWAY
            set_spec(cluster, "inv", spec)
            assert (
                settle(cluster, "inv", "on the gateway", gitops_check_optional)["canary"]["weight"]
                == 50
            )
            assert route_weights(cluster, "inv") == {"stable": 50, "canary": 50}
            spec["traffic"] = {"router": "service"}
            set_spec(cluster, "inv", spec)
            st = settle(cluster, "inv", "back on the service", gitops_check_optional)
            assert st["canary"]["weight"] == 50 and cluster.get(ROUTE, "inv") is None
        sys.__stderr__.write(f"\n{cluster.backend}: {sampler.report()}\n")  # docs/benchmarks.md
        assert sampler.violations == [], sampler.report()
        walked(sampler, gitops_check_optional)
        assert len(sampler.samples) >= 4, sampler.report()


def test_canary_that_never_becomes_ready_gets_no_traffic(cluster: Cluster, operator: Any) -> None:
    spec = docparser("inv", traffic=GATEWAY, replicas={"min": 2, "max": 2})["spec"]
    create(cluster, docparser("inv", **spec))
    spec["canary"] = {"weights": CANARY_WEIGHTS, "weight": 50}
    broken = revision_in(docparser("inv", **spec), "canary")
    with Kubelet(cluster, ready_after=0.3, never_ready={broken}):
        settle(cluster, "inv", "serving")
        with TrafficSampler(cluster, "inv", floor=2) as sampler:
            set_spec(cluster, "inv", spec)
            wait_for("canary deployment", lambda: role_deployment(cluster, "inv", "canary"))
            wait_for(
                "progressing on the canary",
                lambda: condition(cluster, "inv", "Progressing").get("status") == "True",
            )
            for _ in range(6):  # a few seconds of the stuck rollout
                sampler.sample()
        assert route_weights(cluster, "inv") == {"stable": 100, "canary": 0}
        ready = condition(cluster, "inv", "Ready")
        assert ready["status"] == "True", cluster.get(DOCPARSER, "inv")["status"]
        assert cluster.get(DOCPARSER, "inv")["status"]["stable"]["readyReplicas"] == 2
        sys.__stderr__.write(f"\n{cluster.backend}: {sampler.report()}\n")  # docs/benchmarks.md
        assert sampler.violations == [], sampler.report()


def test_sampler_catches_a_backend_without_ready_pods(cluster: Cluster) -> None:
    """The sampler itself can fail: weight a backend that has no Ready pod behind it."""
    from docparser_operator.api.kinds import KNOWN_KINDS
    from docparser_operator.controller.reconcile import reconcile
    from kube_cluster import client_for

    api = client_for(cluster.kubeconfig, user_agent="docparser-operator/test")
    create(cluster, docparser("inv", traffic=GATEWAY, replicas={"min": 2, "max": 2}))
    with Kubelet(cluster, ready_after=0.1):
        wait_for(
            "2 Ready pods",
            lambda: (
                (reconcile(api, cluster.get(DOCPARSER, "inv")) or True)
                and (role_deployment(cluster, "inv") or {}).get("status", {}).get("readyReplicas")
                == 2
            ),
            timeout=STEP_TIMEOUT,
        )
    sampler = TrafficSampler(cluster, "inv", floor=2)
    assert sampler.sample().behind == 2 and sampler.violations == []
    route = cluster.get(KNOWN_KINDS["HTTPRoute"], "inv")
    backends = route["spec"]["rules"][0]["backendRefs"]
    backends.append({"name": "inv-nothing", "port": 8000, "weight": 50})
    cluster.client.request(
        "PATCH",
        KNOWN_KINDS["HTTPRoute"].path(cluster.namespace, "inv"),
        body={"spec": {"rules": [{**route["spec"]["rules"][0], "backendRefs": backends}]}},
        content_type="application/merge-patch+json",
    )
    sampler.sample()
    assert len(sampler.violations) == 1, sampler.violations
    assert sampler.violations[0].startswith("inv-nothing weighted 50 with 0 Ready pods (router")


def test_a_sampler_starts_from_a_settled_start(cluster: Cluster, operator: Any) -> None:
    """Entered right after the DocParser is created, the sampler's first sample already sees
    its size behind traffic: __enter__ waited for the DocParser at rest and every pod Ready
    (issue 38: a drain's first sample, before any change, once read a start still settling)."""
    create(cluster, docparser("inv", traffic=GATEWAY, replicas={"min": 2, "max": 2}))
    with Kubelet(cluster, ready_after=0.5):
        with TrafficSampler(cluster, "inv", floor=2, interval=0.1) as sampler:
            wait_for("a few samples", lambda: len(sampler.samples) >= 3)
        assert sampler.settled_s is not None and sampler.settled_s > 0
        assert [s.behind for s in sampler.samples[:3]] == [2, 2, 2], sampler.report()


def test_the_settled_start_names_what_is_still_settling() -> None:
    dp = {
        "metadata": {"generation": 3},
        "status": {
            "observedGeneration": 3,
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "Progressing", "status": "False"},
            ],
        },
    }
    pod = {"metadata": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    starting = {"metadata": {}, "status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    leaving = {"metadata": {"deletionTimestamp": "now"}, "status": {}}
    two = [{"spec": {"replicas": 2}}, {"spec": {"replicas": 0}}]
    assert unsettled(dp, [pod, pod, leaving], two, behind=2, floor=2) == []
    assert unsettled(dp, [pod, starting], two, behind=1, floor=2) == [
        "1 Ready of 2 pods, 2 wanted",
        "1 Ready pods behind traffic < 2",
    ]
    rolling = {**dp, "metadata": {"generation": 4}}
    assert unsettled(rolling, [pod, pod], two, behind=2, floor=2) == [
        "the DocParser not at rest (Ready=True Progressing=False observedGeneration 3/4)"
    ]
    assert unsettled(None, [], [], behind=0, floor=0)[0].startswith("the DocParser not at rest")

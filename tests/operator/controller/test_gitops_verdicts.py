"""What Flux (kstatus) and Argo CD (the chart's health script) say of a DocParser on a cluster,
by their own code (tests/gitopscheck), where the rollout walks of test_rollout_transitions.py
do not go: a serving pod that restarts, and each stalled reason.

- a pod of the serving revision restarting after it served (the kubelet's statuses, played
  through the pod's status subresource) leaves the DocParser Current/Healthy at every moment,
  for as many restarts as core/status/stalls.py tolerates; one more is a crash loop:
  Failed/Degraded;
- each stalled reason the cluster reports is Failed/Degraded in the very status write that
  names it (within one reconcile), never InProgress while someone has to act."""

from __future__ import annotations

from typing import Any

import pytest
from docparser_operator.api.kinds import DOCPARSER, KNOWN_KINDS
from docparser_operator.core.status.stalls import RESTARTS_TOLERATED
from dp_helpers import GATEWAY, ROUTE, condition, create, dep_name, docparser, scale_to
from gitopscheck.checker import GitOpsCheck
from kube_cluster import Cluster, pod_status, simulate_pods, wait_for
from kubelet_sim import Kubelet
from pod_statuses import NOW, POD_STATUSES
from test_rollout_transitions import STEP_TIMEOUT, settle, stays_current

POD = KNOWN_KINDS["Pod"]


def restarted(restarts: int, *, ready: bool) -> dict[str, Any]:
    """A runtime container OOM-killed ``restarts`` times: running again, Ready or not yet."""
    status = pod_status("ready" if ready else "loading")
    killed = {"exitCode": 137, "reason": "OOMKilled", "message": "INFO: parsing"}
    ctr = status["containerStatuses"][0]
    ctr.update(restartCount=restarts, lastState={"terminated": killed})
    return status


def test_a_serving_pod_restart_stays_current_until_a_crash_loop(
    cluster: Cluster, operator: Any, gitops_check: GitOpsCheck
) -> None:
    create(cluster, docparser("inv", replicas={"min": 1, "max": 2}))
    with Kubelet(cluster, ready_after=0.3):
        settle(cluster, "inv", "serving", gitops_check)
        scale_to(cluster, "inv", 2)  # what the HPA does
        stays_current(
            cluster,
            "inv",
            gitops_check,
            "2 pods Ready",
            lambda: cluster.get(DOCPARSER, "inv")["status"].get("replicas") == 2,
        )
        st = settle(cluster, "inv", "at 2", gitops_check)
        assert st["stable"].get("servedSince"), st["stable"]
        victim = cluster.list(POD, "docparser.io/revision")[0]["metadata"]["name"]

        def play(status: dict[str, Any]) -> None:
            cluster.client.patch_status(POD, cluster.namespace, victim, status)

        def degraded_reason() -> str:
            return str(condition(cluster, "inv", "Degraded").get("reason"))

        for restarts in range(1, RESTARTS_TOLERATED + 1):
            play(restarted(restarts, ready=False))
            taken = stays_current(
                cluster,
                "inv",
                gitops_check,
                f"restart {restarts} seen",
                lambda: degraded_reason() == "Restarting",
            )
            play(restarted(restarts, ready=True))
            taken += stays_current(
                cluster,
                "inv",
                gitops_check,
                f"restart {restarts} over",
                lambda: degraded_reason() == "AsExpected",
            )
            assert taken >= 2
        play(restarted(RESTARTS_TOLERATED + 1, ready=False))  # a crash loop now

        def stalled() -> dict[str, Any] | None:
            dp = cluster.get(DOCPARSER, "inv") or {}
            conds = {c["type"]: c for c in (dp.get("status") or {}).get("conditions") or []}
            return dp if (conds.get("Stalled") or {}).get("status") == "True" else None

        dp = wait_for("crash loop stalls", stalled, timeout=STEP_TIMEOUT)
        assert gitops_check.verdict(dp) == ("Failed", "Degraded")


@pytest.mark.parametrize("reason", [*sorted(POD_STATUSES), "RouteNotAccepted"])
def test_each_stalled_reason_is_failed_in_the_write_that_names_it(
    cluster: Cluster, operator: Any, gitops_check: GitOpsCheck, reason: str
) -> None:
    """A new DocParser whose pods the scheduler or the kubelet refuse (the statuses of
    test_diagnose.py), or whose HTTPRoute the Gateway refuses: the status write that names the
    reason already reads Failed/Degraded to both tools, so Flux reports it at once instead of
    after its timeout. (Unschedulable since
    2026-01-01, long past its grace period, during the first rollout.)"""
    weights = {**docparser("x")["spec"]["weights"], "credentialsSecretRef": {"name": "s3-creds"}}
    create(cluster, docparser("inv", weights=weights, traffic=GATEWAY))
    simulate_pods(cluster, wait_for("stable", lambda: dep_name(cluster, "inv")), "loading")
    pods = wait_for("pods", lambda: cluster.list(POD, "docparser.io/revision"))
    route = wait_for("route", lambda: cluster.get(ROUTE, "inv"))
    verdicts = []

    def named() -> dict[str, Any] | None:
        dp = cluster.get(DOCPARSER, "inv") or {}
        verdicts.append(gitops_check.verdict(dp) if dp.get("status") else None)
        conds = {c["type"]: c for c in (dp.get("status") or {}).get("conditions") or []}
        return dp if (conds.get("Degraded") or {}).get("reason") == reason else None

    if reason == "RouteNotAccepted":  # what the Gateway's controller writes
        refused = {"type": "Accepted", "status": "False", "reason": "NotAllowedByListeners"}
        refused |= {"message": "no listener admits this namespace", "lastTransitionTime": NOW}
        ref = {"name": "web", "namespace": "infra"}  # what the operator renders
        parent = {"parentRef": ref, "controllerName": "example.com/gateway"}
        parents = [parent | {"conditions": [refused | {"observedGeneration": 1}]}]
        name = route["metadata"]["name"]
        cluster.client.patch_status(ROUTE, cluster.namespace, name, {"parents": parents})
    else:  # what the scheduler or the kubelet writes
        for p in pods:
            pod_name = p["metadata"]["name"]
            cluster.client.patch_status(POD, cluster.namespace, pod_name, POD_STATUSES[reason])
    dp = wait_for(reason, named, timeout=30, interval=0.1)
    assert gitops_check.verdict(dp) == ("Failed", "Degraded"), dp["status"]["conditions"]
    assert ("Current", "Healthy") not in verdicts  # never called done on the way


@pytest.mark.realcluster
def test_a_new_docparser_is_in_progress_before_the_operator_acts(
    real_api: Any, real_namespace: str, gitops_check: GitOpsCheck
) -> None:
    """No operator runs here: the API server serves the CRD's default status
    (observedGeneration 0), so neither tool calls a DocParser nobody has acted on Current
    (kstatus would for an object without status)."""
    dp = docparser("inv")
    dp["metadata"]["namespace"] = real_namespace
    base = f"/apis/docparser.io/v1alpha1/namespaces/{real_namespace}/docparsers"
    created = real_api.create(base, dp)
    live = real_api.get(f"{base}/inv")
    assert created["status"] == live["status"] == {"observedGeneration": 0}
    assert gitops_check.verdict(live) == ("InProgress", "Progressing")

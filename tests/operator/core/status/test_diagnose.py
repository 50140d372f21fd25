"""diagnose.py: precise Degraded reasons from pods, the HTTPRoute and the HPA, and the
operator reporting them on a cluster."""

from __future__ import annotations

from typing import Any

import pytest
from docparser_operator.api.kinds import KNOWN_KINDS
from docparser_operator.api.models import DocParser
from docparser_operator.core.status.diagnose import diagnose
from dp_helpers import (
    CANARY_WEIGHTS,
    GATEWAY,
    HPA,
    ROUTE,
    condition,
    create,
    dep_name,
    docparser,
)
from kube_cluster import Cluster, simulate_pods, wait_for
from pod_statuses import NOW, POD_STATUSES

POD = {"apiVersion": "v1", "kind": "Pod"}


def spec(**fields: Any) -> Any:
    return DocParser.from_resource(docparser("inv", **fields)).spec


def pod(revision: str = "r1", **status: Any) -> dict[str, Any]:
    return {
        **POD,
        "metadata": {"name": "inv-r1-x", "labels": {"docparser.io/revision": revision}},
        "status": status,
    }


def reasons(pods=(), children=None, **fields: Any) -> dict[str, str]:
    found = diagnose(spec(**fields), {"r1"}, children or {}, list(pods))
    return {p.reason: p.message for p in found}


def test_unschedulable_carries_the_schedulers_message() -> None:
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    cond = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
    }
    assert reasons([pod(conditions=[cond])]) == {"Unschedulable": f"pod inv-r1-x: {message}"}
    assert reasons([pod("old-revision", conditions=[cond])]) == {}  # leaving: not ours to report


def test_missing_credentials_secret_is_named() -> None:
    weights = {**docparser("x")["spec"]["weights"], "credentialsSecretRef": {"name": "s3-keys"}}
    waiting = {
        "name": "fetch-weights",
        "state": {
            "waiting": {
                "reason": "CreateContainerConfigError",
                "message": 'secret "s3-keys" not found',
            }
        },
    }
    assert "CredentialsSecretMissing" in reasons(
        [pod(initContainerStatuses=[waiting])], weights=weights
    )
    other = {
        **waiting,
        "state": {
            "waiting": {**waiting["state"]["waiting"], "message": 'secret "redis" not found'}
        },
    }
    assert "SecretMissing" in reasons([pod(initContainerStatuses=[other])], weights=weights)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (
            "fetch-weights: weights_error: sha256 mismatch for docparser-manifest.json: a != b",
            "WeightsChecksumMismatch",
        ),
        ("fetch-weights: weights_error: NoCredentialsError", "WeightsFetchFailed"),
    ],
)
def test_fetch_failures_use_the_termination_message(message: str, reason: str) -> None:
    ctr = {
        "name": "fetch-weights",
        "lastState": {"terminated": {"exitCode": 1, "message": message}},
    }
    found = reasons([pod(initContainerStatuses=[ctr])])
    assert set(found) == {reason} and message in found[reason]


def test_runtime_exit_is_failed_to_load_with_its_reason() -> None:
    term = {"exitCode": 1, "message": "serve: weights_error: CUDA driver too old"}
    ctr = {"name": "runtime", "state": {"terminated": term}}
    assert "CUDA driver too old" in reasons([pod(containerStatuses=[ctr])])["FailedToLoad"]


def test_an_oom_kill_names_the_limit_and_is_no_problem_once_the_pod_serves_again() -> None:
    """Seen on the local cluster: a canary pod with 1Gi OOM-killed during its first parses,
    restarted and served; its lastState (message: the log's last lines) held Degraded
    FailedToLoad, and the Progressing 'rollout stopped', after it was Ready again."""
    killed = {"exitCode": 137, "reason": "OOMKilled", "message": "INFO: Started server process"}
    restarting = {
        "name": "runtime",
        "ready": False,
        "state": {"running": {}},
        "lastState": {"terminated": killed},
    }
    oom = pod(containerStatuses=[restarting])
    oom["spec"] = {"containers": [{"name": "runtime", "resources": {"limits": {"memory": "1Gi"}}}]}
    message = reasons([oom])["FailedToLoad"]
    assert "OOMKilled at its memory limit (1Gi)" in message and "Started server" not in message
    serving = {**restarting, "ready": True}
    assert reasons([pod(containerStatuses=[serving])]) == {}
    crashing = {**restarting, "ready": True, "state": {"terminated": killed}}
    assert "OOMKilled" in reasons([pod(containerStatuses=[crashing])])["FailedToLoad"]


def test_mounted_weights_failing_serves_own_check_is_a_checksum_mismatch() -> None:
    """pvc:// weights and the weights cache are verified by serve where they lie."""
    said = (
        "serve: weights_error: docparser-manifest.json in /models/v1 has sha256 aaa, expected bbb"
    )
    ctr = {"name": "runtime", "state": {"terminated": {"exitCode": 1, "message": said}}}
    assert set(reasons([pod(containerStatuses=[ctr])])) == {"WeightsChecksumMismatch"}


def test_route_not_accepted_and_metrics_unavailable() -> None:
    route = {
        "metadata": {"name": "inv", "namespace": "ocr", "generation": 1},
        "status": {
            "parents": [
                {
                    "parentRef": {"name": "web", "namespace": "infra"},
                    "conditions": [
                        {
                            "type": "Accepted",
                            "status": "False",
                            "reason": "NotAllowedByListeners",
                            "message": "no listener allows namespace ocr",
                            "observedGeneration": 1,
                        }
                    ],
                }
            ]
        },
    }
    hpa = {
        "status": {
            "conditions": [
                {
                    "type": "ScalingActive",
                    "status": "False",
                    "reason": "FailedGetPodsMetric",
                    "message": "no custom metrics API",
                }
            ]
        }
    }
    found = reasons(
        children={("HTTPRoute", "inv"): route, ("HorizontalPodAutoscaler", "inv"): hpa},
        traffic=GATEWAY,
    )
    assert (
        "NotAllowedByListeners" in found["RouteNotAccepted"]
        and "Gateway infra/web" in found["RouteNotAccepted"]
    )
    assert "no custom metrics API" in found["MetricsUnavailable"]


def test_operator_reports_what_the_cluster_says(cluster: Cluster, operator: Any) -> None:
    """The HPA controller, the Gateway and the scheduler write these statuses; here the test
    plays them through the status subresources, and the operator names each one."""
    dp = docparser(
        "inv",
        traffic=GATEWAY,
        replicas={"min": 1, "max": 2},
        canary={"weights": CANARY_WEIGHTS, "weight": 0},
    )
    create(cluster, dp)
    wait_for("hpa", lambda: cluster.get(HPA, "inv"))
    wait_for("route", lambda: cluster.get(ROUTE, "inv"))
    hpa_status = {
        "currentReplicas": 1,
        "desiredReplicas": 1,
        "conditions": [
            {
                "type": "ScalingActive",
                "status": "False",
                "reason": "FailedGetPodsMetric",
                "message": "unable to get metric docparser_outstanding_pages",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    }
    cluster.client.patch_status(HPA, cluster.namespace, "inv", hpa_status)
    degraded = wait_for(
        "MetricsUnavailable",
        lambda: (
            condition(cluster, "inv", "Degraded").get("reason") == "MetricsUnavailable"
            and condition(cluster, "inv", "Degraded")
        ),
        timeout=30,
    )
    assert "docparser_outstanding_pages" in degraded["message"]
    # advisory (core/status/stalls.py): the DocParser serves at its size, nothing waits on it
    assert condition(cluster, "inv", "Stalled")["status"] == "False"


def _refuse_route(cluster: Cluster) -> None:
    """The Gateway's refusal of the route's current generation, written again whenever the
    route's status no longer holds it. Why: the stand-in Gateway controller (gateway_sim.py)
    may read the route just before the refusal is written and write its acceptance just
    after, over it; written once, the refusal was then never reported (CI, 30 s). A verdict
    also counts only for the generation it names (core/status/route_verdict.py)."""
    route = cluster.get(ROUTE, "inv")
    assert route is not None
    generation = int(route["metadata"].get("generation", 1))
    written = [
        (c.get("reason"), c.get("observedGeneration"))
        for p in (route.get("status") or {}).get("parents") or []
        for c in p.get("conditions") or []
    ]
    if ("NotAllowedByListeners", generation) in written:
        return
    parent = {
        "parentRef": {"name": "web", "namespace": "infra"},  # what the operator renders
        "controllerName": "example.com/gateway",
        "conditions": [
            {
                "type": "Accepted",
                "status": "False",
                "reason": "NotAllowedByListeners",
                "message": "no listener allows routes from this namespace",
                "lastTransitionTime": NOW,
                "observedGeneration": generation,
            }
        ],
    }
    cluster.client.patch_status(ROUTE, cluster.namespace, "inv", {"parents": [parent]})


@pytest.mark.parametrize("reason", [*POD_STATUSES, "RouteNotAccepted"])
def test_each_misconfiguration_is_named_on_a_cluster(
    cluster: Cluster, operator: Any, reason: str
) -> None:
    """What the scheduler, the kubelet and the Gateway write (played here through the status
    subresources of real objects) becomes the Degraded reason with their words."""
    weights = {**docparser("x")["spec"]["weights"], "credentialsSecretRef": {"name": "s3-creds"}}
    create(cluster, docparser("inv", traffic=GATEWAY, weights=weights))
    deployment = wait_for("stable", lambda: dep_name(cluster, "inv"))
    simulate_pods(cluster, deployment, "loading")
    if reason == "RouteNotAccepted":
        wait_for("route", lambda: cluster.get(ROUTE, "inv"))
        said = "no listener allows routes"
    else:
        pods = wait_for("pods", lambda: cluster.list(KNOWN_KINDS["Pod"], "docparser.io/revision"))
        for p in pods:
            cluster.client.patch_status(
                KNOWN_KINDS["Pod"], cluster.namespace, p["metadata"]["name"], POD_STATUSES[reason]
            )
        said = {
            "Unschedulable": "Insufficient nvidia.com/gpu",
            "CredentialsSecretMissing": 's3-creds" not found',
            "WeightsChecksumMismatch": "sha256 mismatch",
            "FailedToLoad": "engine failed to load",
        }[reason]

    def named() -> dict[str, Any] | bool:
        if reason == "RouteNotAccepted":
            _refuse_route(cluster)
        return (c := condition(cluster, "inv", "Degraded")).get("reason") == reason and c

    degraded = wait_for(reason, named, timeout=30)
    assert degraded["status"] == "True" and said in degraded["message"]


def test_a_pod_that_cannot_be_scheduled_shows_at_once(cluster: Cluster, monkeypatch: Any) -> None:
    """With the resync 10 minutes away, the pod's own change reaches the status: the
    operator watches runtime pods, not only their Deployments."""
    from operator_runner import running_operator

    monkeypatch.setenv("DOCPARSER_OPERATOR_RESYNC_INTERVAL_S", "600")
    monkeypatch.setenv("DOCPARSER_OPERATOR_RESYNC_INITIAL_DELAY_S", "600")
    with running_operator(cluster):
        create(cluster, docparser("inv"))
        deployment = wait_for("stable", lambda: dep_name(cluster, "inv"))
        simulate_pods(cluster, deployment, "loading")
        wait_for("Loading", lambda: condition(cluster, "inv", "Ready").get("reason") == "Loading")
        pods = wait_for("pods", lambda: cluster.list(KNOWN_KINDS["Pod"], "docparser.io/revision"))
        for p in pods:
            cluster.client.patch_status(
                KNOWN_KINDS["Pod"], cluster.namespace, p["metadata"]["name"],
                POD_STATUSES["Unschedulable"],
            )  # fmt: skip
        wait_for(
            "Unschedulable",
            lambda: condition(cluster, "inv", "Degraded").get("reason") == "Unschedulable",
            timeout=20,
        )


def test_a_pod_whose_node_stopped_reporting_is_node_lost() -> None:
    """The node controller marks the pods of a silent node not Ready; their containers' last
    word (from the kubelet that is gone) is still ready: that pair names the node."""
    lost = pod(
        conditions=[
            {"type": "Ready", "status": "False"},
            {"type": "ContainersReady", "status": "True"},
        ],
        containerStatuses=[{"name": "runtime", "ready": True, "state": {"running": {}}}],
    )
    lost["spec"] = {"nodeName": "gpu-node-7"}
    found = reasons([lost])
    said = "node gpu-node-7 stopped reporting: pod inv-r1-x is no longer Ready behind traffic"
    assert found == {"NodeLost": said}
    probe_failing = pod(
        conditions=[{"type": "Ready", "status": "False"}],
        containerStatuses=[{"name": "runtime", "ready": False, "state": {"running": {}}}],
    )
    assert reasons([probe_failing]) == {}  # its own kubelet says why: not a lost node

"""Scheduled capacity (issue 36) through reconcile passes, the clock given to each pass: a
window raises the HPA and the size at its start and lowers them at its end, status says the
window and the next change, the pass asks to be woken at the boundary, and between
boundaries a pass writes nothing. The DocParser itself is never written."""

from __future__ import annotations

import datetime
from typing import Any

from docparser_operator.api import naming
from docparser_operator.api.kinds import DOCPARSER, KNOWN_KINDS
from docparser_operator.cli.main import render_resource
from docparser_operator.controller.credential import CredentialMemory
from docparser_operator.controller.features import raised, resource_schedule
from docparser_operator.controller.reconcile import reconcile
from dp_helpers import create, docparser
from kube_cluster import Cluster, client_for

DEPLOY, HPA = KNOWN_KINDS["Deployment"], KNOWN_KINDS["HorizontalPodAutoscaler"]
WINDOW = {"cron": "0 8 * * *", "duration": "1h", "min": 3, "max": 5}
RUN = CredentialMemory()


def at(text: str) -> datetime.datetime:
    """The clock a pass is given, from RFC 3339 text (test_schedule.py reads its instants alike)."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _bounds(cluster: Cluster) -> tuple[int, int]:
    hpa = cluster.get(HPA, "inv")
    return hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]


def _size(cluster: Cluster) -> int:
    deployments = [
        d
        for d in cluster.list(DEPLOY)
        if d["metadata"]["name"].startswith("inv-") and d["metadata"]["name"] != naming.front("inv")
    ]
    assert len(deployments) == 1, [d["metadata"]["name"] for d in deployments]
    return int(deployments[0]["spec"]["replicas"])


def test_a_window_scales_up_at_its_start_and_down_at_its_end(cluster: Cluster) -> None:
    api = client_for(cluster.kubeconfig, user_agent="docparser-operator/test")
    create(cluster, docparser("inv", replicas={"min": 1, "max": 2, "schedule": [WINDOW]}))

    def step(now: str) -> Any:
        return reconcile(api, cluster.get(DOCPARSER, "inv"), now=now, credentials=RUN)

    before = step("2026-03-02T07:59:00Z")
    assert _bounds(cluster) == (1, 2) and _size(cluster) == 1
    live = cluster.get(DOCPARSER, "inv")
    assert live["status"]["schedule"] == {
        "next": {"at": "2026-03-02T08:00:00Z", "min": 3, "max": 5}
    }
    assert before.wake_in_s == 61.0  # a pass at the boundary (and a second for whole seconds)

    step("2026-03-02T07:59:20Z")  # settle what the first pass's writes changed
    mark = cluster.mark()
    rest = step("2026-03-02T07:59:40Z")  # between boundaries: nothing to write
    assert rest.applied == [] and not rest.status_written and cluster.writes_since(mark) == []

    opened = step("2026-03-02T08:00:01Z")
    assert _bounds(cluster) == (3, 5) and _size(cluster) == 3
    live = cluster.get(DOCPARSER, "inv")
    assert live["status"]["schedule"] == {
        "active": {"cron": "0 8 * * *", "until": "2026-03-02T09:00:00Z", "min": 3, "max": 5},
        "next": {"at": "2026-03-02T09:00:00Z", "min": 1, "max": 2},
    }
    assert live["spec"]["replicas"]["min"] == 1 and live["spec"]["replicas"]["max"] == 2
    assert opened.wake_in_s is not None and 3598 <= opened.wake_in_s <= 3600

    step("2026-03-02T08:30:00Z")
    mark = cluster.mark()
    step("2026-03-02T08:45:00Z")
    assert cluster.writes_since(mark) == []  # the window open, at rest: nothing

    step("2026-03-02T09:00:01Z")
    assert _bounds(cluster) == (1, 2) and _size(cluster) == 1
    assert cluster.get(DOCPARSER, "inv")["status"]["schedule"] == {
        "next": {"at": "2026-03-03T08:00:00Z", "min": 3, "max": 5}
    }


def test_the_schedule_removed_takes_its_section(cluster: Cluster) -> None:
    api = client_for(cluster.kubeconfig, user_agent="docparser-operator/test")
    create(cluster, docparser("inv", replicas={"min": 1, "max": 2, "schedule": [WINDOW]}))
    reconcile(api, cluster.get(DOCPARSER, "inv"), now="2026-03-02T08:10:00Z", credentials=RUN)
    assert "schedule" in cluster.get(DOCPARSER, "inv")["status"]
    create(cluster, docparser("inv", replicas={"min": 1, "max": 2}))  # the same GitOps manager
    out = reconcile(api, cluster.get(DOCPARSER, "inv"), now="2026-03-02T08:11:00Z", credentials=RUN)
    assert out.status_written and out.wake_in_s is None
    assert "schedule" not in cluster.get(DOCPARSER, "inv")["status"]
    assert _bounds(cluster) == (1, 2)


def test_a_window_wakes_a_docparser_that_scales_to_zero() -> None:
    """With ``min: 0`` the open window's floor makes it one that does not sleep: the HPA and
    the size come back, and no front is rendered (its traffic goes to the runtime pods)."""
    dp = docparser(
        "inv",
        replicas={"min": 0, "max": 2, "schedule": [WINDOW | {"min": 2}]},
        runtime={
            "image": "ghcr.io/example/docparser-runtime:0.1.0",
            "redisUrlSecretRef": {"name": "redis", "key": "url"},
        },
    )
    dp["metadata"].update(namespace="ocr", uid="0b7d3c5e-0000-4000-8000-000000000036")
    night = render_resource(raised(dp, resource_schedule(dp, at("2026-03-02T03:00:00Z"))))
    names = {(o["kind"], o["metadata"]["name"]) for o in night}
    assert ("Deployment", naming.front("inv")) in names
    day = render_resource(raised(dp, resource_schedule(dp, at("2026-03-02T08:00:00Z"))))
    names = {(o["kind"], o["metadata"]["name"]) for o in day}
    assert ("Deployment", naming.front("inv")) not in names
    (hpa,) = [o for o in day if o["kind"] == "HorizontalPodAutoscaler"]
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 5)

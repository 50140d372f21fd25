"""A DocParser deleted and made again under its name (``kubectl delete`` then ``apply``, a
GitOps tool replacing it) while the garbage collector has not yet removed the first one's
children: the new one says so while they stand, and gets its own as soon as they go, not at
the resync (controller/child_events.py ``reconcile_owner``, kube/predecessors.py)."""

from __future__ import annotations

from typing import Any

import pytest
from docparser_operator.api.kinds import KNOWN_KINDS
from dp_helpers import SERVICE, condition, create, docparser
from kube_cluster import Cluster, wait_for
from operator_runner import running_operator

DOCPARSER = KNOWN_KINDS["DocParser"]
HOLD = "docparser.io/test-hold"  # the collector's delete waits on it: "not reached yet"


def test_a_docparser_made_again_gets_its_service_once_the_old_one_goes(
    cluster: Cluster, monkeypatch: Any
) -> None:
    if not cluster.has_garbage_collector:
        pytest.skip("needs the garbage collector to delete the first DocParser's Service")
    monkeypatch.setenv("DOCPARSER_OPERATOR_RESYNC_INTERVAL_S", "600")
    monkeypatch.setenv("DOCPARSER_OPERATOR_RESYNC_INITIAL_DELAY_S", "600")
    ns = cluster.namespace
    with running_operator(cluster):
        first = create(cluster, docparser("inv"))["metadata"]["uid"]
        wait_for("the first Service", lambda: cluster.get(SERVICE, "inv"), timeout=60)
        cluster.client.patch(SERVICE, ns, "inv", {"metadata": {"finalizers": [HOLD]}})
        cluster.client.delete(DOCPARSER, ns, "inv", uid=first)

        def old_service() -> dict[str, Any] | None:
            return cluster.get(SERVICE, "inv")

        wait_for(
            "the first Service terminating",
            lambda: (old_service() or {}).get("metadata", {}).get("deletionTimestamp"),
            timeout=60,
        )
        second = create(cluster, docparser("inv"))["metadata"]["uid"]

        def degraded_reason() -> str | None:
            live = cluster.get(DOCPARSER, "inv") or {"metadata": {}}
            if live["metadata"].get("uid") != second:
                return None
            return condition(cluster, "inv", "Degraded").get("reason")

        # True while it stands: the Service of that name is the first one's.
        wait_for("the conflict reported", lambda: degraded_reason() == "ChildConflict", timeout=60)
        cluster.client.patch(SERVICE, ns, "inv", {"metadata": {"finalizers": None}})

        def own_service() -> dict[str, Any] | None:
            svc = old_service()
            refs = (svc or {}).get("metadata", {}).get("ownerReferences") or []
            return svc if any(r.get("uid") == second for r in refs) else None

        wait_for("the second DocParser's own Service", own_service, timeout=30)
        wait_for(
            "the conflict cleared",
            lambda: degraded_reason() not in (None, "ChildConflict"),
            timeout=30,
        )

"""Issue 37, "A refused child backs off", with the real operator on a real kube-apiserver.

A ResourceQuota of the namespace allows no more Services once the first DocParser is Ready:
the next two DocParsers' Services are refused by the API server's quota admission (403,
``exceeded quota``). Before the fix the operator re-read and re-applied every refused Service at
every pass (here: every 1 s resync), 2,336 requests a minute for 47 such DocParsers in the
issue. Now each refused DocParser says Degraded ``ChildRefused`` once, naming the Service and
the API server's code (not the quota's name, which the tenant chose), and over a rest window
the operator sends a few applies per refused Service (its backoff, capped short here) and no
status write; the admitted DocParser stays Ready without a write. Once the quota is gone the
refused ones converge at their next try.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from docparser_operator.api.kinds import DOCPARSER, ResourceRef
from dp_helpers import condition, converged, create, docparser, quiet
from gitopscheck.checker import GitOpsCheck
from kube_cluster import Cluster, Recorded, wait_for
from kubelet_sim import Kubelet
from operator_runner import running_operator

pytestmark = [pytest.mark.slow, pytest.mark.realcluster]
QUOTAS = ResourceRef("v1", "ResourceQuota", "resourcequotas")
QUOTA = "tenant-chosen-words"
ADMITTED, REFUSED = "admitted", ("refused-a", "refused-b")
BACKOFF_S, BACKOFF_MAX_S = 2.0, 6.0
WINDOW_S = 20.0  # 20 resyncs of the suite's operator: before the fix, 20 applies per Service


def _of(name: str, records: list[Recorded]) -> list[Recorded]:
    return [r for r in records if f"/{name}" in r.path]


def _refused(cluster: Cluster, name: str) -> dict[str, Any] | None:
    degraded = condition(cluster, name, "Degraded")
    return degraded if degraded.get("reason") == "ChildRefused" else None


def test_a_child_the_quota_refuses_backs_off_and_writes_its_status_once(
    real_cluster: Cluster,
    monkeypatch: pytest.MonkeyPatch,
    gitops_check_optional: GitOpsCheck | None,
) -> None:
    cluster = real_cluster
    monkeypatch.setenv("DOCPARSER_OPERATOR_REFUSAL_BACKOFF_S", str(BACKOFF_S))
    monkeypatch.setenv("DOCPARSER_OPERATOR_REFUSAL_BACKOFF_MAX_S", str(BACKOFF_MAX_S))
    with running_operator(cluster), Kubelet(cluster, ready_after=0.3):
        create(cluster, docparser(ADMITTED))
        wait_for("the first DocParser converged", lambda: converged(cluster, ADMITTED), timeout=90)
        wait_for(
            "the first DocParser Ready",
            lambda: condition(cluster, ADMITTED, "Ready").get("status") == "True",
            timeout=60,
        )
        # No quota controller runs here: the quota's status is written as it would (the
        # admission plugin then counts each Service it admits itself).
        services = len(cluster.list(ResourceRef("v1", "Service", "services")))
        quota = cluster.client.request(
            "POST",
            QUOTAS.path(cluster.namespace),
            body={
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": QUOTA},
                "spec": {"hard": {"services": str(services)}},
            },
        )
        full = {"services": str(services)}
        cluster.client.patch_status(QUOTAS, cluster.namespace, QUOTA, {"hard": full, "used": full})
        for name in REFUSED:
            create(cluster, docparser(name))
        for name in REFUSED:
            degraded = wait_for(
                f"{name} Degraded ChildRefused", lambda n=name: _refused(cluster, n)
            )
            assert "Service" in degraded["message"] and "403 QuotaExceeded" in degraded["message"]
            assert QUOTA not in degraded["message"] and "used:" not in degraded["message"]
        quiet(cluster, timeout=60)  # (each refused Service keeps its backoff: quiet between)
        mark = cluster.mark()
        time.sleep(WINDOW_S)
        window = cluster.requests_since(mark)
        for name in REFUSED:
            mine = _of(name, window)
            applies = [r for r in mine if r.method == "PATCH" and "/services/" in r.path]
            reads = [r for r in mine if r.method == "GET" and "/services/" in r.path]
            # 2, 4, then 6 s apart: at most 5 tries per refused Service in 20 s (not 20)
            refused_services = {r.path for r in applies} or {"none"}
            assert len(applies) <= 5 * len(refused_services), applies
            assert len(reads) <= 5 * len(refused_services), reads
            assert [r for r in mine if r.path.endswith("/status")] == [], mine
            assert _refused(cluster, name)  # still so, written once
        assert [r for r in _of(ADMITTED, window) if r.is_write] == []
        assert condition(cluster, ADMITTED, "Ready").get("status") == "True"
        if gitops_check_optional is not None:
            verdict = gitops_check_optional.verdict(cluster.get(DOCPARSER, REFUSED[0]) or {})
            assert verdict == ("Failed", "Degraded"), verdict
        counts = {n: len(_of(n, window)) for n in (*REFUSED, ADMITTED)}
        cluster.client.delete(QUOTAS, cluster.namespace, QUOTA, uid=quota["metadata"]["uid"])
        for name in REFUSED:  # the next try (within the cap) is admitted
            wait_for(f"{name} converged", lambda n=name: converged(cluster, n), timeout=60)
            wait_for(
                f"{name} no longer Degraded",
                lambda n=name: condition(cluster, n, "Degraded").get("status") == "False",
                timeout=30,
            )
    # after the operator stopped: its runner holds sys.stdout and sys.stderr while it runs
    print(f"\noperator requests in {WINDOW_S:.0f} s by DocParser, quota refusing 2: {counts}")

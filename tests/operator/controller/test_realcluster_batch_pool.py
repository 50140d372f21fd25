"""Issue 35's batch pool with the real operator on a real kube-apiserver (its controllers make
the pool's pods) and a real Redis.

The stable pod's address serves the runtime's own ``docparser_batch_*`` gauges
(server/endpoints/batches/metrics.py), read at every request from the Redis the batches live
in (batches/backlog.py), as a stable pod does; the batches are written there with the
runtime's batch store. So the backlog is read while the pool has no pod. The pool goes
0 -> 3 on a backlog of 25 pages (10 per pod), stays up through the cooldown once the batch is
done, then back to 0; the DocParser stays Ready (Flux Current, Argo CD Healthy) throughout; at
rest the operator writes nothing, with the pool and after ``spec.batch`` is removed (the pool's
Deployment and ``status.batch`` gone).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from typing import Any

import pytest
import redis.asyncio as aioredis
from docparser_operator.api import naming
from docparser_operator.api.kinds import DOCPARSER, KNOWN_KINDS
from docparser_runtime.batches.backlog import key_prefix, read_backlog
from docparser_runtime.batches.models import Batch, BatchStatus, FileRecord
from docparser_runtime.batches.redis_store import RedisBatchStore
from docparser_runtime.server.endpoints.batches.metrics import BatchMetrics
from dp_helpers import condition, create, docparser, event_reasons, revision, set_spec, spec_of
from gitopscheck.checker import GitOpsCheck
from kube_cluster import Cluster, wait_for
from kubelet_sim import Kubelet
from operator_runner import running_operator
from pod_endpoint import loopback_subnet, serve_metrics, stop
from prometheus_client import CollectorRegistry, generate_latest
from redis_server import RedisServer

pytestmark = [pytest.mark.slow, pytest.mark.realcluster]
DEPLOY = KNOWN_KINDS["Deployment"]
NAME = "bulk"
PREFIX = naming.redis_prefix("ns", NAME)  # the pods' DOCPARSER_REDIS_PREFIX stand-in
COOLDOWN_S = 4.0


def _serve(host: str, redis_url: str) -> ThreadingHTTPServer:
    """A stable pod's /metrics: the runtime's batch gauges, read from Redis per request."""

    def exposition() -> bytes:
        async def read() -> Any:
            client = aioredis.Redis.from_url(redis_url)
            try:
                return await read_backlog(client, key_prefix(PREFIX))
            finally:
                await client.aclose()

        registry = CollectorRegistry()
        BatchMetrics(registry).set(asyncio.run(read()))
        return generate_latest(registry)

    return serve_metrics(host, exposition)


@pytest.fixture
def redis_url() -> Iterator[str]:
    with RedisServer() as server:
        yield server.url


def submit(redis_url: str, lines: int) -> Batch:
    """A batch of ``lines`` lines, as POST /v1/batches leaves it (validating)."""

    async def go() -> Batch:
        store = RedisBatchStore.from_url(redis_url, prefix=PREFIX)
        now = int(time.time())
        record = FileRecord("file-in", 1, now, now + 3600, "in.jsonl", "batch", "k", lines)
        await store.put_file(record)
        batch = Batch(
            "batch_a",
            "/v1/document/parse",
            record.id,
            "k",
            BatchStatus.VALIDATING,
            now,
            now + 86400,
        )
        await store.create_batch(batch, limit=0)
        await store.close()
        return batch

    return asyncio.run(go())


def finish(redis_url: str, batch: Batch) -> None:
    async def go() -> None:
        store = RedisBatchStore.from_url(redis_url, prefix=PREFIX)
        moved = await store.transition(
            batch,
            BatchStatus.COMPLETED,
            from_=(BatchStatus.VALIDATING,),
            gc_at=int(time.time()) + 60,
        )
        await store.close()
        assert moved

    asyncio.run(go())


def pool_size(cluster: Cluster) -> int | None:
    dep = cluster.get(DEPLOY, naming.batch_pool(NAME))
    return None if dep is None else int(dep["spec"].get("replicas") or 0)


def batch_status(cluster: Cluster) -> dict[str, Any] | None:
    return ((cluster.get(DOCPARSER, NAME) or {}).get("status") or {}).get("batch")


def operator_writes(cluster: Cluster, mark: int) -> list[str]:
    """The operator's writes since ``mark`` to this DocParser and its children (Events aside)."""
    return [
        f"{r.method} {r.path}"
        for r in cluster.writes_since(mark)
        if f"/namespaces/{cluster.namespace}/" in r.path and "/events" not in r.path
    ]


def test_the_pool_scales_from_zero_on_a_backlog_and_back_and_goes_with_its_spec(
    real_cluster: Cluster,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    gitops_check_optional: GitOpsCheck | None,
) -> None:
    cluster = real_cluster
    monkeypatch.setenv("DOCPARSER_OPERATOR_IDLE_POLL_INTERVAL_S", "1")
    monkeypatch.setenv("DOCPARSER_OPERATOR_BATCH_COOLDOWN_S", str(COOLDOWN_S))
    # no resync in the test's span: the pool follows the backlog through the passes its
    # readings ask for (a wake-up at the next reading), not through a periodic pass
    monkeypatch.setenv("DOCPARSER_OPERATOR_RESYNC_INTERVAL_S", "600")
    host = f"{loopback_subnet()}.7"
    server = _serve(host, redis_url)
    spec = docparser(
        NAME,
        runtime={
            "image": "ghcr.io/example/docparser-runtime:0.1.0",
            "redisUrlSecretRef": {"name": "redis"},
        },
        batch={"replicas": {"min": 0, "max": 3}, "pagesPerReplica": 10, "backfill": False},
    )["spec"]
    ips: dict[str, str] = {}
    try:
        with running_operator(cluster), Kubelet(cluster, ready_after=0.3, pod_ip=ips):
            create(cluster, docparser(NAME, **spec))
            ips[wait_for("stable revision", lambda: revision(cluster, NAME))] = host
            wait_for(
                "Ready",
                lambda: condition(cluster, NAME, "Ready").get("status") == "True",
                timeout=90,
            )
            wait_for(
                "status.batch at rest",
                lambda: (batch_status(cluster) or {}).get("replicas") == 0,
                timeout=30,
            )
            assert pool_size(cluster) == 0
            # at rest: a reading every second, no write
            time.sleep(2.0)
            mark = cluster.mark()
            time.sleep(4.0)
            assert operator_writes(cluster, mark) == []

            batch = submit(redis_url, 25)  # 25 pages at 10 per pod: 3 pods, from 0
            queued = time.monotonic()
            wait_for("the pool at 3", lambda: pool_size(cluster) == 3, timeout=30)
            up_s = time.monotonic() - queued
            wait_for(
                "3 pool pods Ready",
                lambda: (batch_status(cluster) or {}).get("readyReplicas") == 3,
                timeout=60,
            )
            status = batch_status(cluster) or {}
            assert (status["batchesInProgress"], status["pagesQueued"]) == (1, 25), status
            assert status.get("lastScaleTime")
            wait_for(
                "the scale Event",
                lambda: "BatchPoolScaled" in event_reasons(cluster, NAME),
                timeout=20,
            )
            # a batch running: still Ready, nothing Progressing, Current and Healthy
            assert condition(cluster, NAME, "Ready")["status"] == "True"
            assert condition(cluster, NAME, "Reconciling")["status"] == "False"
            if gitops_check_optional is not None:
                dp = cluster.get(DOCPARSER, NAME)
                assert gitops_check_optional.verdict(dp) == ("Current", "Healthy")
            # the pool's pods are behind no Service: the endpoint selects the stable pods only
            pool_pods = cluster.list(KNOWN_KINDS["Pod"], "app.kubernetes.io/name=docparser-batch")
            assert len(pool_pods) == 3
            service = cluster.get(KNOWN_KINDS["Service"], NAME) or {}
            selector = service["spec"]["selector"]
            assert all(
                any(p["metadata"]["labels"].get(k) != v for k, v in selector.items())
                for p in pool_pods
            )

            finish(redis_url, batch)  # the backlog is empty: down after the cooldown only
            emptied = time.monotonic()
            wait_for("the pool at 0", lambda: pool_size(cluster) == 0, timeout=30)
            down_s = time.monotonic() - emptied
            assert down_s >= COOLDOWN_S - 1.5
            wait_for(
                "status.batch at 0",
                lambda: (batch_status(cluster) or {}).get("replicas") == 0,
                timeout=20,
            )
            time.sleep(2.0)
            mark = cluster.mark()
            time.sleep(4.0)
            assert operator_writes(cluster, mark) == []

            # spec.batch removed: the pool's Deployment and status.batch go, then no writes
            without = spec_of(cluster, NAME)
            del without["batch"]
            set_spec(cluster, NAME, without)
            wait_for("the pool gone", lambda: pool_size(cluster) is None, timeout=30)
            wait_for("status.batch gone", lambda: batch_status(cluster) is None, timeout=30)
            cluster.settle()
            time.sleep(2.0)
            mark = cluster.mark()
            time.sleep(4.0)
            assert operator_writes(cluster, mark) == []
            assert condition(cluster, NAME, "Ready")["status"] == "True"
        # after the operator's runner, which holds stdout while it runs
        print(
            f"batch pool: 0 -> 3 pods {up_s:.1f} s after 25 pages were queued (reading "
            f"every 1 s); 3 -> 0 {down_s:.1f} s after the backlog emptied (cooldown "
            f"{COOLDOWN_S:.0f} s); no write over 4 s at rest, three times"
        )
    finally:
        stop(server)

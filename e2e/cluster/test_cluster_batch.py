"""A batch on spot nodes (issue 35) on the 3-node cluster: 200 documents from S3 through
`docparser-runtime batch submit s3://... --output s3://...`, run by a `spec.batch` pool that
starts at 0 on two nodes labelled and tainted spot (`backfill: false`: only the pool runs batch
lines, as on a cluster that keeps its serving pods for interactive work), while a paced
interactive client parses
through the DocParser's Service. Mid-batch the spot node running the pool's pod is stopped
(a powered-off machine) and Redis is SIGKILLed and started again from its append-only file.

Asserted: the batch completes with every document exactly once (one Markdown and one JSON
object, each its own page's text, a manifest row `completed` per document, request_counts
completed == total), the interactive client sees no failed request, the pool's pod is
replaced on the other spot node, the stable pods never run on a spot node, and the pool goes
back to 0 replicas (the local cluster's operator has a 10 s cooldown, chart value
`batchCooldownSeconds`). The storage is SeaweedFS's S3 gateway and Redis a redis-server, both
on the host's node bridge address (cluster_batch.py), so it runs on the local cluster only.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_batch import (
    CLOUD_PYTHON,
    SPOT,
    SPOT_TOLERATION,
    AofRedis,
    Interactive,
    code,
    completed,
    latest_batch,
    lines_running,
    pool_pods,
    ready_on,
    small_page,
    spot_nodes,
    submit_process,
    written,
)
from cluster_drain import HOST_NODE
from cluster_nodes import node_ctl, require_nodes
from cluster_support import Target, docparser, record, serving_url, wait_for, wait_ready

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.timeout(480)]

NAME = "archive"
DOCS = 200
STORE, SRC, DST = "dp-store", "dp-src", "dp-dst"
EVICT_AFTER_S = 2  # the pool's pods leave an unreachable node this long after its taint
REDIS_DOWN_S = 3.0


class Bridge:
    """The S3 gateway and Redis on the node bridge, and the spot nodes stopped so far (each
    started again before the scenario ends, in teardown at the latest)."""

    def __init__(self, s3, redis: AofRedis, spot: list[str]) -> None:
        self.s3, self.redis, self.spot = s3, redis, spot
        self.stopped: list[str] = []

    def stop_node(self, node: str) -> None:
        self.stopped.append(node)
        node_ctl("node-stop", node)

    def start_nodes(self) -> None:
        while self.stopped:
            node_ctl("node-start", self.stopped[-1])
            self.stopped.pop()


@pytest.fixture
def bridge(cluster: Target) -> Iterator[Bridge]:
    if not cluster.local:
        pytest.skip("runs S3 and Redis on the local cluster's node bridge and stops its nodes")
    if shutil.which("redis-server") is None or not CLOUD_PYTHON.exists():
        pytest.skip(f"needs redis-server and {CLOUD_PYTHON} (make system-deps, make seaweedfs)")
    nodes = [n["metadata"]["name"] for n in require_nodes(cluster, 3)]
    from controlplane.localcluster.topology import host_bridge_address
    from seaweedfs.seaweed import SeaweedS3, SeaweedUnavailable

    host = host_bridge_address()
    try:
        s3 = SeaweedS3((STORE, SRC, DST), host=host).start()
    except SeaweedUnavailable as exc:
        pytest.skip(f"real S3 server unavailable: {exc}")
    redis = AofRedis(host)
    try:
        redis.start()
        with spot_nodes(cluster, [n for n in nodes if n != HOST_NODE]) as spot:
            held = Bridge(s3, redis, spot)
            try:
                yield held
            finally:
                held.start_nodes()
    finally:
        redis.stop()
        s3.stop()


def _manifest(cluster: Target, namespace: str, bridge: Bridge) -> list[dict]:
    env = {
        **bridge.s3.env,
        "DOCPARSER_BATCH_STORAGE_URI": f"s3://{STORE}/batches",
        "DOCPARSER_BATCH_URI_PREFIXES": json.dumps([f"s3://{SRC}/scans/"]),
    }
    dp = docparser(NAME, namespace, cluster.runtime_image, replicas=1, max_batch_size=4)
    dp["spec"]["runtime"]["redisUrlSecretRef"] = {"name": "redis"}
    dp["spec"]["pod"] = {"env": [{"name": k, "value": v} for k, v in sorted(env.items())]}
    dp["spec"]["batch"] = {
        "replicas": {"min": 0, "max": 1},
        "backfill": False,  # only the pool runs lines: while its node is down, none runs
        "nodeSelector": {SPOT: "true"},
        "tolerations": [
            SPOT_TOLERATION,
            *(
                {
                    "key": f"node.kubernetes.io/{taint}",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": EVICT_AFTER_S,
                }
                for taint in ("unreachable", "not-ready")
            ),
        ],
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "redis", "namespace": namespace},
        "data": {"url": base64.b64encode(bridge.redis.url.encode()).decode()},
    }
    return [secret, dp]


def _pool_on(cluster: Target, namespace: str, spot: list[str], not_on: str = ""):
    """A Ready pool pod on a spot node other than ``not_on``: its node, else None."""
    for pod in pool_pods(cluster, namespace, NAME):
        node = ready_on(pod)
        if node and node != not_on:
            assert node in spot, f"a pool pod on {node}, not a spot node"
            return node
    return None


def _pool_replicas(cluster: Target, namespace: str) -> int | None:
    pool = cluster.find("deployment", f"{NAME}-batch", namespace)
    return None if pool is None else int(pool["spec"].get("replicas") or 0)


def test_a_batch_on_spot_nodes_survives_a_node_loss_and_a_redis_restart(
    cluster: Target, namespace: str, bridge: Bridge, tmp_path: Path
):
    began = time.monotonic()
    marks: dict[str, float] = {}

    def mark(what: str) -> None:
        marks[what] = round(time.monotonic() - began, 1)

    cluster.apply(*_manifest(cluster, namespace, bridge))
    docs = sorted(f"{2025 + i % 2}/doc-{code(i)}.png" for i in range(DOCS))
    for doc in docs:  # while the pod starts
        number = doc.rsplit("-", 1)[1].removesuffix(".png")
        bridge.s3.client.put(SRC, f"scans/{doc}", small_page(f"Document {number}"))
    wait_ready(cluster, namespace, NAME, timeout=240)
    url = serving_url(cluster, namespace, NAME, timeout=120)  # the settled start
    mark("ready")
    stable = cluster.items("pods", namespace, f"app.kubernetes.io/instance={NAME}")
    stable_nodes = {
        p["spec"].get("nodeName")
        for p in stable
        if p["metadata"]["labels"].get("app.kubernetes.io/name") == "docparser"
    }
    assert stable_nodes and not stable_nodes & set(bridge.spot), stable_nodes
    assert _pool_replicas(cluster, namespace) == 0

    log = tmp_path / "submit.log"
    at: dict[str, int] = {}
    with Interactive(url) as interactive:
        proc = submit_process(f"s3://{SRC}/scans/", f"s3://{DST}/out/", url, bridge.s3.env, log)
        mark("submitted")
        try:
            # The backlog wakes the pool (0 -> 1); its pod lands on a spot node and runs lines.
            first = wait_for(
                cluster,
                namespace,
                "a Ready pool pod on a spot node",
                lambda: _pool_on(cluster, namespace, bridge.spot),
                180,
            )
            mark("pool Ready")
            # Only the pool runs lines: those it holds are lost with its node, and run again by
            # its replacement once their lease (15 s) has expired.
            wait_for(
                cluster,
                namespace,
                "lines held by the pool pod",
                lambda: completed(latest_batch(url)) >= 10 and lines_running(url) >= 1,
                120,
                0.5,
            )
            at["held"] = lines_running(url)
            at["node stopped"] = completed(latest_batch(url))
            assert at["node stopped"] < DOCS, "the batch ended before the node loss"
            bridge.stop_node(first)
            mark("node stopped")

            at["redis killed"] = completed(latest_batch(url))
            assert at["redis killed"] < DOCS, "the batch ended before the Redis restart"
            bridge.redis.crash()
            time.sleep(REDIS_DOWN_S)
            bridge.redis.start()
            mark("redis back")

            second = wait_for(
                cluster,
                namespace,
                f"the pool pod replaced on a spot node other than {first}",
                lambda: _pool_on(cluster, namespace, bridge.spot, not_on=first),
                180,
            )
            mark("pool replaced")
            at["pool replaced"] = completed(latest_batch(url))
            assert at["pool replaced"] < DOCS, "no line left for the replacement"
            bridge.start_nodes()  # back while the batch finishes
            mark("node back")
            try:
                rc = proc.wait(timeout=max(10.0, 400 - (time.monotonic() - began)))
            except subprocess.TimeoutExpired:
                tail = log.read_text(errors="replace")[-3000:]
                pytest.fail(f"batch submit still waiting:\n{tail}\n{cluster.explain(namespace)}")
            mark("batch written")
        finally:
            if proc.poll() is None:
                proc.kill()
    said = log.read_text(errors="replace")
    assert rc == 0, f"batch submit exited {rc}:\n{said[-3000:]}\n{cluster.explain(namespace)}"
    batch = latest_batch(url)
    assert batch is not None and batch["status"] == "completed", batch
    counts = batch["request_counts"]
    assert (counts["total"], counts["completed"], counts["failed"]) == (DOCS, DOCS, 0), counts
    problems = written(bridge.s3.client, DST, "out/", docs)
    assert not problems, problems
    assert not interactive.failed, f"{len(interactive.failed)} failed: {interactive.failed[:5]}"
    assert interactive.samples, "the interactive client sent nothing"

    wait_for(
        cluster,
        namespace,
        "the pool back at 0 replicas and no pool pod",
        lambda: _pool_replicas(cluster, namespace) == 0 and not pool_pods(cluster, namespace, NAME),
        120,
    )
    mark("pool at 0")
    record(
        "batch on spot nodes",
        f"{DOCS} documents, pool 0 -> 1 on {first}, stopped with {at['node stopped']} done and "
        f"{at['held']} lines held, "
        f"Redis SIGKILLed with {at['redis killed']} done ({REDIS_DOWN_S:.0f} s down, AOF), pool "
        f"replaced on {second} with {at['pool replaced']} done; timeline (s): {marks}; "
        f"interactive {len(interactive.samples)} requests, {len(interactive.failed)} failed, "
        f"p50 {interactive.p(0.5):.2f} s, p99 {interactive.p(0.99):.2f} s; "
        f"submit retried through the outage: {'retrying' in said}",
    )

"""The cordon watch (kube/nodes.py) on the real API server, behind the recording proxy.

What users rely on: a cordon or an uncordon reaches the operator within a couple of seconds,
and at rest the operator sends no node request at all (the watch stays open; only its renewal
every few minutes is a request). The field-selected watch is the API server's, so these run
there: the emulator ignores field selectors (test_drains.py covers it end to end).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from docparser_operator.api.kinds import KNOWN_KINDS
from docparser_operator.kube.nodes import CORDONED, CordonedNodes
from kube_cluster import Cluster, client_for, wait_for
from kubernetes.watch.watch import iter_resp_lines
from operator_runner import running_operator

pytestmark = [pytest.mark.realcluster]
NODE = KNOWN_KINDS["Node"]
SEEN_WITHIN_S = 2.0
QUIET_S = 20.0


@pytest.fixture
def node(real_cluster: Cluster) -> Iterator[str]:
    name = f"watch-{uuid.uuid4().hex[:6]}"
    real_cluster.client.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    try:
        yield name
    finally:
        obj = real_cluster.client.get(NODE, None, name)
        if obj is not None:
            real_cluster.client.delete(NODE, None, name, uid=obj["metadata"]["uid"])


def cordon(cluster: Cluster, name: str, on: bool) -> None:
    cluster.client.patch(NODE, None, name, {"spec": {"unschedulable": on}})


class Changes:
    """What the watch reported, with when (the operator's callback wakes owners from it)."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, frozenset[str]]] = []
        self.lock = threading.Lock()

    def __call__(self, changed: frozenset[str]) -> None:
        with self.lock:
            self.seen.append((time.monotonic(), changed))

    def first_after(self, since: float, name: str) -> float | None:
        with self.lock:
            return next((t - since for t, c in self.seen if t >= since and name in c), None)


def watched(cluster: Cluster) -> tuple[CordonedNodes, Changes]:
    nodes = CordonedNodes(client_for(cluster.kubeconfig, "docparser-operator/watch-test"))
    assert nodes.start() is True and nodes() is not None
    changes = Changes()
    nodes.watch(changes)
    wait_for(
        "the watch open", lambda: [r for r in _node_requests(cluster, 0) if r.query.get("watch")]
    )
    return nodes, changes


def flip_and_time(cluster: Cluster, nodes: CordonedNodes, changes: Changes, name: str) -> None:
    """Cordon then uncordon; each reaches the set and the callback within SEEN_WITHIN_S."""
    for on in (True, False):
        began = time.monotonic()
        cordon(cluster, name, on)
        lag = wait_for(
            f"cordon={on} seen", lambda b=began: changes.first_after(b, name), timeout=10
        )
        assert lag <= SEEN_WITHIN_S, f"cordon={on} seen after {lag:.2f}s"
        assert (name in (nodes() or frozenset())) is on


def test_a_cordon_and_an_uncordon_arrive_through_the_watch(
    real_cluster: Cluster, node: str
) -> None:
    """An uncordoned node leaves the field selector: the API server sends it as DELETED."""
    raw = real_cluster.client.stream(
        NODE.path(None), {"watch": "true", "fieldSelector": CORDONED, "timeoutSeconds": "10"}, 15
    )
    nodes, changes = watched(real_cluster)
    try:
        mark = real_cluster.mark()
        flip_and_time(real_cluster, nodes, changes, node)
        ours = [r for r in real_cluster.requests_since(mark) if r.path == NODE.path(None)]
        assert ours == [], "a cordon cost a request: it must come through the open watch"
        assert nodes.relists == 0
    finally:
        nodes.stop()
    types = []
    for line in iter_resp_lines(raw):
        types.append(json.loads(line)["type"])
        if len(types) == 2:
            break
    raw.close()
    assert types == ["ADDED", "DELETED"]


def test_a_broken_watch_backs_off_lists_again_and_goes_on(real_cluster: Cluster, node: str) -> None:
    """The watch's connection is cut under it (a proxy or the API server restarting): after
    a pause (1 s at first, never a hot loop) one list, and the watch resumes from it."""
    nodes, changes = watched(real_cluster)
    try:
        # the watch thread opens its stream just after the first list: wait for the socket
        wait_for("the open watch", lambda: nodes._response is not None, timeout=10)
        mark = real_cluster.mark()
        response = nodes._response
        assert response is not None
        response.shutdown()  # the socket dies as a reset would kill it
        wait_for("the relist", lambda: nodes.relists == 1, timeout=10)
        wait_for("the new watch", lambda: len(_node_requests(real_cluster, mark)) == 2)
        again = _node_requests(real_cluster, mark)
        assert [r.query.get("watch") for r in again] == [None, "true"]
        flip_and_time(real_cluster, nodes, changes, node)
        assert nodes.relists == 1 and len(_node_requests(real_cluster, mark)) == 2
    finally:
        nodes.stop()


def test_at_rest_the_operator_sends_no_node_request(real_cluster: Cluster, node: str) -> None:
    """One list and one watch at start; then a quiet window of QUIET_S seconds without a
    single node request (a watch renews after minutes, not within it); a cordon then
    arrives with no new request either; and the operator's shutdown ends the watch."""
    with running_operator(real_cluster) as _:
        wait_for("the node watch", lambda: len(_node_requests(real_cluster, 0)) >= 2, timeout=30)
        started = _node_requests(real_cluster, 0)
        assert [r.query.get("watch") for r in started] == [None, "true"], started
        watch = started[1].query
        assert watch["fieldSelector"] == CORDONED and watch["allowWatchBookmarks"] == "true"
        assert 240 <= int(watch["timeoutSeconds"]) <= 360 and watch["resourceVersion"]
        mark = real_cluster.mark()
        time.sleep(QUIET_S)
        cordon(real_cluster, node, True)
        real_cluster.settle()
        assert _node_requests(real_cluster, mark) == []
    assert not [t for t in threading.enumerate() if t.name == "cordoned-nodes"]


def _node_requests(cluster: Cluster, mark: int) -> list[Any]:
    return [r for r in cluster.requests_since(mark) if r.path == NODE.path(None)]

"""The watch-backed observer: what a pass reads from the indexes plus its own recent writes.

The indexes here are plain dicts shaped as kopf's (kind -> (namespace, name) -> objects); the
operator suite runs the real kopf indexes against both cluster backends.
"""

from __future__ import annotations

from typing import Any

from docparser_operator.kube.observer import (
    PENDING_BOUND_S,
    IndexedObserver,
    index_key,
    resource_version,
)

NS, DP = "team", "inv"


def obj(kind: str, name: str, rv: int, uid: str = "", **labels: str) -> dict[str, Any]:
    return {
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": uid or f"uid-{name}",
            "resourceVersion": str(rv),
            "labels": {"app.kubernetes.io/instance": DP, **labels},
        },
    }


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def observer(**objects: list[dict[str, Any]]) -> tuple[IndexedObserver, dict, Clock]:
    indexes: dict[str, dict[tuple[str, str], list[dict[str, Any]]]] = {
        kind: {(NS, DP): list(items)} for kind, items in objects.items()
    }
    clock = Clock()
    return IndexedObserver(indexes, ttl_s=10, clock=clock), indexes, clock


def test_reads_children_and_runtime_pods_from_the_indexes() -> None:
    pod = obj("Pod", "inv-a-1", 3, **{"app.kubernetes.io/name": "docparser"})
    stranger = obj("Pod", "other", 4)  # our labels but not a runtime pod
    seen, _, _ = observer(Deployment=[obj("Deployment", "inv-a", 2)], Pod=[pod, stranger])
    got = seen(NS, DP)
    assert set(got.children) == {("Deployment", "inv-a")}
    assert got.pods == [pod]
    assert seen(NS, "nobody").children == {}


def test_our_write_stands_in_until_the_watch_delivers_it() -> None:
    old = obj("Deployment", "inv-a", 5)
    seen, indexes, _ = observer(Deployment=[old])
    mine = obj("Deployment", "inv-a", 7)
    seen.remember(NS, DP, {("Deployment", "inv-a"): mine}, {})
    assert seen(NS, DP).children[("Deployment", "inv-a")] is mine  # the watch lags
    delivered = obj("Deployment", "inv-a", 9)  # our write and a later change
    indexes["Deployment"][(NS, DP)] = [delivered]
    assert seen(NS, DP).children[("Deployment", "inv-a")] is delivered
    indexes["Deployment"][(NS, DP)] = [old]  # even a lagging view now: the write is forgotten
    assert seen(NS, DP).children[("Deployment", "inv-a")] is old


def test_a_created_object_is_seen_before_its_watch_event() -> None:
    seen, _, _ = observer()
    svc = obj("Service", "inv", 4)
    seen.remember(NS, DP, {("Service", "inv"): svc}, {})
    assert seen(NS, DP).children == {("Service", "inv"): svc}


def test_an_object_we_deleted_stays_hidden_until_its_deletion_arrives() -> None:
    svc = obj("Service", "inv-old", 4)
    seen, indexes, _ = observer(Service=[svc])
    seen.remember(NS, DP, {}, {("Service", "inv-old"): "uid-inv-old"})
    assert seen(NS, DP).children == {}
    indexes["Service"][(NS, DP)] = []
    assert seen(NS, DP).children == {}
    newcomer = obj("Service", "inv-old", 8, uid="someone-else")
    indexes["Service"][(NS, DP)] = [newcomer]  # a same-named object with another uid shows
    assert seen(NS, DP).children == {("Service", "inv-old"): newcomer}


def test_a_deletion_on_the_watch_beats_a_write_reported_after_it() -> None:
    """A pass applies the Service; a person deletes it; the deletion event is handled before
    that pass tells the observer about its write. The next pass must see no Service (and so
    put it back now), not our stale write of it."""
    seen, _, _ = observer()
    svc = obj("Service", "inv", 4)
    seen.forget(NS, DP, ("Service", "inv"), "uid-inv")  # the watch: deleted
    seen.remember(NS, DP, {("Service", "inv"): svc}, {})  # the slow pass, afterwards
    assert seen(NS, DP).children == {}


def test_a_deletion_clears_a_pending_write_of_that_object() -> None:
    seen, _, _ = observer()
    seen.remember(NS, DP, {("Service", "inv"): obj("Service", "inv", 4)}, {})
    seen.forget(NS, DP, ("Service", "inv"), "uid-inv")
    assert seen(NS, DP).children == {}


def test_nothing_is_remembered_past_its_ttl() -> None:
    seen, _, clock = observer()
    seen.remember(NS, DP, {("Service", "inv"): obj("Service", "inv", 4)}, {})
    clock.now = 11
    assert seen(NS, DP).children == {}


def test_a_write_stands_in_for_as_long_as_its_watch_event_is_late() -> None:
    """At 1,000 DocParsers created at once the watch delivered the operator's own creates
    more than 10 s late (the window this used to be): the passes after that saw no Service,
    created it again (409), read it and applied it again. A write now stands in until the
    watch delivers its resourceVersion; ``ttl_s`` (``PENDING_BOUND_S``) only bounds a
    watch that never does. Fails with a fixed 10 s window."""
    assert PENDING_BOUND_S >= 60
    clock = Clock()
    indexes: dict[str, dict[tuple[str, str], list[dict[str, Any]]]] = {"Service": {}}
    seen = IndexedObserver(indexes, clock=clock)  # the operator's default bound
    svc = obj("Service", "inv", 40)
    seen.remember(NS, DP, {("Service", "inv"): svc}, {})
    for late in (11.0, 30.0, 59.0):  # the watch lags by this much: our write still holds
        clock.now = late
        assert seen(NS, DP).children == {("Service", "inv"): svc}
    delivered = obj("Service", "inv", 40)
    indexes["Service"][(NS, DP)] = [delivered]  # the watch delivers that version
    assert seen(NS, DP).children[("Service", "inv")] is delivered
    indexes["Service"][(NS, DP)] = []  # a deletion arrives: no stale write of ours shows
    assert seen(NS, DP).children == {}
    seen.remember(NS, DP, {("Service", "inv"): svc}, {})
    clock.now += PENDING_BOUND_S + 1  # never delivered (a deletion missed): bounded
    assert seen(NS, DP).children == {}


def test_a_deleted_docparser_s_children_are_forgotten() -> None:
    """A DocParser deleted and created again under its name: what was remembered of the
    first one's children (written, or read by name and trusted for ever at rest) must not
    stand in the new one's view, where it is owned by the old uid (a ChildConflict)."""
    seen, _, _ = observer()
    seen.remember(NS, DP, {("Service", "inv"): obj("Service", "inv", 4)}, {})
    seen.forget_owner(NS, "other")  # another DocParser's deletion: ours stays
    assert set(seen(NS, DP).children) == {("Service", "inv")}
    seen.forget_owner(NS, DP)
    assert seen(NS, DP).children == {}


def test_opaque_resource_versions_trust_the_watch() -> None:
    indexed = obj("Service", "inv", 1)
    indexed["metadata"]["resourceVersion"] = "abc"
    seen, _, _ = observer(Service=[indexed])
    mine = obj("Service", "inv", 2)
    mine["metadata"]["resourceVersion"] = "xyz"
    seen.remember(NS, DP, {("Service", "inv"): mine}, {})
    assert seen(NS, DP).children[("Service", "inv")] is indexed
    assert resource_version(indexed) is None and resource_version(obj("Pod", "p", 12)) == 12


def test_index_key_needs_the_instance_label() -> None:
    assert index_key(obj("Service", "inv", 1)) == (NS, DP)
    assert index_key({"metadata": {"name": "x", "namespace": NS}}) is None

"""What the garbage collector removes, on every backend that has one.

WHY: the operator never deletes its children itself; it relies on the collector for a deleted
DocParser's children, including one that a reconcile already in flight writes *after* the
deletion (its owner reference names a uid that no longer exists). A DocParser made again
under the same name must then find no child of the old uid: one left behind is a
ChildConflict. The emulator once collected only at the moment an owner went, and a child
written a moment later stayed for ever (a fresh clone's CI failed on it); run against the
real kube-controller-manager too, these tests keep the emulator to what the real one does.
"""

from __future__ import annotations

from typing import Any

import pytest
from docparser_operator.api.kinds import KNOWN_KINDS
from kube_cluster import Cluster, wait_for

CONFIG_MAP = KNOWN_KINDS["ConfigMap"]


def config_map(cluster: Cluster, name: str, owners: list[dict[str, Any]] | None = None) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": cluster.namespace}
    if owners:
        meta["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": o["metadata"]["name"],
                "uid": o["metadata"]["uid"],
            }
            for o in owners
        ]
    return cluster.client.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})


def gone(cluster: Cluster, name: str) -> bool:
    return cluster.get(CONFIG_MAP, name) is None


def test_a_dependent_written_after_its_owner_was_deleted_is_collected(cluster: Cluster) -> None:
    if not cluster.has_garbage_collector:
        pytest.skip("needs a garbage collector")
    owner = config_map(cluster, "owner")
    cluster.client.delete(CONFIG_MAP, cluster.namespace, "owner", uid=owner["metadata"]["uid"])
    wait_for("the owner gone", lambda: gone(cluster, "owner"), timeout=30)

    config_map(cluster, "late-child", owners=[owner])  # a reconcile that raced the deletion
    wait_for("the late child collected", lambda: gone(cluster, "late-child"), timeout=60)

    again = config_map(cluster, "owner")  # the same name, a new uid: the old child never counts
    assert again["metadata"]["uid"] != owner["metadata"]["uid"]


def test_a_dependent_with_one_owner_left_stays(cluster: Cluster) -> None:
    if not cluster.has_garbage_collector:
        pytest.skip("needs a garbage collector")
    first, second = config_map(cluster, "first"), config_map(cluster, "second")
    cluster.client.delete(CONFIG_MAP, cluster.namespace, "first", uid=first["metadata"]["uid"])
    wait_for("the first owner gone", lambda: gone(cluster, "first"), timeout=30)

    config_map(cluster, "shared-child", owners=[first, second])
    config_map(cluster, "marker", owners=[first])  # once it is collected, the collector has run
    wait_for("the marker collected", lambda: gone(cluster, "marker"), timeout=60)
    assert not gone(cluster, "shared-child"), "collected while one of its owners still exists"

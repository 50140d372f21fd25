"""A child an earlier DocParser of the same name left is read again before a pass judges it
(kube/predecessors.py): the watch may not have delivered its deletion yet."""

from __future__ import annotations

from typing import Any

from docparser_operator.api.kinds import ResourceRef
from docparser_operator.core.plan.children import Observed
from docparser_operator.kube.predecessors import confirmed, left_by_predecessor

NS, DP, OLD, NEW = "team", "inv", "uid-old", "uid-new"


def child(kind: str, name: str, owner_uid: str | None, owner: str = DP) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"{name}-{owner_uid}"}
    if owner_uid is not None:
        ref = {"kind": "DocParser", "name": owner, "uid": owner_uid, "controller": True}
        meta["ownerReferences"] = [ref]
    return {"kind": kind, "metadata": meta}


class Server:
    """What the API server holds now, and every GET asked of it."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = {(o["kind"], o["metadata"]["name"]): o for o in objects}
        self.gets: list[tuple[str, str]] = []

    def get(self, ref: ResourceRef, namespace: str | None, name: str) -> dict[str, Any] | None:
        assert namespace == NS
        self.gets.append((ref.kind, name))
        return self.objects.get((ref.kind, name))


def observed(*children: dict[str, Any]) -> Observed:
    return Observed({(c["kind"], c["metadata"]["name"]): c for c in children}, pods=[])


def test_a_predecessors_child_the_collector_removed_leaves_the_view() -> None:
    ours = child("Deployment", "inv-a", NEW)
    stale = child("Service", "inv", OLD)  # gone from the server, still in the index
    stranger = child("PodDisruptionBudget", "inv", None)  # a user's: a conflict, not re-read
    other = child("ConfigMap", "inv-shadow", OLD, owner="billing")  # another DocParser's
    server = Server(ours, stranger, other)
    got = confirmed(server, NS, DP, NEW, observed(ours, stale, stranger, other))  # type: ignore[arg-type]
    assert set(got.children) == {
        ("Deployment", "inv-a"),
        ("PodDisruptionBudget", "inv"),
        ("ConfigMap", "inv-shadow"),
    }
    assert server.gets == [("Service", "inv")]  # one GET, for the predecessor's child only


def test_a_predecessors_child_still_there_stays_as_the_server_has_it() -> None:
    indexed = child("Service", "inv", OLD)
    terminating = child("Service", "inv", OLD)
    terminating["metadata"]["deletionTimestamp"] = "2026-12-05T16:20:00Z"
    server = Server(terminating)
    got = confirmed(server, NS, DP, NEW, observed(indexed))  # type: ignore[arg-type]
    assert got.children[("Service", "inv")] is terminating


def test_nothing_is_read_for_a_docparser_whose_children_are_its_own() -> None:
    server = Server()
    view = observed(child("Service", "inv", NEW), child("Deployment", "inv-a", NEW))
    assert confirmed(server, NS, DP, NEW, view) is view  # type: ignore[arg-type]
    assert confirmed(server, NS, DP, "", observed(child("Service", "inv", OLD))).children  # type: ignore[arg-type]
    assert server.gets == []


def test_only_a_controller_reference_to_this_name_with_another_uid_counts() -> None:
    assert left_by_predecessor(child("Service", "inv", OLD), DP, NEW)
    assert not left_by_predecessor(child("Service", "inv", NEW), DP, NEW)
    assert not left_by_predecessor(child("Service", "inv", OLD, owner="billing"), DP, NEW)
    assert not left_by_predecessor(child("Service", "inv", None), DP, NEW)
    not_controller = child("Service", "inv", OLD)
    not_controller["metadata"]["ownerReferences"][0]["controller"] = False
    assert not left_by_predecessor(not_controller, DP, NEW)

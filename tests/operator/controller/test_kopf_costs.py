"""kopf_costs.py: the cheap diff base and index copy give what the costly ones gave.

Why: both replaced deep copies on every watch event (docs/benchmarks.md, the operator's
profile); they may only be cheaper, never different. The index entry must equal the old
"deep copy the body, then drop what is not kept" and share nothing with the watch's body;
the empty diff base is only safe while the operator registers no kopf change handler or
daemon, the only readers of kopf's diff, so that is checked on the real registry.
"""

from __future__ import annotations

import copy
from typing import Any, cast

import kopf
from docparser_operator.controller import handlers, kopf_costs


def _old_entry(raw: dict[str, Any]) -> dict[str, Any]:
    """The index entry as handlers._by_owner made it before kopf_costs (deep copy, trim)."""
    obj = copy.deepcopy(raw)
    if obj.get("kind") == "Pod":
        obj["metadata"].pop("managedFields", None)
    elif obj.get("kind") == "ReplicaSet":
        meta = obj["metadata"]
        obj = {
            "kind": "ReplicaSet",
            "metadata": {k: meta[k] for k in kopf_costs.REPLICASET_KEPT if k in meta},
        }
    return obj


def _meta(**extra: Any) -> dict[str, Any]:
    return {
        "name": "dp-runtime-abc",
        "namespace": "ns",
        "uid": "u1",
        "resourceVersion": "42",
        "generation": 3,
        "labels": {"app.kubernetes.io/instance": "dp", "app.kubernetes.io/managed-by": "x"},
        "annotations": {"a": "b"},
        "ownerReferences": [{"uid": "o1", "controller": True, "kind": "DocParser"}],
        "managedFields": [{"manager": "docparser-operator", "operation": "Apply", "fieldsV1": {}}],
        **extra,
    }


BODIES: list[dict[str, Any]] = [
    {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(),
        "spec": {"containers": [{"name": "runtime", "env": [{"name": "A", "value": "1"}]}]},
        "status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]},
    },
    {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": _meta(),
        "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "x"}]}}},
        "status": {"replicas": 2},
    },
    {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(),
        "spec": {"replicas": 1, "template": {"metadata": {"labels": {"a": "b"}}}},
        "status": {"conditions": [{"type": "Available", "status": "True"}]},
    },
    {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {}},
    },  # no managedFields
]


def _body(raw: dict[str, Any]) -> kopf.Body:
    """``raw`` as kopf hands a watched object to its handlers."""
    return kopf.Body(cast(kopf.RawBody, raw))


def _leaves(obj: Any) -> list[int]:
    """The ids of every dict and list inside ``obj`` (what a shallow copy would share)."""
    if isinstance(obj, dict):
        return [id(obj), *(i for v in obj.values() for i in _leaves(v))]
    if isinstance(obj, list):
        return [id(obj), *(i for v in obj for i in _leaves(v))]
    return []


def test_index_entry_equals_the_deep_copy_it_replaced_and_shares_nothing() -> None:
    """Equal (key order included: the same JSON) for each kind it treats apart, through
    kopf's Body as kopf hands it to the index; no dict or list shared with the body, so
    a pass that edits what the observer gave it cannot edit kopf's copy, nor the reverse."""
    for raw in BODIES:
        before = copy.deepcopy(raw)
        entry = kopf_costs.index_entry(_body(raw))
        old = _old_entry(raw)
        assert entry == old
        assert list(entry) == list(old) and list(entry["metadata"]) == list(old["metadata"])
        assert not set(_leaves(entry)) & set(_leaves(raw))
        assert raw == before  # the body is left as it was
    pod = kopf_costs.index_entry(_body(BODIES[0]))
    assert "managedFields" not in pod["metadata"] and pod["status"] == BODIES[0]["status"]
    deployment = kopf_costs.index_entry(_body(BODIES[2]))
    assert deployment["metadata"]["managedFields"] == BODIES[2]["metadata"]["managedFields"]


def test_by_owner_keys_the_entry_by_instance_and_skips_unlabelled() -> None:
    """The handler kopf calls: keyed by (namespace, instance label); nothing without one."""
    assert handlers._by_owner(_body(BODIES[0])) == {("ns", "dp"): _old_entry(BODIES[0])}
    assert handlers._by_owner(_body(BODIES[3])) == {}


def test_no_diff_base_is_safe_only_without_change_handlers_and_daemons() -> None:
    """kopf reads its diff only for change handlers (on.create/update/resume/field) and
    daemons/timers; the operator registers none, so building none changes nothing. Fails
    as soon as one is registered: then the diff base must be kopf's again."""
    registry = kopf.get_default_registry()
    assert handlers.track  # the module registered its handlers on this registry
    assert not list(registry._changing.get_all_handlers())
    assert not list(registry._spawning.get_all_handlers())
    assert list(registry._watching.get_all_handlers())  # the registry is the one in use


def test_no_diff_base_builds_stores_and_fetches_nothing() -> None:
    """No essence (no deep copy), no stored base, and nothing patched onto the body."""
    storage = kopf_costs.NoDiffBase()
    body = _body(copy.deepcopy(BODIES[2]))
    assert storage.build(body=body) == {}
    assert storage.fetch(body=body) is None
    patch = kopf.Patch()
    storage.store(body=body, patch=patch, essence=storage.build(body=body))
    assert not patch

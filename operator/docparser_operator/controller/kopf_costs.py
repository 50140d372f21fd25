"""The per-event work of kopf's watches made cheap where the operator never reads its result.

Every watch event of a DocParser, a child or a runtime pod passes through kopf's indexing
handler (``index_entry``, the value the observer reads) and, for the kinds with an event
handler, through kopf's cause detection. Profiled on the real API server (py-spy, 300
DocParsers created at once, docs/benchmarks.md), deep copies were about a quarter of the
operator's CPU: kopf's diff base of every body and the index's copy of every child and pod.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

import kopf

REPLICASET_KEPT = ("name", "namespace", "uid", "labels", "ownerReferences", "resourceVersion")


class NoDiffBase(kopf.DiffBaseStorage):
    """A diff base that is never built nor stored.

    kopf builds an "essence" of every watched body on every event (a deep copy less
    ``status`` and most of ``metadata``, then another copy to clear its progress fields) and
    diffs it against the last handled one; only change handlers and daemons read that diff.
    The operator registers neither (``handlers.py``, ``child_events.py``: one event handler
    per kind, no kopf timer), so the copies bought nothing. With no change handler kopf never
    calls ``store`` either; it is a no-op here all the same, so nothing is written to a
    DocParser."""

    def build(
        self,
        *,
        body: kopf.Body,
        extra_fields: Iterable[Any] | None = None,
    ) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def index_entry(body: Mapping[str, Any]) -> dict[str, Any]:
    """A plain deep copy of a watched object, as the observer's indexes keep it: a pod
    without ``metadata.managedFields`` (never read for pods: keeps the index small), a
    ReplicaSet as its identity, labels and owner chain only (all ``readable_pods`` reads),
    any other kind whole. Only the kept parts are copied: the result equals a deep copy of
    the whole body with the rest dropped afterwards, at a fraction of the cost."""
    kind = body.get("kind")
    meta = body.get("metadata") or {}
    if kind == "ReplicaSet":
        kept = {k: copy.deepcopy(meta[k]) for k in REPLICASET_KEPT if k in meta}
        return {"kind": "ReplicaSet", "metadata": kept}
    if kind == "Pod":
        trimmed = {k: copy.deepcopy(v) for k, v in meta.items() if k != "managedFields"}
        return {k: trimmed if k == "metadata" else copy.deepcopy(body[k]) for k in body}
    return copy.deepcopy({k: body[k] for k in body})

"""Metadata every child shares: name, namespace, labels and (for live objects) owner reference."""

from __future__ import annotations

from typing import Any

from docparser_operator.api.labels import TrackLabel, child_labels
from docparser_operator.api.naming import API_VERSION, KIND
from docparser_operator.core.plan.target import Target


def object_meta(
    plan: Target,
    name: str,
    track: TrackLabel,
    *,
    version: str | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Metadata of one child. The owner reference appears only when the DocParser has a uid
    (a live object); `render -f` on a manifest has none, and `kubectl apply` of its output
    then creates unowned objects, as a GitOps user expects."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": plan.namespace,
        "labels": child_labels(plan.name, track, version),
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    uid = plan.resource.metadata.uid
    if uid:
        meta["ownerReferences"] = [
            {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "name": plan.name,
                "uid": uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return meta

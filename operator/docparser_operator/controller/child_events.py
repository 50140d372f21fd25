"""The children's watches: what a change of a Deployment, fill Job, HTTPRoute or runtime pod,
or the deletion of any other child, asks of its owner. Registered on import (``handlers.py``
imports it); each calls the one pass, ``passes.run_reconcile``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from docparser_operator.api import labels
from docparser_operator.api.kinds import DOCPARSER, KINDS
from docparser_operator.api.naming import KIND
from docparser_operator.controller.passes import run_reconcile, state_of
from docparser_operator.controller.state import OperatorState
from docparser_operator.core.plan import triggers
from docparser_operator.kube.observer import index_key


def on_deployment(event: Mapping[str, Any], body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A child Deployment moved (pods became ready, a rollout stalled), a weights cache fill
    Job finished or failed, or a Gateway's controller judged the HTTPRoute (what a held
    scale-down waits for, core/status/route_verdict.py): refresh its owner."""
    state = state_of(memo)
    meta = body.get("metadata") or {}
    owner = _controller_owner(meta)
    if owner is None:
        return
    key = meta.get("uid", "")
    signature = triggers.deployment_signature(body)
    if event.get("type") != "DELETED" and state.deployment_seen.get(key) == signature:
        return  # our own no-op (or metadata-only) change: nothing new to report
    state.deployment_seen[key] = signature
    deleted = event.get("type") == "DELETED"
    if deleted:
        state.deployment_seen.pop(key, None)
        _forget(state, body)
    reconcile_owner(state, meta.get("namespace"), owner, child_deleted=deleted)


def on_pod(event: Mapping[str, Any], body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A runtime pod changed state (cannot be scheduled, a Secret is missing, the weights
    failed, the model loads): the status says so now, not at the next resync. Reads are
    served from the indexes, so a pass costs no request unless the status changes."""
    state = state_of(memo)
    meta = body.get("metadata") or {}
    key = meta.get("uid", "")
    signature = triggers.pod_signature(body)
    if event.get("type") == "DELETED":
        state.pod_seen.pop(key, None)
        return  # its ReplicaSet and Deployment report the loss
    if state.pod_seen.get(key) == signature:
        return
    state.pod_seen[key] = signature
    instance = (meta.get("labels") or {}).get(labels.LABEL_INSTANCE)
    owner = next(
        (
            body
            for body in state.known.values()
            if body["metadata"].get("name") == instance
            and body["metadata"].get("namespace") == meta.get("namespace")
        ),
        None,
    )
    if owner is not None:
        run_reconcile(state, owner, strict=False)


def _forget(state: OperatorState, body: Mapping[str, Any]) -> None:
    """A child is gone: the observer must not keep showing our last write of it."""
    key = index_key(body)
    if state.observer is not None and key is not None:
        meta = body.get("metadata") or {}
        child = (body.get("kind") or "", meta.get("name") or "")
        state.observer.forget(key[0], key[1], child, meta.get("uid") or "")


def reconcile_owner(
    state: OperatorState,
    namespace: str | None,
    owner: Mapping[str, Any],
    *,
    child_deleted: bool = False,
) -> None:
    """Reconcile the owner: its latest body from the watch (our writes included), else a GET.

    After a child's deletion the owner is read from the server first. Why: the garbage
    collector deletes a DocParser's children right after the DocParser, usually before its
    own DELETED event reaches us; a pass from the watch's copy then wrote every child back
    under the old uid, for the collector to delete again (and a DocParser made again under
    the name met them as a ChildConflict meanwhile). One GET per deleted child instead.

    A DocParser made again under the name (another uid) is reconciled on its predecessor's
    child's deletion: it may have found that child still there (kube/predecessors.py), and
    without this it waited for the resync to create its own."""
    uid = owner.get("uid") or ""
    resource = None if child_deleted else state.known.get(uid)
    if resource is None:
        resource = state.client.get(DOCPARSER, namespace, owner["name"])
        if resource is not None and resource["metadata"].get("uid") == uid:
            resource = state.newest(resource)
    if resource is None or (resource["metadata"].get("uid") != uid and not child_deleted):
        return
    if resource["metadata"].get("deletionTimestamp"):
        return
    run_reconcile(state, resource, strict=False)


def _controller_owner(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return next(
        (
            r
            for r in meta.get("ownerReferences") or []
            if r.get("kind") == KIND and r.get("controller")
        ),
        None,
    )


def on_child_deleted(event: Mapping[str, Any], body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    if event.get("type") != "DELETED":
        return
    meta = body.get("metadata") or {}
    owner = _controller_owner(meta)
    _forget(state_of(memo), body)
    if owner is not None:
        reconcile_owner(state_of(memo), meta.get("namespace"), owner, child_deleted=True)


# How each kind's changes reach us is its ``watch`` in api/kinds.py: every change of a
# Deployment, fill Job or HTTPRoute, a runtime pod's state, and only the deletion of the others (a
# person or a tool removed one; its owner puts it back now, not at the next resync).
_ON_WATCH = {"changes": on_deployment, "pods": on_pod, "deletion": on_child_deleted}
for _ref in KINDS:
    if _ref.watch in _ON_WATCH:
        kopf.on.event(
            _ref.group,
            _ref.version,
            _ref.plural,
            labels={labels.LABEL_MANAGED_BY: labels.MANAGED_BY},
        )(_ON_WATCH[_ref.watch])

"""The children of a DocParser as the reconciler sees them: ownership, the desired-hash,
"does the live object already carry what we would apply", and the observed state (live
children, pods, one ``RevisionState`` per revision Deployment). Pure: reading them from the
cluster is kube/observer.py.

Ownership is decided by the ownerReferences uid, never by labels alone: a same-named or
same-labelled object without our controller reference is reported (ChildConflict) and left
alone. Quantities are compared canonically (``0.5`` equals ``500m``), so a no-op resync stays
a no-op.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from docparser_operator.api import labels, naming
from docparser_operator.api.models import ObjectMeta
from docparser_operator.core.plan import quantity, rollout_planner

HASH_ANNOTATION = "docparser.io/desired-hash"
WEIGHTS_SHA_ANNOTATION = "docparser.io/weights-sha256"  # a weights cache claim's and Job's

Key = tuple[str, str]  # (kind, name)


def owner_reference(owner: ObjectMeta) -> dict[str, Any]:
    return {
        "apiVersion": naming.API_VERSION,
        "kind": naming.KIND,
        "name": owner.name,
        "uid": owner.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owned_by(obj: dict[str, Any], uid: str) -> bool:
    """True only when ``obj`` names the DocParser with this uid as its controller."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == uid and r.get("controller") for r in refs)


def desired_hash(obj: dict[str, Any]) -> str:
    body = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def prepare(children: list[dict[str, Any]], owner: ObjectMeta) -> list[dict[str, Any]]:
    """Stamp ownership (the parsed DocParser's ``metadata``), labels and the desired-hash on
    every child."""
    out = []
    for child in children:
        obj = copy.deepcopy(child)
        meta = obj.setdefault("metadata", {})
        meta["namespace"] = owner.namespace
        meta.setdefault("labels", {}).update(labels.owned_selector(owner.name))
        meta["ownerReferences"] = [owner_reference(owner)]
        meta.setdefault("annotations", {})[HASH_ANNOTATION] = desired_hash(obj)
        out.append(obj)
    return out


def _covers(live: Any, want: Any) -> bool:
    """Whether ``live`` holds every value of ``want`` (server defaults may add more)."""
    if isinstance(want, dict):
        return isinstance(live, dict) and all(_covers(live.get(k), v) for k, v in want.items())
    if isinstance(want, list):
        return (
            isinstance(live, list)
            and len(live) == len(want)
            and all(_covers(a, b) for a, b in zip(live, want, strict=True))
        )
    if live == want:
        return True
    if isinstance(want, bool) or not isinstance(want, int | float | str):
        return False
    # the API server returns quantities in canonical form ("1" for 1, "500m" for "0.5")
    if not isinstance(want, str) and isinstance(live, str) and live == str(want):
        return True
    return _same_quantity(live, want)


def _same_quantity(live: Any, want: Any) -> bool:
    if not isinstance(live, str | int) or isinstance(live, bool):
        return False
    try:
        return quantity.parse(live) == quantity.parse(want)
    except (ValueError, TypeError, ArithmeticError):
        return False


def needs_apply(want: dict[str, Any], live: dict[str, Any] | None) -> bool:
    """Apply unless the live object already carries exactly what we would apply."""
    if live is None:
        return True
    meta = live.get("metadata") or {}
    managers = {
        m.get("manager") for m in meta.get("managedFields") or [] if m.get("operation") == "Apply"
    }
    if naming.FIELD_MANAGER not in managers:
        return True
    if (meta.get("annotations") or {}).get(HASH_ANNOTATION) != want["metadata"]["annotations"][
        HASH_ANNOTATION
    ]:
        return True
    return not _covers(live, want)


@dataclass(frozen=True)
class Observed:
    """The live children of one DocParser and the pods of its revisions."""

    children: dict[Key, dict[str, Any]]
    pods: list[dict[str, Any]]  # the runtime pods of every revision
    forbidden: tuple[str, ...] = ()  # kinds the operator may not list (RBAC)
    cordoned: frozenset[str] | None = None  # cordoned nodes; None: nodes unreadable (drain.py)
    front: tuple[dict[str, Any], ...] = ()  # the front's pods (replicas.min 0)
    # The ReplicaSets labelled as ours (their metadata is enough): which pods our Deployments
    # made (``readable_pods``); none when the operator may not list them (then none is read).
    replica_sets: tuple[dict[str, Any], ...] = ()
    # Children read by name during this very observation and not found (kube/observer.py):
    # fresh from the API server, so creating one needs no second read (``needs_read``).
    absent: frozenset[Key] = frozenset()


def content_named(obj: dict[str, Any]) -> bool:
    """Whether a child's name carries the hash of what it holds: a revision's Deployment and
    backend Service (``<name>-<revision>``, the pod template's hash) and a weights cache claim
    and its fill Job (``<name>-weights-<sha256[:12]>``). Nobody else's object plausibly holds
    such a name, and one of ours left by an earlier DocParser of the same name (not yet
    garbage-collected) holds the same content, so applying over it adopts what was wanted."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    revision = (meta.get("labels") or {}).get(labels.LABEL_REVISION)
    sha = (meta.get("annotations") or {}).get(WEIGHTS_SHA_ANNOTATION)
    return bool(revision and name.endswith(f"-{revision}")) or bool(
        sha and name.endswith(f"-weights-{sha[:12]}")
    )


def needs_read(obj: dict[str, Any], observed: Observed) -> bool:
    """Whether a child the observed view lacks must be read before its first apply: the view
    comes from label-filtered watches, which lag and never show an unlabelled object, so a
    same-named object someone made could be missing from it, and a forced apply would adopt
    it (controller/reconcile.py). Not when this observation read it by name and found none,
    nor when its name carries its content's hash (``content_named``)."""
    key = (obj["kind"], obj["metadata"]["name"])
    return key not in observed.children and key not in observed.absent and not content_named(obj)


@dataclass(frozen=True)
class ReadablePods:
    """The pods whose ``/metrics`` the operator may read for one DocParser, and how many
    labelled pods it leaves out (the ``not_owned`` count of the operator's skip metric)."""

    pods: list[dict[str, Any]]  # runtime pods of our revisions' ReplicaSets
    front: tuple[dict[str, Any], ...]  # the front's, of its ReplicaSet
    not_owned: int


def _controller(obj: dict[str, Any], kind: str) -> str | None:
    """The uid of ``obj``'s controlling owner of this kind, or None."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return next(
        (
            str(r["uid"])
            for r in refs
            if r.get("controller") and r.get("kind") == kind and r.get("uid")
        ),
        None,
    )


def readable_pods(observed: Observed, uid: str) -> ReadablePods:
    """The pods of ``observed`` that belong to the DocParser with ``uid``, by the uid chain
    pod -> ReplicaSet (its controller) -> Deployment (the ReplicaSet's controller) -> this
    DocParser (the Deployment's controller), never by labels or names.

    Why: a pod's labels and its ``status.podIP`` are whatever its creator wrote, and anyone
    who may create a pod in the namespace can label it as ours. Its figures would then feed
    the DocParser's wake and its canary's verdict, and a pod that answers slowly would hold
    every reading up. Only the Deployment and ReplicaSet controllers make our pods, and they
    write the owner references with the uids of objects we own."""
    deployments = {
        obj["metadata"]["uid"]
        for (kind, _), obj in observed.children.items()
        if kind == "Deployment" and obj["metadata"].get("uid") and owned_by(obj, uid)
    }
    replica_sets = {
        rs["metadata"]["uid"]
        for rs in observed.replica_sets
        if (rs.get("metadata") or {}).get("uid") and _controller(rs, "Deployment") in deployments
    }

    def ours(pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        return [p for p in pods if _controller(p, "ReplicaSet") in replica_sets]

    pods, front = ours(observed.pods), ours(observed.front)
    left = len(observed.pods) + len(observed.front) - len(pods) - len(front)
    return ReadablePods(pods, tuple(front), left)


def revision_states(observed: Observed, uid: str) -> list[rollout_planner.RevisionState]:
    """Our Deployments, one per revision, as the planner sees them."""
    states = []
    for (kind, _), obj in observed.children.items():
        meta = obj["metadata"]
        revision = (meta.get("labels") or {}).get(labels.LABEL_REVISION)
        if kind != "Deployment" or not revision or not owned_by(obj, uid):
            continue
        role = (meta.get("labels") or {}).get(labels.LABEL_TRACK)
        status = obj.get("status") or {}
        retired = (meta.get("labels") or {}).get(labels.LABEL_RETIRED, "")
        states.append(
            rollout_planner.RevisionState(
                revision=revision,
                role="canary" if role == "canary" else "stable",
                replicas=(obj.get("spec") or {}).get("replicas", 1) or 0,
                ready=status.get("readyReplicas") or 0,
                created=meta.get("creationTimestamp") or "",
                retired=int(retired) if retired.isdigit() else None,
            )
        )
    return states


# Children created once and never re-applied: a claim's class and access mode cannot change,
# a Job's pod template is immutable (the weights cache, render/weights_cache.py).
CREATE_ONCE = frozenset({"PersistentVolumeClaim", "Job"})


def stays_mounted(deployment: dict[str, Any]) -> set[str]:
    """The claims a Deployment's pods mount (its weights cache claim, a pvc:// source)."""
    pod = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    return {
        v["persistentVolumeClaim"]["claimName"]
        for v in pod.get("volumes") or []
        if v.get("persistentVolumeClaim")
    }

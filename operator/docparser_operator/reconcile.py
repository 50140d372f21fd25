"""The one level-triggered reconcile: observe, render, apply what differs, prune, report.

Every trigger (create, update, resume, the drift timer, a child Deployment changing) calls
``reconcile`` with the current DocParser; it never looks at what changed, only at what is
desired now versus what is live now. That is what makes GitOps rollbacks, operator restarts
mid-way and lost events harmless: the next pass converges from whatever state it finds.

Writes are kept to what is needed, so a no-op resync sends zero writes:
- a child is applied only when it is missing, lacks our field manager, carries a different
  hash of the desired object (fields were added or removed) or its live values differ from the
  desired ones on the fields we set (someone edited them: drift);
- status is patched only when the computed status differs from the live one.

Ownership is decided by the ownerReferences uid, never by labels alone: a same-named or
same-labelled object without our controller reference is reported (Degraded, ChildConflict)
and left alone.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import pydantic

from docparser_operator import labels, naming, sizing
from docparser_operator.apply import DOCPARSER, FIELD_MANAGER, ApiError, KubeClient, ref_for
from docparser_operator.render import plan_for, render_plan
from docparser_operator.status import Problem, TrackObservation, build_status, status_changed

CHILD_KINDS = (
    "Deployment",
    "Service",
    "HorizontalPodAutoscaler",
    "PodDisruptionBudget",
    "HTTPRoute",
)
HASH_ANNOTATION = "docparser.io/desired-hash"
HANDOFF_MANAGER = "docparser-operator-replicas-handoff"

Key = tuple[str, str]  # (kind, name)


@dataclass
class Outcome:
    """What one pass did (for events, logs, tests and the benchmark)."""

    name: str = ""
    applied: list[Key] = field(default_factory=list)
    pruned: list[Key] = field(default_factory=list)
    conflicts: list[Key] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)
    previous_status: dict[str, Any] = field(default_factory=dict)
    status_written: bool = False

    @property
    def spec_invalid(self) -> bool:
        return any(p.reason == "SpecInvalid" for p in self.problems)


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# pure helpers ---------------------------------------------------------------------------------
def owner_reference(resource: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": naming.API_VERSION,
        "kind": naming.KIND,
        "name": resource["metadata"]["name"],
        "uid": resource["metadata"]["uid"],
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


def prepare(children: list[dict[str, Any]], resource: dict[str, Any]) -> list[dict[str, Any]]:
    """Stamp ownership, labels and the desired-hash; drop replicas an HPA manages.

    The renderers already omit replicas under an HPA; dropping them here too keeps the rule in
    the one place that talks to the cluster (an applied replicas field would fight the HPA)."""
    name = resource["metadata"]["name"]
    hpa_targets = {
        c["spec"]["scaleTargetRef"]["name"]
        for c in children
        if c["kind"] == "HorizontalPodAutoscaler"
    }
    out = []
    for child in children:
        obj = copy.deepcopy(child)
        meta = obj.setdefault("metadata", {})
        meta["namespace"] = resource["metadata"]["namespace"]
        meta.setdefault("labels", {}).update(labels.owned_selector(name))
        meta["ownerReferences"] = [owner_reference(resource)]
        if obj["kind"] == "Deployment" and meta["name"] in hpa_targets:
            (obj.get("spec") or {}).pop("replicas", None)
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
    if isinstance(want, bool) or not isinstance(want, int | float):
        return live == want
    # the API server returns quantities as strings ("1" for a rendered 1)
    return live == want or (isinstance(live, str) and live == str(want))


def needs_apply(want: dict[str, Any], live: dict[str, Any] | None) -> bool:
    """Apply unless the live object already carries exactly what we would apply."""
    if live is None:
        return True
    meta = live.get("metadata") or {}
    managers = {
        m.get("manager") for m in meta.get("managedFields") or [] if m.get("operation") == "Apply"
    }
    if FIELD_MANAGER not in managers:
        return True
    if (meta.get("annotations") or {}).get(HASH_ANNOTATION) != want["metadata"]["annotations"][
        HASH_ANNOTATION
    ]:
        return True
    return not _covers(live, want)


def _problem_from_validation(exc: pydantic.ValidationError) -> Problem:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p not in ("spec",))
        parts.append(f"{where}: {err.get('msg')}" if where else str(err.get("msg")))
    return Problem("SpecInvalid", "invalid spec: " + "; ".join(parts))


def _releases_replicas(want: dict[str, Any], live: dict[str, Any]) -> bool:
    """An HPA takes over a Deployment whose replicas we applied so far."""
    if want["kind"] != "Deployment" or "replicas" in (want.get("spec") or {}):
        return False
    return any(
        entry.get("manager") == FIELD_MANAGER
        and entry.get("operation") == "Apply"
        and "f:replicas" in (entry.get("fieldsV1") or {}).get("f:spec", {})
        for entry in live["metadata"].get("managedFields") or []
    )


def _hand_off_replicas(client: KubeClient, live: dict[str, Any]) -> None:
    """Keep the current replicas while we stop applying them.

    Dropping a field we alone own makes server-side apply delete it, and the Deployment would
    fall back to 1 replica until the HPA reacts. A second manager first co-owns the current
    value (the documented SSA hand-over), so the release leaves it in place for the HPA."""
    meta = live["metadata"]
    client.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "spec": {"replicas": live["spec"].get("replicas", 1)},
        },
        manager=HANDOFF_MANAGER,
        force=True,
    )


def _apply_problem(key: Key, exc: ApiError) -> Problem:
    """A child the API server cannot take: its API is missing (the Gateway API CRDs are not
    installed) or it rejects the object. Reported as Degraded; the other children proceed."""
    kind, name = key
    if exc.status == 404:
        return Problem(
            "MissingAPI", f"{kind} {name}: the cluster does not serve {kind} ({exc.message})"
        )
    return Problem("ChildRejected", f"{kind} {name} rejected by the API server: {exc.message}")


# I/O --------------------------------------------------------------------------------------------
def observe(client: KubeClient, namespace: str, name: str) -> dict[Key, dict[str, Any]]:
    """Every live object labelled as a child of this DocParser (owned or not)."""
    selector = labels.selector_string(labels.owned_selector(name))
    live: dict[Key, dict[str, Any]] = {}
    for kind in CHILD_KINDS:
        for obj in client.list(ref_for(kind), namespace, selector=selector):
            live[(kind, obj["metadata"]["name"])] = obj
    return live


def _ready(dep: dict[str, Any] | None) -> int:
    return ((dep or {}).get("status") or {}).get("readyReplicas", 0) or 0


def reconcile(client: KubeClient, resource: dict[str, Any], *, now: str | None = None) -> Outcome:
    """Drive the children of ``resource`` to the desired state and write its status."""
    now = now or now_rfc3339()
    meta = resource["metadata"]
    name, namespace, uid = meta["name"], meta["namespace"], meta["uid"]
    out = Outcome(name=name, previous_status=copy.deepcopy(resource.get("status") or {}))

    live = observe(client, namespace, name)
    canary_dep = live.get(("Deployment", naming.deployment(name, "canary")))
    canary_ready = canary_dep is not None and owned_by(canary_dep, uid) and _ready(canary_dep) > 0

    plan = None
    try:
        plan = plan_for(resource, canary_ready=canary_ready)
    except pydantic.ValidationError as exc:
        out.problems.append(_problem_from_validation(exc))

    if plan is not None:
        gpu = sizing.gpu_memory_problem(plan.resource.spec)
        if gpu is not None:
            out.problems.append(Problem(*gpu))
        desired = prepare(render_plan(plan), resource)
        wanted = {(c["kind"], c["metadata"]["name"]) for c in desired}
        for obj in desired:
            key = (obj["kind"], obj["metadata"]["name"])
            current = live.get(key)
            if current is not None and not owned_by(current, uid):
                out.conflicts.append(key)
                continue
            if needs_apply(obj, current):
                if current is not None and _releases_replicas(obj, current):
                    _hand_off_replicas(client, current)
                try:
                    live[key] = client.apply(obj, force=True)
                except ApiError as exc:
                    if exc.status not in (404, 422):
                        raise  # transient or unexpected: the caller retries with backoff
                    out.problems.append(_apply_problem(key, exc))
                    continue
                out.applied.append(key)
        for key, obj in list(live.items()):
            if key in wanted or not owned_by(obj, uid):
                continue
            client.delete(ref_for(key[0]), namespace, key[1], uid=obj["metadata"]["uid"])
            out.pruned.append(key)
            del live[key]
        for kind, child in out.conflicts:
            out.problems.append(
                Problem(
                    "ChildConflict",
                    f"{kind} {child} exists but is not owned by this DocParser; left untouched",
                )
            )

    out.status = _status(client, resource, plan, live, out, now)
    return out


def _status(
    client: KubeClient,
    resource: dict[str, Any],
    plan: Any,
    live: dict[Key, dict[str, Any]],
    out: Outcome,
    now: str,
) -> dict[str, Any]:
    meta = resource["metadata"]
    name, namespace, uid = meta["name"], meta["namespace"], meta["uid"]
    previous = out.previous_status
    pods = client.list(
        ref_for("Pod"), namespace, selector=labels.selector_string(labels.pod_selector(name))
    )

    def observation(track: str) -> TrackObservation | None:
        dep = live.get(("Deployment", naming.deployment(name, track)))
        if dep is not None and not owned_by(dep, uid):
            dep = None
        version = None
        if plan is not None and (tp := plan.track(track)) is not None:
            version = tp.version
        elif dep is not None:
            version = (dep["metadata"].get("labels") or {}).get(labels.LABEL_VERSION)
        if dep is None and version is None:
            return None
        track_pods = [
            p for p in pods if (p["metadata"].get("labels") or {}).get(labels.LABEL_TRACK) == track
        ]
        return TrackObservation(version=version, deployment=dep, pods=track_pods)

    stable = observation("stable")
    canary = observation("canary")
    if plan is not None and plan.track("canary") is None:
        canary = None
    routed = (
        plan.canary_weight if plan is not None else (previous.get("canary") or {}).get("weight", 0)
    )
    status = build_status(
        name=name,
        namespace=namespace,
        generation=meta.get("generation", 1),
        stable=stable,
        canary=canary,
        routed_weight=routed,
        problems=out.problems,
        previous=previous,
        now=now,
        selector=labels.selector_string(labels.pod_selector(name)),
    )
    if status_changed(previous, status):
        patch = dict(status)
        for gone in ("stable", "canary"):
            if gone in previous and gone not in status:
                patch[gone] = None  # merge-patch null removes the field
        client.patch_status(DOCPARSER, namespace, name, patch)
        out.status_written = True
    return status

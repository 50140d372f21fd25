"""Decide: observed + desired -> the ordered writes of one pass, without I/O.

Pure, as KServe's reconcilers split it: ``decide`` takes the parsed DocParser, its revisions
(each pod template rendered and hashed once per pass), what it needs of the last status, and
the ``Observed`` children, and returns a ``Decision`` (the rollout step from
plan/rollout_planner.py, the named ``Action``s in the order that keeps capacity behind traffic, the
problems). controller/reconcile.py only performs the actions. Order: grow and create first, then
traffic objects, then shrink, then prune, so no moment routes to a revision that has not got its
pods.

A child is applied only when it is missing, lacks our field manager, carries a different hash
of the desired object or its live values differ on the fields we set (drift); ownership is
decided by the ownerReferences uid, never by labels alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pydantic

from docparser_operator.api import labels, naming
from docparser_operator.api.models import DocParser, DocParserSpec
from docparser_operator.core.plan import drain, sizing
from docparser_operator.core.plan import rollout_planner as rollout
from docparser_operator.core.plan.batch_pool import kept_size
from docparser_operator.core.plan.children import (
    CREATE_ONCE,
    Key,
    Observed,
    needs_apply,
    owned_by,
    prepare,
    revision_states,
    stays_mounted,
)
from docparser_operator.core.plan.idle import IdleStep
from docparser_operator.core.plan.problem import Problem
from docparser_operator.core.plan.target import desired as desired_rollout
from docparser_operator.core.render import RoleRevision, Target, render_target
from docparser_operator.core.status.route_verdict import route_verdict


def _pod_specs(spec: DocParserSpec) -> list[tuple[str, DocParserSpec]]:
    """(message prefix, spec) for each distinct pod spec: stable's, and the canary's when its
    runtime override changes what its pods run (a bigger batch may not fit the GPU)."""
    canary = spec.for_canary()
    return [("", spec)] + ([("canary: ", canary)] if canary is not spec else [])


def _problem_from_validation(exc: pydantic.ValidationError) -> Problem:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p not in ("spec",))
        parts.append(f"{where}: {err.get('msg')}" if where else str(err.get("msg")))
    return Problem("SpecInvalid", "invalid spec: " + "; ".join(parts))


def invalid(exc: pydantic.ValidationError) -> Decision:
    """The decision for a DocParser that does not parse: nothing to do but say why."""
    return Decision(target=None, problems=[_problem_from_validation(exc)])


Phase = Literal["grow", "traffic", "shrink", "prune"]
PHASES: tuple[Phase, ...] = ("grow", "traffic", "shrink", "prune")


@dataclass(frozen=True)
class Action:
    """One write: ``apply`` a rendered child, ``scale`` a previous revision's Deployment (its
    template is not ours to re-render), or ``prune`` a child no longer wanted."""

    verb: Literal["apply", "scale", "prune"]
    key: Key
    phase: Phase
    obj: dict[str, Any] | None = None  # apply: the object; scale: the merge patch
    uid: str = ""  # prune: delete precondition


@dataclass
class Decision:
    """What one pass must do, decided without I/O."""

    target: Target | None  # None: the spec is invalid (problems say why)
    actions: list[Action] = field(default_factory=list)
    conflicts: list[Key] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    drain: drain.DrainReport = field(default_factory=drain.DrainReport)


def _phase(obj: dict[str, Any], live: dict[str, Any] | None) -> Phase:
    if obj["kind"] in CREATE_ONCE:
        return "grow"  # the weights cache comes before the pods that mount it
    if obj["kind"] != "Deployment":
        return "grow" if obj["kind"] == "Service" and live is None else "traffic"
    want = obj["spec"].get("replicas", 1)
    have = ((live or {}).get("spec") or {}).get("replicas", 0) if live is not None else 0
    return "shrink" if want < have else "grow"


def _cluster_ip(observed: Observed, service: str, uid: str) -> str:
    """The ClusterIP of our live Service ``service`` ("" while it has none): what a pod
    reaches it by without cluster DNS (the shadow's copies, the front's held parses)."""
    live = observed.children.get(("Service", service))
    if live is None or not owned_by(live, uid):
        return ""
    ip = str((live.get("spec") or {}).get("clusterIP") or "")
    return ip if ip and ip != "None" else ""


def _order(action: Action) -> tuple[int, bool]:
    """Phases in order; within ``traffic`` the HTTPRoute first. A switch to ``router:
    gateway`` narrows the endpoint Service to one revision: the route must carry the split
    before that, or for a moment nothing routes to the canary's pods and the stable side alone
    stands behind the entry point."""
    return PHASES.index(action.phase), action.key[0] != "HTTPRoute"


def decide(
    model: DocParser,
    roles: tuple[RoleRevision, ...],
    observed: Observed,
    *,
    previous_weight: int,
    drains_since: Mapping[str, str] | None = None,
    canary_weight: int | None = None,
    now: str = "1970-01-01T00:00:00Z",
    mirror: bool = True,
    idle: IdleStep | None = None,
    batch_replicas: int | None = None,
) -> Decision:
    """observed + desired -> the ordered actions of this pass (pure). ``model``: the parsed
    DocParser (the controller parses it once per pass); ``roles``: its revisions with their
    pod templates, rendered and hashed once per pass (``render.roles_of``);
    ``previous_weight``: the weight routed so far (status.canary.weight); ``drains_since``:
    when each node's drain began (``drain.drains_since`` of status.drains); ``canary_weight``:
    the canary analysis' effective weight (analysis.py), which replaces spec.canary.weight;
    ``now`` dates the drains' deadlines (core/plan/drain.py); ``mirror``: False once the analysis
    failed (the shadow stops copying to that canary); ``idle``: the scale-to-zero decision
    (core/plan/idle.py), whose size replaces the spec's; ``batch_replicas``: the batch pool's size
    (core/plan/batch_pool.py; None: the live pool's, within spec.batch's bounds)."""
    uid = model.metadata.uid or ""
    tracks = roles
    drains = drain.plan_drain(
        observed.pods,
        observed.cordoned,
        {t.revision for t in tracks},
        drains_since or {},
        now=now,
        timeout_s=model.spec.rollout.drain_timeout_seconds,
    )
    size = idle.size if idle is not None and model.spec.replicas.idle_policy else None
    step = rollout.plan(
        desired_rollout(
            model, tracks, weight=canary_weight, leaving=dict(drains.leaving), size=size
        ),
        revision_states(observed, uid),
        previous_weight=previous_weight,
    )
    awake = size is None or idle is None or idle.awake
    name = model.metadata.name
    plan = Target(
        model,
        tracks,
        step,
        drains,
        mirror=mirror,
        awake=awake,
        canary_address=_cluster_ip(observed, naming.canary_service(name), uid),
        serving_address=_cluster_ip(observed, naming.serving_service(name), uid),
        batch_replicas=kept_size(model.spec.batch, observed, name, uid, batch_replicas),
        shadow_config_live=("ConfigMap", naming.shadow_config(name)) in observed.children,
    )
    decision = Decision(target=plan)
    decision.drain = drain.report(drains, step, observed.pods, observed.cordoned or frozenset())
    for prefix, track_spec in _pod_specs(model.spec):
        gpu = sizing.gpu_memory_problem(track_spec)
        if gpu is not None:
            decision.problems.append(Problem(gpu[0], prefix + gpu[1]))
    desired = prepare(render_target(plan), model.metadata)
    wanted = {(c["kind"], c["metadata"]["name"]) for c in desired}
    live = observed.children
    for obj in desired:
        key = (obj["kind"], obj["metadata"]["name"])
        current = live.get(key)
        if current is not None and not owned_by(current, uid):
            decision.conflicts.append(key)
            continue
        if current is not None and key[0] in CREATE_ONCE:
            claim = live.get(("PersistentVolumeClaim", key[1]))
            if key[0] == "Job" and claim is None and owned_by(current, uid):
                # The claim was deleted (to refill, or by mistake): its Job's success speaks
                # of a volume that is gone. Delete it; the next pass fills the new claim.
                uid_ = current["metadata"]["uid"]
                decision.actions.append(Action("prune", key, "prune", uid=uid_))
            continue  # otherwise immutable once created (render/weights_cache.py)
        if needs_apply(obj, current):
            decision.actions.append(Action("apply", key, _phase(obj, current), obj=obj))
        if current is not None and labels.LABEL_RETIRED in (
            current["metadata"].get("labels") or {}
        ):
            patch: dict[str, Any] = {"metadata": {"labels": {labels.LABEL_RETIRED: None}}}
            decision.actions.append(Action("scale", key, "grow", obj=patch))
    kept = set(step.keep)
    generation = str(model.metadata.generation or 1)
    claims_in_use: set[str] = set()  # cache claims of the revisions that stay (below)
    for key, obj in live.items():
        if key in wanted or not owned_by(obj, uid) or key[0] in CREATE_ONCE:
            continue
        revision = (obj["metadata"].get("labels") or {}).get(labels.LABEL_REVISION)
        revision_step = step.get(revision) if key[0] == "Deployment" else None
        if revision_step is not None and (revision_step.replicas > 0 or revision in kept):
            claims_in_use |= stays_mounted(obj)
            have = (obj.get("spec") or {}).get("replicas", 1)
            live_labels = obj["metadata"].get("labels") or {}
            retired = live_labels.get(labels.LABEL_RETIRED) or generation
            if (
                have != revision_step.replicas
                or live_labels.get(labels.LABEL_TRACK) != revision_step.role
                or labels.LABEL_RETIRED not in live_labels
            ):
                patch = {
                    "metadata": {
                        "labels": {
                            labels.LABEL_TRACK: revision_step.role,
                            labels.LABEL_RETIRED: retired,
                        }
                    },
                    "spec": {"replicas": revision_step.replicas},
                }
                phase: Phase = "shrink" if revision_step.replicas < have else "grow"
                decision.actions.append(Action("scale", key, phase, obj=patch))
            continue
        decision.actions.append(Action("prune", key, "prune", uid=obj["metadata"]["uid"]))
    # The weights cache follows the revisions: a version's claim and Job stay while a revision
    # mounting it stays (the previous stable for a rollback, one still draining), else go.
    for key, obj in live.items():
        stale = key[0] in CREATE_ONCE and key not in wanted and key[1] not in claims_in_use
        if stale and owned_by(obj, uid):
            decision.actions.append(Action("prune", key, "prune", uid=obj["metadata"]["uid"]))
    decision.actions.sort(key=_order)
    decision.actions = _hold_until_observed(model, live, decision.actions)
    decision.problems.extend(conflict_problem(key) for key in decision.conflicts)
    return decision


def _hold_until_observed(
    model: DocParser, live: dict[Key, dict[str, Any]], actions: list[Action]
) -> list[Action]:
    """Make-before-break through a Gateway: no Deployment shrinks or goes while the route's
    controller has not observed its current generation (or this pass rewrites the route), as
    the data plane may still send traffic by the previous weights. The route's status change
    wakes the next pass (it is watched), which does what was held (core/status/route_verdict.py)."""
    gateway = model.spec.traffic.gateway_ref if model.spec.traffic.router == "gateway" else None
    if gateway is None:
        return actions
    key = ("HTTPRoute", naming.httproute(model.metadata.name))
    rewritten = any(a.key == key and a.verb == "apply" for a in actions)
    verdict = route_verdict(live.get(key), gateway)
    if not rewritten and verdict is not None and verdict.judged:
        return actions
    return [a for a in actions if a.key[0] != "Deployment" or a.phase not in ("shrink", "prune")]


def conflict_problem(key: Key) -> Problem:
    kind, child = key
    return Problem(
        "ChildConflict", f"{kind} {child} exists but is not owned by this DocParser; left untouched"
    )

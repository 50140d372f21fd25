"""The status one pass leads to: what the executor left, as conditions and track views.

Pure (no client): controller/reporting.py writes it, and only when it differs from the live
status, so the no-op resync writes nothing. The conditions themselves are core/status/conditions.py.
"""

from __future__ import annotations

from typing import Any

from docparser_operator.analysis.walk import AnalysisState
from docparser_operator.api import labels, naming
from docparser_operator.api.models import ObjectMeta
from docparser_operator.api.status_models import DocParserStatus, RolloutStatus, ShadowStatus
from docparser_operator.core.plan import rollout_planner as rollout
from docparser_operator.core.plan.children import Key, owned_by
from docparser_operator.core.render import Target
from docparser_operator.core.render.shadow import shadow_config
from docparser_operator.core.status.capacity_status import with_capacity
from docparser_operator.core.status.conditions import RoleView, TrackObservation, build_status
from docparser_operator.core.status.outcome import Outcome
from docparser_operator.core.status.route_verdict import route_verdict
from docparser_operator.core.status.weights_cache_status import CacheVerdict


def pass_status(
    owner: ObjectMeta,
    plan: Target | None,
    live: dict[Key, dict[str, Any]],
    pods: list[dict[str, Any]],
    out: Outcome,
    now: str,
    cache: CacheVerdict | None = None,
) -> DocParserStatus:
    """The status this pass leads to (pure: the write is controller/reporting.py). ``owner``:
    the DocParser's parsed metadata (its name, namespace, uid and generation); the previous
    status is the typed one the pass parsed (``out.previous_status``)."""
    name, namespace, uid = owner.name, owner.namespace, owner.uid or ""
    previous = out.previous_status

    # The revision that has served as stable (status.stable.servedSince): its pods' restarts
    # are tolerated (core/status/conditions.py); a revision that never served gets none.
    before = previous.stable
    serving = before.revision if before is not None and before.served_since else None

    def observation(revision: str, version: str | None) -> TrackObservation:
        dep = live.get(("Deployment", naming.revision_name(name, revision)))
        if dep is not None and not owned_by(dep, uid):
            dep = None
        mine = [
            p
            for p in pods
            if (p["metadata"].get("labels") or {}).get(labels.LABEL_REVISION) == revision
            and not p["metadata"].get("deletionTimestamp")
        ]
        return TrackObservation(
            version=version, deployment=dep, pods=mine, serving=revision == serving
        )

    stable = canary = None
    rolling: list[str] = []
    ready_serving = 0
    routed, requested = (previous.canary.weight if previous.canary else None) or 0, 0
    rollout_status = None
    route_gate = None
    if plan is not None:
        step = plan.rollout
        versions = {t.revision: t.version for t in plan.roles}
        for dep in live.values():
            labels_ = dep["metadata"].get("labels") or {}
            if dep.get("kind") == "Deployment" and labels_.get(labels.LABEL_REVISION):
                versions.setdefault(
                    labels_[labels.LABEL_REVISION], labels_.get(labels.LABEL_VERSION)
                )
        stable_tp, canary_tp = plan.role("stable"), plan.role("canary")
        stable_side = {r.revision: r.ready for r in step.role("stable") if r.serving}
        serving_stable = max(
            stable_side,
            key=lambda r: (stable_side[r], stable_tp is not None and r == stable_tp.revision),
            default=None,
        )
        if serving_stable is None and stable_tp is not None:
            serving_stable = stable_tp.revision
        if stable_tp is not None:
            stable = RoleView(
                revision=serving_stable,
                version=versions.get(serving_stable) if serving_stable else None,
                ready=sum(r.ready for r in step.role("stable")),
                observation=observation(stable_tp.revision, stable_tp.version),
            )
        if canary_tp is not None:
            c_step = step.get(canary_tp.revision)
            canary = RoleView(
                revision=canary_tp.revision,
                version=canary_tp.version,
                ready=c_step.ready if c_step else 0,
                observation=observation(canary_tp.revision, canary_tp.version),
            )
        asked_before = previous.canary.requested_weight if previous.canary else None
        rolling = _rolling(
            step,
            was_rolling=_condition_true(previous, "Progressing"),
            weight_asked_before=asked_before == step.requested_weight,
            waking=out.idle is not None and out.idle.state == "Waking",
        )
        if out.analysis is not None and out.analysis.phase in ("Progressing", "Paused"):
            rolling.append(f"canary analysis: {out.analysis.message}")
        rolling.extend(out.drain_waits)
        ready_serving = step.ready_serving
        routed, requested = step.canary_weight, step.requested_weight
        route_gate = _route_gate(plan, live, rolling)
        rollout_status = RolloutStatus(size=step.size, pods=step.pods, max_surge=step.max_surge)
    status = build_status(
        name=name,
        namespace=namespace,
        generation=owner.generation if owner.generation is not None else 1,
        stable=stable,
        canary=canary,
        routed_weight=routed,
        requested_weight=requested,
        ready_serving=ready_serving,
        min_ready=plan.resource.spec.replicas.min if plan is not None else 1,
        rolling=rolling,
        problems=out.problems,
        previous=previous,
        now=now,
        selector=labels.selector_string(labels.pod_selector(name)),
        rollout=rollout_status,
        weights_cached=(cache.cached, cache.reason, cache.message) if cache else None,
        analysis=out.analysis.to_status() if out.analysis is not None else None,
        route_gate=route_gate,
        drains=out.drains,
        draining=bool(out.drain_waits),
        shadow=shadow_status(plan, previous, out.analysis) if plan is not None else None,
        at_zero=_at_zero(name, live, out),
        scale_to_zero=out.idle.to_status() if out.idle is not None else None,
        schedule=out.schedule.to_status() if out.schedule is not None else None,
    )
    if (
        out.capacity is not None
    ):  # status.capacity and CapacityAdvice: core/status/capacity_status.py
        spec = plan.resource.spec if plan is not None else None
        generation = status.observed_generation or 1
        status = with_capacity(status, out.capacity, spec, previous, generation, now)
    if out.batch is not None:  # status.batch: core/plan/batch_pool.py (no condition changes)
        status = status.model_copy(update={"batch": out.batch.status})
    return status


def shadow_status(
    plan: Target, previous: DocParserStatus, walk: AnalysisState | None = None
) -> ShadowStatus | None:
    """``status.canary.shadow``: the configuration rendered into ``<name>-shadow`` (what the
    stable pods are told: on or off, the share, each pod's page budget) and the comparison
    figures the analysis measured last: this pass's, else those already in status while the
    canary revision is the same (most passes read no metrics)."""
    spec = plan.resource.spec
    canary = plan.role("canary")
    if spec.canary is None or spec.canary.shadow is None or canary is None:
        return None
    config = shadow_config(plan)
    enabled = bool(config["enabled"])
    told = {
        "enabled": enabled,
        "percent": spec.canary.shadow.percent,
        "pod_pages_per_minute": int(config["maxPagesPerMinute"]) if enabled else None,
    }
    before = previous.canary
    measured = ShadowStatus()
    if walk is not None and walk.figures is not None:
        measured = walk.figures.to_status()
    elif before is not None and before.revision == canary.revision and before.shadow is not None:
        measured = before.shadow
    return measured.model_copy(update=told)


def _at_zero(
    name: str, live: dict[Key, dict[str, Any]], out: Outcome
) -> tuple[bool, str, str] | None:
    """(Ready, reason, message) of a DocParser at or waking from zero: it serves through its
    front (core/plan/idle.py) as long as the front has a Ready pod."""
    step = out.idle
    if step is None or step.state == "Awake":
        return None
    front = naming.front(name)
    ready = ((live.get(("Deployment", front)) or {}).get("status") or {}).get("readyReplicas")
    if not ready:
        return (
            False,
            "FrontNotReady",
            f"no runtime pod is Ready and the front {front} has none either (it is Ready once "
            "it reaches the DocParser's Redis)",
        )
    if step.state == "Idle":
        return True, "Idle", f"idle since {step.since}: {step.reason}"
    return True, "Waking", f"since {step.since}: {step.reason}; the front holds requests meanwhile"


def _route_gate(
    plan: Target, live: dict[Key, dict[str, Any]], rolling: list[str]
) -> tuple[str, str] | None:
    """(reason, message) that keeps Ready False for ``router: gateway`` until the Gateway's
    controller has accepted the route for our parent, or while it refuses the current one; a
    generation not judged yet is a rollout step still in flight (added to ``rolling``)."""
    gateway = plan.resource.spec.traffic.gateway_ref
    if plan.resource.spec.traffic.router != "gateway" or gateway is None:
        return None
    route = live.get(("HTTPRoute", naming.httproute(plan.name)))
    verdict = route_verdict(route, gateway)
    if verdict is None:
        return "AwaitingRouteVerdict", "HTTPRoute not created yet"
    if verdict.waiting:
        rolling.append(verdict.waiting)
    if verdict.refusal is not None:
        return "RouteNotAccepted", f"Gateway {verdict.parent}: {verdict.refusal}"
    if not verdict.accepted_ever:
        return "AwaitingRouteVerdict", verdict.waiting or "HTTPRoute not accepted yet"
    return None


def _condition_true(status: DocParserStatus, ctype: str) -> bool:
    return any(c.type == ctype and c.status == "True" for c in status.conditions)


def _rolling(
    step: rollout.Rollout,
    *,
    was_rolling: bool,
    weight_asked_before: bool = False,
    waking: bool = False,
) -> list[str]:
    """What a spec-driven change still waits for (empty once settled). An autoscaler adding
    pods to a serving revision is not a rollout, so it is not listed, unless a rollout is
    under way: then it lasts until every spec revision has all its pods Ready. The same for
    the split: with ``router: service`` new pods of one track Ready before the other's move
    the effective weight for a moment; a weight that was already asked for at rest
    (``weight_asked_before``) is no rollout, so GitOps tools keep reading Current. Nor is
    a wake from zero (``waking``): its pods starting are the autoscaler's kind of change."""
    waits = []
    if was_rolling:
        waits = [
            f"revision {r.revision} ({r.role}): {r.ready}/{r.target} ready"
            for r in step.revisions
            if r.desired and r.ready < r.target
        ]
    for r in step.revisions:
        if not r.desired and r.replicas > 0:
            waits.append(f"revision {r.revision} ({r.role}, leaving): {r.replicas} pod(s)")
        elif r.desired and r.target > 0 and r.ready == 0 and not was_rolling and not waking:
            waits.append(f"revision {r.revision} ({r.role}): 0/{r.target} ready")
        elif r.desired and r.replicas > r.target + r.drain:
            waits.append(f"revision {r.revision} ({r.role}): {r.replicas} -> {r.target} pods")
    if step.canary_weight != step.target_weight and (was_rolling or not weight_asked_before):
        waits.append(f"canary traffic {step.canary_weight}% -> {step.target_weight}%")
    return waits

"""The one level-triggered reconcile: observe, decide (pure), act, report.

Every trigger (create, update, resume, the drift resync, a child Deployment changing) calls
``reconcile`` with the current DocParser; it never looks at what changed, only at what is
desired now versus what is live now. That is what makes GitOps rollbacks, operator restarts
mid-way and lost events harmless: the next pass converges from whatever state it finds.

Decide, then act (as KServe's reconcilers do): ``observe`` reads the cluster into an
``Observed``; ``decide`` is pure and returns a ``Decision`` (the rollout step from rollout.py,
the named ``Action``s in the order that keeps capacity behind traffic, the problems); the
executor only performs the actions. Order: grow and create first, then traffic objects,
then shrink, then prune, so no moment routes to a revision that has not got its pods.

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
from dataclasses import dataclass, field
from typing import Any, Literal

import pydantic

from docparser_operator.analysis import run as analysis_run
from docparser_operator.analysis import walk as analysis_module
from docparser_operator.analysis.run import AnalysisMemory
from docparser_operator.analysis.sources import golden
from docparser_operator.api import labels
from docparser_operator.api.models import DocParser, DocParserSpec
from docparser_operator.controller.reporting import write_status
from docparser_operator.core import rollout, sizing
from docparser_operator.core.children import (
    CREATE_ONCE,
    Key,
    Observed,
    needs_apply,
    owned_by,
    prepare,
    revision_states,
    stays_mounted,
)
from docparser_operator.core.diagnose import diagnose
from docparser_operator.core.render import Plan, render_plan, tracks_of
from docparser_operator.core.render.plan import desired as desired_rollout
from docparser_operator.core.render.weights_cache import cached_weights
from docparser_operator.core.status import (
    Problem,
)
from docparser_operator.core.weights_cache_status import CacheVerdict, weights_cache_verdict
from docparser_operator.kube.client import ApiError, KubeClient, ref_for
from docparser_operator.kube.observer import ListObserver, Observer


@dataclass
class Outcome:
    """What one pass did (for events, logs, tests and the benchmark)."""

    name: str = ""
    applied: list[Key] = field(default_factory=list)
    scaled: list[Key] = field(default_factory=list)
    pruned: list[Key] = field(default_factory=list)
    conflicts: list[Key] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict[str, Any])
    previous_status: dict[str, Any] = field(default_factory=dict[str, Any])
    status_written: bool = False
    rollout: rollout.Rollout | None = None
    created_revisions: list[str] = field(default_factory=list)
    body: dict[str, Any] | None = None  # the DocParser as the status write returned it
    analysis: analysis_module.AnalysisState | None = None  # the canary analysis after the pass
    wake_in_s: float | None = None  # a pass is due then (the analysis window's end)
    written: dict[Key, dict[str, Any]] = field(default_factory=dict[Key, Any])  # as returned
    deleted: dict[Key, str] = field(default_factory=dict[Key, str])  # pruned: their uids

    @property
    def spec_invalid(self) -> bool:
        return any(p.reason == "SpecInvalid" for p in self.problems)


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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


def _apply_problem(key: Key, exc: ApiError) -> Problem:
    """A child the API server cannot take: its API is missing (the Gateway API CRDs are not
    installed) or it rejects the object. Reported as Degraded; the other children proceed."""
    kind, name = key
    if exc.status == 403:
        return Problem(
            "Forbidden",
            f"{kind} {name}: the operator's service account may not write it ({exc.message}); "
            "grant the verbs the chart's ClusterRole lists",
        )
    if exc.status == 404:
        return Problem(
            "MissingAPI", f"{kind} {name}: the cluster does not serve {kind} ({exc.message})"
        )
    return Problem("ChildRejected", f"{kind} {name} rejected by the API server: {exc.message}")


# decide (pure) ----------------------------------------------------------------------------------
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

    plan: Plan | None
    actions: list[Action] = field(default_factory=list)
    conflicts: list[Key] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def _phase(obj: dict[str, Any], live: dict[str, Any] | None) -> Phase:
    if obj["kind"] in CREATE_ONCE:
        return "grow"  # the weights cache comes before the pods that mount it
    if obj["kind"] != "Deployment":
        return "grow" if obj["kind"] == "Service" and live is None else "traffic"
    want = obj["spec"].get("replicas", 1)
    have = ((live or {}).get("spec") or {}).get("replicas", 0) if live is not None else 0
    return "shrink" if want < have else "grow"


def _order(action: Action) -> tuple[int, bool]:
    """Phases in order; within ``traffic`` the HTTPRoute first. A switch to ``router:
    gateway`` narrows the endpoint Service to one revision: the route must carry the split
    before that, or for a moment nothing routes to the canary's pods and the stable side alone
    stands behind the entry point."""
    return PHASES.index(action.phase), action.key[0] != "HTTPRoute"


def decide(
    resource: dict[str, Any],
    observed: Observed,
    *,
    previous_weight: int,
    canary_weight: int | None = None,
) -> Decision:
    """observed + desired -> the ordered actions of this pass (pure). ``canary_weight``: the
    canary analysis' effective weight (analysis.py), which replaces spec.canary.weight."""
    meta = resource["metadata"]
    uid = meta["uid"]
    try:
        model = DocParser.from_resource(resource)
    except pydantic.ValidationError as exc:
        return Decision(plan=None, problems=[_problem_from_validation(exc)])
    tracks = tracks_of(model)
    step = rollout.plan(
        desired_rollout(model, tracks, weight=canary_weight),
        revision_states(observed, uid),
        previous_weight=previous_weight,
    )
    plan = Plan(model, tracks, step)
    decision = Decision(plan=plan)
    for prefix, track_spec in _pod_specs(model.spec):
        gpu = sizing.gpu_memory_problem(track_spec)
        if gpu is not None:
            decision.problems.append(Problem(gpu[0], prefix + gpu[1]))
    desired = prepare(render_plan(plan), resource)
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
    generation = str(meta.get("generation", 1))
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
    decision.problems.extend(conflict_problem(key) for key in decision.conflicts)
    return decision


def conflict_problem(key: Key) -> Problem:
    kind, child = key
    return Problem(
        "ChildConflict", f"{kind} {child} exists but is not owned by this DocParser; left untouched"
    )


# act ------------------------------------------------------------------------------------------
def _taken(client: KubeClient, namespace: str, obj: dict[str, Any]) -> bool:
    """Whether a child the observed view lacks exists after all, owned by someone else.

    The view comes from watches, which lag: an object created a moment before its DocParser
    may not be indexed yet. A forced server-side apply on it would not fail but take it over
    (our ownerReference, labels and fields on someone's Service), so a would-be create reads
    the object first. What remains is the round trip between this read and the apply."""
    kind, name = obj["kind"], obj["metadata"]["name"]
    owner = obj["metadata"]["ownerReferences"][0]["uid"]
    try:
        existing = client.get(ref_for(kind), namespace, name)
    except ApiError as exc:
        if exc.status != 403:
            raise
        return False  # may not read it: the apply says so (reported as Forbidden)
    return existing is not None and not owned_by(existing, owner)


def execute(
    client: KubeClient, namespace: str, decision: Decision, observed: Observed, out: Outcome
) -> dict[Key, dict[str, Any]]:
    """Perform the actions in order; returns the live children after them."""
    live = dict(observed.children)
    for action in decision.actions:
        kind, name = action.key
        if action.verb == "apply":
            assert action.obj is not None
            if action.key not in observed.children and _taken(client, namespace, action.obj):
                out.conflicts.append(action.key)
                out.problems.append(conflict_problem(action.key))
                continue
            try:
                live[action.key] = out.written[action.key] = client.apply(action.obj, force=True)
            except ApiError as exc:
                if exc.status not in (403, 404, 422):
                    raise  # transient or unexpected: the caller retries with backoff
                out.problems.append(_apply_problem(action.key, exc))
                continue
            out.applied.append(action.key)
            if kind == "Deployment" and action.key not in observed.children:
                revision = action.obj["metadata"]["labels"].get(labels.LABEL_REVISION, "")
                out.created_revisions.append(revision)
        elif action.verb == "scale":
            assert action.obj is not None
            live[action.key] = client.patch(ref_for(kind), namespace, name, action.obj)
            out.written[action.key] = live[action.key]
            out.scaled.append(action.key)
        else:
            client.delete(ref_for(kind), namespace, name, uid=action.uid)
            out.deleted[action.key] = action.uid
            out.pruned.append(action.key)
            live.pop(action.key, None)
    return live


def reconcile(
    client: KubeClient,
    resource: dict[str, Any],
    *,
    now: str | None = None,
    observer: Observer | None = None,
    analysis: AnalysisMemory | None = None,
) -> Outcome:
    """Move the children of ``resource`` one safe step towards the spec and write its status.

    ``observer`` reads the children and pods (the operator's watch-backed indexes; listing by
    default) and is told what this pass wrote; ``analysis`` keeps the canary analysis'
    window starts between passes (analysis_run.py)."""
    now = now or now_rfc3339()
    meta = resource["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    previous = copy.deepcopy(resource.get("status") or {})
    out = Outcome(name=name, previous_status=previous)
    observer = observer or ListObserver(client)
    observed = observer(namespace, name)
    previous_weight = (previous.get("canary") or {}).get("weight") or 0
    walk = _analysis_begin(resource, previous)
    decision = decide(
        resource,
        observed,
        previous_weight=previous_weight,
        canary_weight=walk.weight if walk is not None else None,
    )
    planned = walk
    if walk is not None and decision.plan is not None:
        step = decision.plan.rollout
        walk = analysis_run.finish(
            analysis or AnalysisMemory(),
            decision.plan.resource,
            walk,
            {str(t.track): t.revision for t in decision.plan.tracks},
            observed.pods,
            serving=step.canary_weight == step.target_weight and step.target_weight > 0,
            now=now,
            documents=lambda ns, config_map: golden.load(client, ns, config_map),
        )
        if walk.phase == "Failed":
            out.problems.append(Problem(walk.reason or "CanaryFailed", walk.message))
    out.analysis = walk
    if walk is not None and planned is not None and walk.weight != planned.weight:
        out.wake_in_s = 0.0  # this pass planned the old weight: the next one routes the new
    elif walk is not None and walk.phase == "Progressing" and walk.window_start:
        assert decision.plan is not None and decision.plan.resource.spec.canary is not None
        config = decision.plan.resource.spec.canary.analysis
        assert config is not None
        # Nothing else wakes the operator when a quiet window ends: ask for a pass then
        # (status times have whole seconds: one more so the window is surely due).
        left = config.interval_seconds - analysis_module.elapsed(walk.window_start, now)
        out.wake_in_s = max(0.0, left) + 1.0
    out.problems.extend(
        Problem(
            "Forbidden",
            f"{kind}: the operator's service account may not list it; grant the verbs the "
            "chart's ClusterRole lists",
        )
        for kind in observed.forbidden
    )
    out.problems.extend(decision.problems)
    out.conflicts.extend(decision.conflicts)
    try:
        live = execute(client, namespace, decision, observed, out)
    finally:  # even when a write failed half-way: the ones before it happened
        observer.remember(namespace, name, out.written, out.deleted)
    cache: CacheVerdict | None = None
    if decision.plan is not None:
        out.rollout = decision.plan.rollout
        revisions = {t.revision for t in decision.plan.tracks}
        out.problems.extend(diagnose(decision.plan.resource.spec, revisions, live, observed.pods))
        jobs = {n: obj for (kind, n), obj in live.items() if kind == "Job"}
        spec = decision.plan.resource.spec
        cache = weights_cache_verdict(
            spec, name, cached_weights(decision.plan), jobs, observed.pods
        )
        if cache.problem is not None:
            out.problems.append(cache.problem)
    out.status = write_status(client, resource, decision.plan, live, observed.pods, out, now, cache)
    return out


def _analysis_begin(
    resource: dict[str, Any], previous: dict[str, Any]
) -> analysis_module.AnalysisState | None:
    """The canary analysis' state to plan with (None without one, or with an invalid spec:
    decide reports that)."""
    try:
        model = DocParser.from_resource(resource)
    except pydantic.ValidationError:
        return None
    revisions: dict[str, str] = {t.track: t.revision for t in tracks_of(model)}
    return analysis_run.begin(model, revisions, previous)

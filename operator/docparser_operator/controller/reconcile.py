"""The one level-triggered reconcile: observe, decide (pure), act, report.

Every trigger (create, update, resume, the drift resync, a child Deployment changing) calls
``reconcile`` with the current DocParser; it never looks at what changed, only at what is
desired now versus what is live now. That is what makes GitOps rollbacks, operator restarts
mid-way and lost events harmless: the next pass converges from whatever state it finds.

Decide, then act (as KServe's reconcilers do): the observer (kube/observer.py) reads the
cluster into an ``Observed``; ``decide`` (core/decide.py) is pure and returns a ``Decision``;
``execute`` here only performs its actions, in the order the decision gives; the status is
built by core/status/report.py and written by controller/reporting.py.

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
from typing import Any

import pydantic

from docparser_operator.analysis import walk as analysis_module
from docparser_operator.api import labels
from docparser_operator.api.kinds import ref_for
from docparser_operator.api.models import DocParser, ObjectMeta
from docparser_operator.api.status_models import DocParserStatus
from docparser_operator.controller import features
from docparser_operator.controller.batch_pool import BatchArgs, batch_step
from docparser_operator.controller.capacity import CapacityArgs, capacity_pass
from docparser_operator.controller.credential import CredentialMemory, ensure_internal_secret
from docparser_operator.controller.reporting import write_status
from docparser_operator.core.decide import Decision, conflict_problem, decide, invalid
from docparser_operator.core.plan.children import Key, Observed, needs_read, owned_by
from docparser_operator.core.plan.drain import drains_since
from docparser_operator.core.plan.idle import IdleMemory, epoch
from docparser_operator.core.plan.problem import Problem
from docparser_operator.core.plan.refusals import (
    RefusalMemory,
    Refused,
    refusal_code,
    refused_problem,
)
from docparser_operator.core.plan.schedule import raised_model, schedule_step
from docparser_operator.core.render import roles_of
from docparser_operator.core.render.weights_cache import cached_weights
from docparser_operator.core.status.diagnose import diagnose
from docparser_operator.core.status.outcome import Outcome
from docparser_operator.core.status.weights_cache_status import CacheVerdict, weights_cache_verdict
from docparser_operator.kube import predecessors
from docparser_operator.kube.client import ApiError, KubeClient
from docparser_operator.kube.observer import ListObserver, Observer
from docparser_operator.providers import analysis_run
from docparser_operator.providers import sources as analysis_sources
from docparser_operator.providers.activity import ActivitySource
from docparser_operator.providers.analysis_run import AnalysisMemory
from docparser_operator.providers.base import Sources
from docparser_operator.providers.pods import Skipped


def instant(now: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(now.replace("Z", "+00:00"))


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _apply_problem(key: Key, exc: ApiError) -> Problem | None:
    """A child the API server refuses (core/plan/refusals.py): our RBAC lacks a verb, its API is
    missing (the Gateway API CRDs are not installed), or a quota, an IP range or an admission
    policy refuses it. Reported as Degraded; the other children proceed. None: not a refusal
    (server trouble, throttling, a conflict), the caller retries."""
    kind, name = key
    code = refusal_code(exc.status, exc.message)
    if code == "Forbidden":
        return Problem(
            "Forbidden",
            f"{kind} {name}: the operator's service account may not write it ({exc.message}); "
            "grant the verbs the chart's ClusterRole lists",
        )
    if code == "NotFound":
        return Problem(
            "MissingAPI", f"{kind} {name}: the cluster does not serve {kind} ({exc.message})"
        )
    return None if code is None else refused_problem(key, exc.status, code)


def _taken(client: KubeClient, namespace: str, obj: dict[str, Any]) -> bool:
    """Whether a child the observed view lacks exists after all, owned by someone else.

    The view comes from label-filtered watches, which lag and never show an unlabelled
    object: one created a moment before its DocParser, or someone's own Service of that name,
    may be missing from it. A forced server-side apply on it would not fail but take it over
    (our ownerReference, labels and fields on someone's Service), so a would-be create is an
    apply that only creates (``KubeClient.apply_new``: one request when, as nearly always,
    none exists), and only when one exists is it read here, unless the observation just read
    it by name or its name carries its content's hash (core/plan/children.needs_read). What
    remains is the round trip between this read and the forced apply."""
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
    client: KubeClient,
    namespace: str,
    decision: Decision,
    observed: Observed,
    out: Outcome,
    refused: Refused | None = None,
) -> dict[Key, dict[str, Any]]:
    """Perform the actions in order; returns the live children after them. A child the API
    server refused is not tried again (not even read) until its backoff is over: the pass
    reports the refusal it remembers (``refused``; default: none remembered)."""
    live = dict(observed.children)
    for action in decision.actions:
        kind, name = action.key
        if action.verb == "apply":
            assert action.obj is not None
            held = refused.held(action.key) if refused is not None else None
            if held is not None:
                out.problems.append(held)
                continue
            fresh = needs_read(action.obj, observed)  # the view may lack a same-named one
            try:
                if fresh:  # create it unless one exists; read it only then (_taken)
                    applied = client.apply_new(action.obj)
                    if applied is None and not _taken(client, namespace, action.obj):
                        applied = client.apply(action.obj, force=True)
                else:
                    applied = client.apply(action.obj, force=True)
            except ApiError as exc:
                problem = _apply_problem(action.key, exc)
                if problem is None:
                    raise  # transient or unexpected: the caller retries with backoff
                out.problems.append(problem)
                if refused is not None:
                    refused.refused(action.key, problem)
                continue
            if applied is None:  # someone else's object of that name: left alone
                out.conflicts.append(action.key)
                out.problems.append(conflict_problem(action.key))
                continue
            live[action.key] = out.written[action.key] = applied
            if refused is not None:
                refused.accepted(action.key)
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
    sources: Sources | None = None,
    credentials: CredentialMemory | None = None,
    idle: IdleMemory | None = None,
    activity: ActivitySource | None = None,
    poll_s: float = 5.0,
    skipped: Skipped | None = None,
    refusals: RefusalMemory | None = None,
    capacity: CapacityArgs | None = None,
    batch: BatchArgs | None = None,
) -> Outcome:
    """Move the children of ``resource`` one safe step towards the spec and write its status.

    ``observer`` reads the children and pods (the operator's watch-backed indexes; listing by
    default) and is told what this pass wrote; ``analysis`` keeps the canary analysis'
    window starts between passes (analysis_run.py); ``sources`` is what it may read (the
    operator's, from its settings; default: pods only and the default golden sources);
    ``credentials``: the DocParsers whose internal token Secret this run created or found
    (default: none, so the pass creates it or learns that it exists); ``idle`` keeps what
    scale to zero read of each DocParser, ``activity`` reads it (the pods' and the front's
    /metrics), at most every ``poll_s`` (core/plan/idle.py). Only the pods of the DocParser's own
    ReplicaSets are read (``readable_pods``); ``skipped`` counts the others (the operator's
    metric; default: not counted). ``refusals`` keeps the children the API server refused and
    their backoff between passes (core/plan/refusals.py; default: none, every pass tries them).
    ``batch``: spec.batch's backlog readings and source (controller/batch_pool.py; default:
    none, the pool keeps its size).

    One typed pass: the resource is parsed here once (``parse``); the typed DocParser, with
    its typed status, and its revisions (each pod template rendered and hashed once,
    ``render.roles_of``) are what every later step reads."""
    now = now or now_rfc3339()
    meta = resource["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    live_status = copy.deepcopy(resource.get("status") or {})  # the write's patch is against it
    parsed = parse(resource)
    out = Outcome(name=name, previous_status=typed_status(parsed, live_status))
    observer = observer or ListObserver(client)
    # new: no pass has reported on it (its children read by name are created unread)
    observed = observer(namespace, name, new=not out.previous_status.observed_generation)
    observed = predecessors.confirmed(client, namespace, name, meta.get("uid") or "", observed)
    walk = None
    if isinstance(parsed, pydantic.ValidationError):
        # The schedule's window still shows when only the rest of the spec is invalid.
        out.schedule = features.resource_schedule(resource, instant(now))
        owner = ObjectMeta.model_construct(
            name=name, namespace=namespace, uid=meta.get("uid"), generation=meta.get("generation")
        )
        decision = invalid(parsed)
    else:
        # The schedule's open windows raise replicas.min/max for this pass only
        out.schedule = schedule_step(parsed.spec.replicas, instant(now))
        model = raised_model(parsed, out.schedule)
        owner = model.metadata
        roles = roles_of(model)  # every revision's pod template, rendered and hashed once
        walk = features.analysis_begin(model, roles)
        out.idle = features.idle_step(
            model,
            walk,
            out.schedule,
            observed,
            idle or IdleMemory(),
            activity,
            now=now,
            poll_s=poll_s,
            skipped=skipped,
        )
        if batch is not None:  # spec.batch: the pool's size from the backlog, status.batch
            out.batch = batch_step(model, observed, batch, now=now, skipped=skipped)
        status = model.status
        routed = status.canary.weight if status is not None and status.canary else None
        decision = decide(
            model,
            roles,
            observed,
            previous_weight=routed or 0,
            drains_since=drains_since(status.drains if status is not None else None),
            canary_weight=walk.weight if walk is not None else None,
            now=now,
            mirror=walk is None or walk.phase != "Failed",
            idle=out.idle,
            batch_replicas=out.batch.replicas if out.batch is not None else None,
        )
    planned = walk
    if walk is not None and decision.target is not None:
        step = decision.target.rollout
        sources = sources or analysis_sources.guarded((), analysis_sources.DEFAULT_GOLDEN)
        out.problems.extend(
            Problem("SourceNotAllowed", reason)
            for reason in analysis_run.refusals(sources, decision.target.resource)
        )
        readable = features.readable_of(observed, owner.uid or "", skipped)
        walk = analysis_run.finish(
            analysis or AnalysisMemory(),
            sources,
            decision.target.resource,
            walk,
            {str(t.role): t.revision for t in decision.target.roles},
            readable.pods,
            serving=step.canary_weight == step.target_weight and step.target_weight > 0,
            now=now,
            documents=lambda ns, config_map: features.golden_documents(client, ns, config_map),
        )
        if walk.phase == "Failed":
            out.problems.append(Problem(walk.reason or "CanaryFailed", walk.message))
    out.analysis = walk
    if (
        walk is not None
        and planned is not None
        and (
            walk.weight != planned.weight or (walk.phase == "Failed") != (planned.phase == "Failed")
        )
    ):
        # This pass planned the old weight (or mirroring to a canary that has now failed):
        # the next one routes the new weight and turns the shadow off.
        out.wake_in_s = 0.0
    elif walk is not None and walk.phase == "Shadowing":
        # The shadow gate reads the stable pods until enough live pages were compared.
        out.wake_in_s = analysis_run.GATE_POLL_S
    elif walk is not None and walk.phase == "Progressing" and walk.window_start:
        assert decision.target is not None and decision.target.resource.spec.canary is not None
        config = decision.target.resource.spec.canary.analysis
        assert config is not None
        # Nothing else wakes the operator when a quiet window ends: ask for a pass then
        # (status times have whole seconds: one more so the window is surely due).
        left = config.interval_seconds - analysis_module.elapsed(walk.window_start, now)
        out.wake_in_s = max(0.0, left) + 1.0
    if out.idle is not None and out.idle.problem is not None:
        out.problems.append(out.idle.problem)
    out.problems.extend(
        Problem(
            "Forbidden",
            f"{kind}: the operator's service account may not list it; grant the verbs the "
            "chart's ClusterRole lists",
        )
        for kind in observed.forbidden
    )
    out.problems.extend(decision.problems)
    out.problems.extend(decision.drain.problems)
    out.drain_waits, out.drains = decision.drain.waits, decision.drain.status
    if decision.target is not None:
        deadline = decision.target.drain.wake_in_s(now)  # a held drain's deadline: relax then
        if deadline is not None:
            out.wake_in_s = deadline if out.wake_in_s is None else min(out.wake_in_s, deadline)
    if capacity is not None:  # spec.capacity's readings and report (controller/capacity.py)
        valid = None if isinstance(parsed, pydantic.ValidationError) else parsed
        capacity_pass(out, valid, observed, capacity, now=now, skipped=skipped)
    if out.batch is not None:  # the pool's next reading
        due = out.batch.next_read_s
        out.wake_in_s = due if out.wake_in_s is None else min(out.wake_in_s, due)
    if out.schedule is not None and out.schedule.next_at is not None:  # the next boundary
        due = out.schedule.wake_in_s(instant(now)) or 0.0
        out.wake_in_s = due if out.wake_in_s is None else min(out.wake_in_s, due)
    out.conflicts.extend(decision.conflicts)
    if decision.target is not None:  # before the pods that mount it, on the first pass
        missing = ensure_internal_secret(
            client, decision.target, owner.uid or "", credentials or CredentialMemory()
        )
        if missing is not None:
            out.problems.append(missing)
    refused = Refused(
        refusals or RefusalMemory(), owner.uid or "", int(owner.generation or 0), epoch(now)
    )
    try:
        live = execute(client, namespace, decision, observed, out, refused)
    finally:  # even when a write failed half-way: the ones before it happened
        observer.remember(namespace, name, out.written, out.deleted)
    retry = refused.wake_in()  # nothing else wakes a refused child when its backoff is over
    if retry is not None:
        out.wake_in_s = retry if out.wake_in_s is None else min(out.wake_in_s, retry)
    cache: CacheVerdict | None = None
    if decision.target is not None:
        out.rollout = decision.target.rollout
        revisions = {t.revision for t in decision.target.roles}
        before = out.previous_status.stable
        serving = before.revision if before is not None and before.served_since else None
        when = datetime.datetime.fromisoformat(now.replace("Z", "+00:00"))
        spec_ = decision.target.resource.spec
        out.problems.extend(
            diagnose(spec_, revisions, live, observed.pods, serving, when, observed.front)
        )
        jobs = {n: obj for (kind, n), obj in live.items() if kind == "Job"}
        spec = decision.target.resource.spec
        cache = weights_cache_verdict(
            spec, name, cached_weights(decision.target), jobs, observed.pods
        )
        if cache.problem is not None:
            out.problems.append(cache.problem)
    out.status = write_status(
        client, owner, decision.target, live, observed.pods, out, now, cache, live_status
    )
    return out


def parse(resource: dict[str, Any]) -> DocParser | pydantic.ValidationError:
    """The DocParser as the pass reads it (spec and status), or why it does not parse (the
    pass reports SpecInvalid, core/decide.invalid): the one parse of a pass."""
    try:
        return DocParser.from_resource(resource)
    except pydantic.ValidationError as exc:
        return exc


def typed_status(
    parsed: DocParser | pydantic.ValidationError, live: dict[str, Any]
) -> DocParserStatus:
    """The status the pass found, typed: the parsed DocParser's; with a spec that does not
    parse, the status alone (empty when it does not parse either: the pass writes it anew)."""
    if not isinstance(parsed, pydantic.ValidationError):
        return parsed.status or DocParserStatus()
    try:
        return DocParserStatus.model_validate(live)
    except pydantic.ValidationError:
        return DocParserStatus()

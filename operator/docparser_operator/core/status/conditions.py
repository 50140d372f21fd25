"""DocParser status from observed children (pure: no I/O, the clock is an argument).

Conditions follow the Kubernetes/kstatus conventions so GitOps tools need no custom scripts:

- ``Ready``, ``Progressing``, ``Degraded`` (what the issue and `kubectl get dp` show), each with
  reason, message, lastTransitionTime (changed only when ``status`` flips) and
  observedGeneration;
- ``Reconciling`` and ``Stalled``: the "abnormal-true" pair kstatus (Flux's health checks, and
  `kubectl wait`-style tooling built on cli-utils) reads, and the chart's Argo CD script reads
  the same way. Never both True: each Degraded reason is classed once (core/status/stalls.py) as
  stalled (``Stalled=True``, ``Reconciling=False``: Failed/Degraded), progressing or advisory,
  so a finished rollout is Current/Healthy and a blocked one Failed within one pass, never
  "Progressing forever" (the KServe complaint) nor InProgress until a GitOps timeout.
- ``observedGeneration`` equals ``metadata.generation`` only once the operator has acted on the
  spec, which is how kstatus tells a stale status from a current one.

Model states come from the pods of the spec's revisions: the ``fetch-weights`` init
container running -> WeightsDownloading, the runtime container up but not ready -> Loading,
ready -> Loaded, a failed init or runtime container (bad sha256, CUDA OOM, crash loop) or a
Deployment past its progress deadline -> FailedToLoad.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from docparser_operator.api import naming
from docparser_operator.api.status_models import (
    AnalysisStatus,
    CanaryStatus,
    Condition,
    DocParserStatus,
    DrainStatus,
    RolloutStatus,
    ScaleToZeroStatus,
    ScheduleStatus,
    ShadowStatus,
    StableStatus,
)
from docparser_operator.core.plan.problem import Problem
from docparser_operator.core.status.stalls import RESTARTS_TOLERATED, classify

IMAGE_PULL = {"ImagePullBackOff", "ErrImagePull"}
CRASH_REASONS = {"CrashLoopBackOff", "Error", "OOMKilled", *IMAGE_PULL}

# Model states, ordered from worst to best (a track reports its least advanced pod).
FAILED = "FailedToLoad"
PENDING = "Pending"
DOWNLOADING = "WeightsDownloading"
LOADING = "Loading"
LOADED = "Loaded"
_ORDER = [FAILED, PENDING, DOWNLOADING, LOADING, LOADED]


@dataclass
class TrackObservation:
    """What the cluster shows for one revision: its Deployment and its pods. ``serving``: it
    is the revision serving as stable, whose pods get a few restarts (RESTARTS_TOLERATED)."""

    version: str | None
    deployment: dict[str, Any] | None
    pods: list[dict[str, Any]] = field(default_factory=list)
    serving: bool = False


@dataclass(frozen=True)
class DeploymentFacts:
    exists: bool = False
    ready: int = 0
    want: int = 0
    done: bool = False  # observed its generation, every pod updated and Ready, none extra
    deadline: bool = False  # ProgressDeadlineExceeded


@dataclass(frozen=True)
class TrackState:
    """The model state of one revision (the least advanced of its pods) and why."""

    state: str
    message: str
    facts: DeploymentFacts


def _container_state(status: dict[str, Any]) -> tuple[str, str]:
    """(kind, reason) of a containerStatus: kind is running/waiting/terminated/unknown."""
    state = status.get("state") or {}
    for kind in ("terminated", "waiting", "running"):
        if kind in state:
            return kind, (state[kind] or {}).get("reason", "")
    return "unknown", ""


def runtime_failure(ctr: dict[str, Any]) -> str | None:
    """How the runtime container failed, if it did and is not serving again: now, or in its
    last run while it runs again unready (the same answer through a whole crash loop)."""
    kind, reason = _container_state(ctr)
    if reason in CRASH_REASONS or (kind == "terminated" and reason != "Completed"):
        return reason or kind
    last = (ctr.get("lastState") or {}).get("terminated")
    if not ctr.get("ready") and isinstance(last, dict) and last.get("exitCode", 0) != 0:
        return str(last.get("reason") or f"exit {last.get('exitCode')}")
    return None


def tolerated_restart(ctr: dict[str, Any]) -> bool:
    """Whether a failed runtime container of the serving revision is only restarting: within
    RESTARTS_TOLERATED restarts, and not an image that cannot be pulled (it never ran)."""
    _, reason = _container_state(ctr)
    return reason not in IMAGE_PULL and (ctr.get("restartCount") or 0) <= RESTARTS_TOLERATED


def pod_model_state(pod: dict[str, Any], serving: bool = False) -> tuple[str, str]:
    """(state, detail) of one runtime pod, from init container and container statuses;
    ``serving``: the pod belongs to the serving revision (its restarts are tolerated)."""
    status = pod.get("status") or {}
    name = (pod.get("metadata") or {}).get("name", "?")
    for init in status.get("initContainerStatuses") or []:
        if init.get("name") not in (naming.FETCH_CONTAINER, naming.WAIT_CONTAINER):
            continue
        what = (
            "weights fetch" if init.get("name") == naming.FETCH_CONTAINER else "weights cache wait"
        )
        kind, reason = _container_state(init)
        exit_code = ((init.get("state") or {}).get("terminated") or {}).get("exitCode", 0)
        if kind == "terminated" and exit_code != 0:
            return (
                FAILED,
                f"pod {name}: {what} failed ({reason or 'exit ' + str(exit_code)})",
            )
        if kind == "waiting" and reason in CRASH_REASONS:
            return FAILED, f"pod {name}: {what} failing ({reason})"
        if kind in ("running", "waiting"):
            doing = (
                "downloading and verifying weights"
                if init.get("name") == naming.FETCH_CONTAINER
                else "waiting for the weights cache to fill"
            )
            return DOWNLOADING, f"pod {name}: {doing}"
    for ctr in status.get("containerStatuses") or []:
        if ctr.get("name") != naming.RUNTIME_CONTAINER:
            continue
        kind, _ = _container_state(ctr)
        failure = runtime_failure(ctr)
        if failure is not None and serving and tolerated_restart(ctr):
            restarts = ctr.get("restartCount") or 0
            return LOADING, f"pod {name}: restarting after {failure} ({restarts} restart(s))"
        if failure is not None:
            return FAILED, f"pod {name}: runtime container {failure}"
        if kind == "running":
            if ctr.get("ready"):
                return LOADED, f"pod {name}: model loaded"
            return LOADING, f"pod {name}: loading the model"
    return PENDING, f"pod {name}: {status.get('phase', 'Pending')}"


def deployment_facts(dep: dict[str, Any] | None) -> DeploymentFacts:
    if dep is None:
        return DeploymentFacts()
    spec, st = dep.get("spec") or {}, dep.get("status") or {}
    want = spec.get("replicas", 1)
    ready = st.get("readyReplicas") or 0
    current = (st.get("observedGeneration") or 0) >= dep["metadata"].get("generation", 1)
    done = (
        current
        and (st.get("updatedReplicas") or 0) >= want
        and ready >= want
        and (st.get("replicas") or 0) <= want
    )
    deadline = any(
        c.get("type") == "Progressing" and c.get("reason") == "ProgressDeadlineExceeded"
        for c in st.get("conditions") or []
    )
    return DeploymentFacts(exists=True, ready=ready, want=want, done=done, deadline=deadline)


def track_state(obs: TrackObservation) -> TrackState:
    """Model state, message and deployment facts of one revision."""
    facts = deployment_facts(obs.deployment)
    if facts.deadline:
        return TrackState(FAILED, "rollout exceeded its progress deadline", facts)
    states = [pod_model_state(p, obs.serving) for p in obs.pods]
    if states:
        worst = min(states, key=lambda s: _ORDER.index(s[0]))
        if worst[0] != LOADED or facts.done:
            return TrackState(worst[0], worst[1], facts)
    if facts.done and facts.ready > 0:
        return TrackState(LOADED, f"{facts.ready} replica(s) ready", facts)
    if facts.done and facts.want == 0:
        return TrackState(LOADED, "scaled to 0", facts)
    if facts.done:
        return TrackState(PENDING, "no replicas ready", facts)
    return TrackState(PENDING, f"{facts.ready}/{facts.want} replicas ready", facts)


def condition(
    ctype: str,
    ok: bool,
    reason: str,
    message: str,
    generation: int,
    previous: DocParserStatus | None,
    now: str,
) -> Condition:
    """The condition ``ctype`` as this pass writes it: its lastTransitionTime is the previous
    status' while ``status`` (True/False) stays, ``now`` when it flips."""
    status: Literal["True", "False"] = "True" if ok else "False"
    old = next((c for c in previous.conditions if c.type == ctype), None) if previous else None
    since = old.last_transition_time if old is not None and old.status == status else now
    return Condition(
        type=ctype,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=since,
        observed_generation=generation,
    )


@dataclass(frozen=True)
class RoleView:
    """One role of the rollout as status reports it."""

    revision: str | None
    version: str | None  # weights version actually serving this role
    ready: int
    observation: TrackObservation | None  # of the spec's revision for this role


def build_status(
    *,
    name: str,
    namespace: str,
    generation: int,
    stable: RoleView | None,
    canary: RoleView | None,
    routed_weight: int,
    requested_weight: int,
    ready_serving: int,
    min_ready: int,
    rolling: list[str],
    problems: list[Problem],
    previous: DocParserStatus | None,
    now: str,
    selector: str,
    rollout: RolloutStatus | None = None,
    weights_cached: tuple[bool, str, str] | None = None,
    analysis: AnalysisStatus | None = None,
    route_gate: tuple[str, str] | None = None,
    drains: list[DrainStatus] | None = None,
    draining: bool = False,
    shadow: ShadowStatus | None = None,
    at_zero: tuple[bool, str, str] | None = None,
    scale_to_zero: ScaleToZeroStatus | None = None,
    schedule: ScheduleStatus | None = None,
) -> DocParserStatus:
    """The whole ``status`` of a DocParser, built through its typed model (api/status_models.py,
    the one the reader uses: a field the writer adds and the reader lacks fails here, in the
    pass that writes it); ``previous``, the live status, is read through the same model.
    Written in the CRD's camelCase shape (``to_wire``): ``None`` is never written, null is
    not a string to the CRD's structural schema, and a merge-patch null deletes.

    ``Ready``: the endpoint serves with at least ``min_ready`` Ready pods behind traffic (an
    autoscaler adding pods or a dark canary loading never flips it). ``Progressing``: a
    spec-driven change is under way (``rolling`` says what: revisions leaving, a new one not
    serving yet, traffic not yet at its target split); it ends False in every case, Complete
    or Failed, so GitOps tools never see "Progressing forever". ``route_gate``: (reason,
    message) while the Gateway's controller has not accepted the route (core/status/report.py):
    pods Ready behind a route nobody accepted serve no one through the Gateway. ``at_zero``:
    (front Ready, reason, message) at zero pods (core/plan/idle.py): Ready while its front is."""
    roles = [("stable", stable), ("canary", canary)]
    states = {
        role: track_state(view.observation)
        for role, view in roles
        if view is not None and view.observation is not None
    }
    failed = [(r, s) for r, s in states.items() if s.state == FAILED]
    found = list(problems) + [Problem(FAILED, f"{r}: {s.message}") for r, s in failed]
    degraded_msgs = [p.message for p in found]
    degraded = bool(found)
    spec_broken = any(p.reason == "SpecInvalid" for p in problems)
    # One classification (core/status/stalls.py) drives Stalled and Reconciling, so the two are
    # never True together (kstatus reads Reconciling first) and both tools agree.
    kinds = [(p, classify(p.reason, since=p.since, now=now, rolling=bool(rolling))) for p in found]
    stalled = [p for p, kind in kinds if kind == "stalled"]
    still = [p for p, kind in kinds if kind == "progressing"]

    progressing = not stalled and bool(rolling or still)
    if progressing:
        loading = [s for s in states.values() if s.state != LOADED]
        p_reason = loading[0].state if loading else (still[0].reason if still else "RollingOut")
        if not loading and not still and all(m.startswith("HTTPRoute generation") for m in rolling):
            p_reason = "AwaitingRouteVerdict"  # only the Gateway's controller is awaited
        if draining and not still and all(m.startswith("drain of node ") for m in rolling):
            p_reason = (
                "Draining"  # only a node drain's replacements are awaited (core/plan/drain.py)
            )
        p_msg = "; ".join(rolling + [p.message for p in still])
    elif stalled:
        p_reason, p_msg = "Failed", "rollout stopped: " + "; ".join(p.message for p in stalled)
    else:
        p_reason, p_msg = "Complete", "all revisions rolled out"

    front = at_zero if at_zero is not None and ready_serving == 0 and not spec_broken else None
    ready = not spec_broken and (ready_serving >= max(1, min_ready) if front is None else front[0])
    if ready and route_gate is not None:
        ready, (r_reason, r_msg) = False, route_gate
    elif front is not None:
        _, r_reason, r_msg = front
    elif ready:
        r_reason = LOADED
        r_msg = f"serving at {endpoint(name, namespace)} with {ready_serving} ready pod(s)"
    elif spec_broken:
        r_reason, r_msg = "SpecInvalid", "; ".join(degraded_msgs)
    elif stable is None:
        r_reason, r_msg = PENDING, "stable revision not created yet"
    else:
        worst = failed[0][1] if failed else states.get("stable")
        r_reason = worst.state if worst and worst.state != LOADED else PENDING
        detail = worst.message if worst else "no pods yet"
        r_msg = f"{ready_serving}/{max(1, min_ready)} ready pods behind traffic ({detail})"

    d_reason = (stalled or found)[0].reason if degraded else "AsExpected"
    d_msg = "; ".join(degraded_msgs) if degraded else "no problems found"
    if stalled:
        s_reason, s_msg = stalled[0].reason, "; ".join(p.message for p in stalled)
    else:
        s_reason = "NotStalled"
        s_msg = "nothing waits on someone" + (f" (degraded: {d_msg})" if degraded else "")
    conds = [
        condition("Ready", ready, r_reason, r_msg, generation, previous, now),
        condition("Progressing", progressing, p_reason, p_msg, generation, previous, now),
        condition("Degraded", degraded, d_reason, d_msg, generation, previous, now),
        condition("Reconciling", progressing, p_reason, p_msg, generation, previous, now),
        condition("Stalled", bool(stalled), s_reason, s_msg, generation, previous, now),
    ]
    if weights_cached is not None:  # (cached, reason, message): weights_cache_status.py
        ok, reason, message = weights_cached
        conds.append(condition("WeightsCached", ok, reason, message, generation, previous, now))
    stable_view = (
        StableStatus(
            version=stable.version or None,
            revision=stable.revision or None,
            ready_replicas=stable.ready,
            served_since=_served_since(previous, stable, ready_serving, now),
        )
        if stable is not None
        else None
    )
    canary_view = (
        CanaryStatus(
            version=canary.version or None,
            revision=canary.revision or None,
            weight=routed_weight,
            requested_weight=requested_weight,
            ready_replicas=canary.ready,
            analysis=analysis,
            shadow=shadow,
        )
        if canary is not None
        else None
    )
    status = DocParserStatus(
        observed_generation=generation,
        conditions=conds,
        endpoint=endpoint(name, namespace),
        selector=selector,
        replicas=(stable.ready if stable else 0) + (canary.ready if canary else 0),
        stable=stable_view,
        canary=canary_view,
        rollout=rollout,
        drains=list(drains) if drains else None,
        scale_to_zero=scale_to_zero,
        schedule=schedule,
    )
    return status


def _served_since(
    previous: DocParserStatus | None, stable: RoleView, ready: int, now: str
) -> str | None:
    """When the stable revision first served: kept while the revision stays (its pods may all
    be restarting), set when it first has a Ready pod behind traffic, gone with the revision."""
    before = previous.stable if previous is not None else None
    if before is not None and before.revision == stable.revision and before.served_since:
        return before.served_since
    return now if stable.ready > 0 and ready > 0 else None


def endpoint(name: str, namespace: str) -> str:
    return naming.endpoint_url(name, namespace)

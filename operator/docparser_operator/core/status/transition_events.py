"""Kubernetes Events for what a platform engineer wants in `kubectl describe dp`: which ones.

Events are derived from transitions only (previous status vs new status, children applied or
pruned), never from the state itself, so a no-op resync posts nothing: zero writes stays zero.
``events_for`` is pure (here, in core); posting them is controller/post_events.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from docparser_operator.api.status_models import (
    AnalysisStatus,
    Condition,
    DocParserStatus,
    TrackStatus,
)
from docparser_operator.core.plan.batch_pool import batch_events
from docparser_operator.core.status.outcome import Outcome


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


def _condition(status: DocParserStatus, ctype: str) -> Condition | None:
    return next((c for c in status.conditions if c.type == ctype), None)


def _what(status: DocParserStatus, revision: str) -> str:
    tracks: tuple[tuple[str, TrackStatus | None], ...] = (
        ("stable", status.stable),
        ("canary", status.canary),
    )
    for role, track in tracks:
        if track is not None and track.revision == revision:
            return f"{role} weights {track.version or 'embedded'}"
    return "a new pod template"


def events_for(outcome: Outcome) -> list[Event]:
    """Events describing what changed in one reconcile pass (the previous and the new status,
    both typed: api/status_models.py)."""
    old, new = outcome.previous_status, outcome.status
    events: list[Event] = []
    for revision in outcome.created_revisions:
        events.append(
            Event(
                "Normal", "RolloutStarted", f"revision {revision} created: {_what(new, revision)}"
            )
        )
    was_stable = old.stable.revision if old.stable is not None else None
    now_stable = new.stable.revision if new.stable is not None else None
    if was_stable and now_stable and was_stable != now_stable:
        version = (new.stable.version if new.stable is not None else None) or now_stable
        events.append(
            Event(
                "Normal", "StableChanged", f"stable traffic now served by {version} ({now_stable})"
            )
        )
    step = outcome.rollout
    if step is not None and step.settled and step.target_weight != step.requested_weight:
        previous = old.canary.weight if old.canary is not None else None
        if previous != step.canary_weight:
            events.append(
                Event(
                    "Warning",
                    "WeightNotAchievable",
                    f"canary weight {step.requested_weight}% is not reachable with "
                    f"{step.size} pod(s) behind one Service: routing {step.target_weight}%",
                )
            )
    w_old = (old.canary.weight or 0) if old.canary is not None else 0
    w_new = (new.canary.weight or 0) if new.canary is not None else 0
    if w_old != w_new:
        events.append(
            Event("Normal", "CanaryWeightChanged", f"canary traffic {w_old}% -> {w_new}%")
        )
    events += _analysis_events(old, new)
    events += _drain_events(outcome)
    events += _idle_events(old, new)
    events += [Event("Normal", reason, message) for reason, message in batch_events(old, new)]
    for kind, child in outcome.pruned:
        events.append(Event("Normal", "Pruned", f"deleted {kind} {child}: no longer desired"))
    ready_old, ready_new = _condition(old, "Ready"), _condition(new, "Ready")
    if _true(ready_new) and not _true(ready_old):
        assert ready_new is not None
        events.append(Event("Normal", "Ready", _said(ready_new.message, "ready")))
    advice_old, advice_new = _condition(old, "CapacityAdvice"), _condition(new, "CapacityAdvice")
    said_before = advice_old.message if advice_old is not None else None
    if advice_new is not None and advice_new.message != said_before:
        events.append(Event("Normal", "CapacityAdvice", _said(advice_new.message, "")))
    deg_old, deg_new = _condition(old, "Degraded"), _condition(new, "Degraded")
    if _true(deg_new) and (not _true(deg_old) or _reason(deg_old) != _reason(deg_new)):
        assert deg_new is not None
        events.append(
            Event("Warning", _said(deg_new.reason, "Degraded"), _said(deg_new.message, ""))
        )
    return events


def _drain_events(outcome: Outcome) -> list[Event]:
    """A drain's phase changes (core/plan/drain.py): started, replacement Ready, blocked, and its
    deadline passing, which names the capacity the eviction takes away."""
    before = {d.node: d.phase for d in outcome.previous_status.drains or []}
    out = []
    for d in outcome.status.drains or []:
        node, phase = d.node, d.phase
        if before.get(node) == phase:
            continue
        said = next(
            (
                p.message
                for p in outcome.problems
                if p.reason == "DrainBlocked" and f"node {node}" in p.message
            ),
            "",
        )
        if node not in before:
            out.append(
                Event(
                    "Normal",
                    "DrainStarted",
                    f"node {node} cordoned: replacing its {d.pods} pod(s) first; "
                    f"evictions held until they are Ready (deadline {d.deadline})",
                )
            )
        if phase == "DeadlineExceeded":
            out.append(Event("Warning", "DrainDeadlineExceeded", said))
        elif phase == "Blocked":
            out.append(Event("Warning", "DrainBlocked", said))
        elif phase == "Evictable":
            out.append(
                Event(
                    "Normal", "DrainReplaced", f"node {node}: replacements Ready, its pods may go"
                )
            )
    return out


def _analysis(status: DocParserStatus) -> AnalysisStatus | None:
    return status.canary.analysis if status.canary is not None else None


def _analysis_events(old: DocParserStatus, new: DocParserStatus) -> list[Event]:
    """The canary analysis' milestones (a failure is the Degraded Warning above): the golden
    gate passed, a step passed, a pause, the walk done. Each once, on its transition."""
    was, now = _analysis(old) or AnalysisStatus(), _analysis(new)
    if now is None or now.revision != was.revision:
        return []  # a new walk: its first milestone comes with its first transition
    phase, message = now.phase, now.message or ""
    if phase == was.phase and now.step == was.step:
        return []
    if was.phase == "Verifying" and phase == "Progressing":
        return [Event("Normal", "GoldenPassed", message)]
    if phase == "Paused":
        return [Event("Normal", "AnalysisPaused", message)]
    if phase == "Succeeded":
        return [Event("Normal", "AnalysisSucceeded", message)]
    if (now.step or 0) > (was.step or 0) and phase in ("Progressing", "Verifying"):
        return [Event("Normal", "AnalysisStepPassed", message)]
    return []


# scaleToZero.state transitions (core/plan/idle.py) -> the Event that says so
_IDLE_EVENTS = {"Idle": "ScaledToZero", "Waking": "Waking", "Awake": "Awake"}


def _idle_events(old: DocParserStatus, new: DocParserStatus) -> list[Event]:
    """Scale to zero's transitions: scaled to zero, waking (and why: the backlog, or a canary
    analysis that needs traffic), awake again. A DocParser's first state is no transition."""
    was = old.scale_to_zero.state if old.scale_to_zero is not None else None
    now = new.scale_to_zero
    if was is None or now is None or now.state is None or now.state == was:
        return []
    return [Event("Normal", _IDLE_EVENTS[now.state], now.reason or now.state)]


def _true(condition: Condition | None) -> bool:
    return condition is not None and condition.status == "True"


def _reason(condition: Condition | None) -> str | None:
    return condition.reason if condition is not None else None


def _said(text: str | None, default: str) -> str:
    """A condition's reason or message, ``default`` where it has none."""
    return text if text is not None else default

"""Kubernetes Events for what a platform engineer wants in `kubectl describe dp`: which ones.

Events are derived from transitions only (previous status vs new status, children applied or
pruned), never from the state itself, so a no-op resync posts nothing: zero writes stays zero.
``events_for`` is pure (here, in core); posting them is controller/post_events.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from docparser_operator.core.plan.batch_pool import batch_events
from docparser_operator.core.status.outcome import Outcome


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


def _condition(status: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == ctype), {})


def _what(status: dict[str, Any], revision: str) -> str:
    for role in ("stable", "canary"):
        if (status.get(role) or {}).get("revision") == revision:
            return f"{role} weights {(status.get(role) or {}).get('version') or 'embedded'}"
    return "a new pod template"


def events_for(outcome: Outcome) -> list[Event]:
    """Events describing what changed in one reconcile pass."""
    old, new = outcome.previous_status, outcome.status
    events: list[Event] = []
    for revision in outcome.created_revisions:
        events.append(
            Event(
                "Normal", "RolloutStarted", f"revision {revision} created: {_what(new, revision)}"
            )
        )
    was_stable = (old.get("stable") or {}).get("revision")
    now_stable = (new.get("stable") or {}).get("revision")
    if was_stable and now_stable and was_stable != now_stable:
        version = (new.get("stable") or {}).get("version") or now_stable
        events.append(
            Event(
                "Normal", "StableChanged", f"stable traffic now served by {version} ({now_stable})"
            )
        )
    step = outcome.rollout
    if step is not None and step.settled and step.target_weight != step.requested_weight:
        previous = (old.get("canary") or {}).get("weight")
        if previous != step.canary_weight:
            events.append(
                Event(
                    "Warning",
                    "WeightNotAchievable",
                    f"canary weight {step.requested_weight}% is not reachable with "
                    f"{step.size} pod(s) behind one Service: routing {step.target_weight}%",
                )
            )
    w_old = (old.get("canary") or {}).get("weight", 0) if old.get("canary") else 0
    w_new = (new.get("canary") or {}).get("weight", 0) if new.get("canary") else 0
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
    if ready_new.get("status") == "True" and ready_old.get("status") != "True":
        events.append(Event("Normal", "Ready", ready_new.get("message", "ready")))
    advice_old, advice_new = _condition(old, "CapacityAdvice"), _condition(new, "CapacityAdvice")
    if advice_new and advice_new.get("message") != advice_old.get("message"):
        events.append(Event("Normal", "CapacityAdvice", advice_new.get("message", "")))
    deg_old, deg_new = _condition(old, "Degraded"), _condition(new, "Degraded")
    if deg_new.get("status") == "True" and (
        deg_old.get("status") != "True" or deg_old.get("reason") != deg_new.get("reason")
    ):
        events.append(
            Event("Warning", deg_new.get("reason", "Degraded"), deg_new.get("message", ""))
        )
    return events


def _drain_events(outcome: Outcome) -> list[Event]:
    """A drain's phase changes (core/plan/drain.py): started, replacement Ready, blocked, and its
    deadline passing, which names the capacity the eviction takes away."""
    before = {d.get("node"): d.get("phase") for d in outcome.previous_status.get("drains") or []}
    out = []
    for d in outcome.status.get("drains") or []:
        node, phase = d.get("node"), d.get("phase")
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
                    f"node {node} cordoned: replacing its {d.get('pods')} pod(s) first; "
                    f"evictions held until they are Ready (deadline {d.get('deadline')})",
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


def _analysis(status: dict[str, Any]) -> dict[str, Any]:
    return (status.get("canary") or {}).get("analysis") or {}


def _analysis_events(old: dict[str, Any], new: dict[str, Any]) -> list[Event]:
    """The canary analysis' milestones (a failure is the Degraded Warning above): the golden
    gate passed, a step passed, a pause, the walk done. Each once, on its transition."""
    was, now = _analysis(old), _analysis(new)
    if not now or now.get("revision") != was.get("revision"):
        return []  # a new walk: its first milestone comes with its first transition
    phase, message = now.get("phase"), now.get("message") or ""
    if phase == was.get("phase") and now.get("step") == was.get("step"):
        return []
    if was.get("phase") == "Verifying" and phase == "Progressing":
        return [Event("Normal", "GoldenPassed", message)]
    if phase == "Paused":
        return [Event("Normal", "AnalysisPaused", message)]
    if phase == "Succeeded":
        return [Event("Normal", "AnalysisSucceeded", message)]
    if (now.get("step") or 0) > (was.get("step") or 0) and phase in ("Progressing", "Verifying"):
        return [Event("Normal", "AnalysisStepPassed", message)]
    return []


# scaleToZero.state transitions (core/plan/idle.py) -> the Event that says so
_IDLE_EVENTS = {"Idle": "ScaledToZero", "Waking": "Waking", "Awake": "Awake"}


def _idle_events(old: dict[str, Any], new: dict[str, Any]) -> list[Event]:
    """Scale to zero's transitions: scaled to zero, waking (and why: the backlog, or a canary
    analysis that needs traffic), awake again. A DocParser's first state is no transition."""
    was = (old.get("scaleToZero") or {}).get("state")
    now = new.get("scaleToZero") or {}
    if was is None or now.get("state") in (None, was):
        return []
    return [Event("Normal", _IDLE_EVENTS[now["state"]], now.get("reason") or now["state"])]

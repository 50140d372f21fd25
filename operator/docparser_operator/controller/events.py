"""Kubernetes Events for what a platform engineer wants in `kubectl describe dp`.

Events are derived from transitions only (previous status vs new status, children applied or
pruned), never from the state itself, so a no-op resync posts nothing: zero writes stays zero.
``events_for`` is pure; ``post`` is the only I/O.
"""

from __future__ import annotations

import datetime
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from docparser_operator.api import naming
from docparser_operator.controller.reconcile import Outcome
from docparser_operator.kube.client import ApiError, KubeClient

log = logging.getLogger(__name__)
COMPONENT = "docparser-operator"


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
    for kind, child in outcome.pruned:
        events.append(Event("Normal", "Pruned", f"deleted {kind} {child}: no longer desired"))
    ready_old, ready_new = _condition(old, "Ready"), _condition(new, "Ready")
    if ready_new.get("status") == "True" and ready_old.get("status") != "True":
        events.append(Event("Normal", "Ready", ready_new.get("message", "ready")))
    deg_old, deg_new = _condition(old, "Degraded"), _condition(new, "Degraded")
    if deg_new.get("status") == "True" and (
        deg_old.get("status") != "True" or deg_old.get("reason") != deg_new.get("reason")
    ):
        events.append(
            Event("Warning", deg_new.get("reason", "Degraded"), deg_new.get("message", ""))
        )
    return events


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


@dataclass
class EventLimiter:
    """At most one Warning per (object, reason) per ``interval_s``.

    A failure retried every few seconds (a 403 until RBAC is fixed) or a condition that flaps
    would otherwise add an Event per attempt: etcd churn, and `kubectl describe` buried under
    copies. Normal events pass: they mark spec-driven transitions, which are few and each worth
    seeing. The clock is injectable so the rule is tested without sleeping."""

    interval_s: float
    clock: Callable[[], float] = time.monotonic
    _last: dict[tuple[str, str], float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def admit(self, uid: str, events: list[Event]) -> list[Event]:
        now = self.clock()
        out = []
        with self._lock:
            for ev in events:
                key = (uid, ev.reason)
                last = self._last.get(key)
                if ev.type == "Warning" and last is not None and now - last < self.interval_s:
                    continue
                self._last[key] = now
                out.append(ev)
            if len(self._last) > 10_000:  # bounded: forget what the interval no longer covers
                self._last = {k: t for k, t in self._last.items() if now - t < self.interval_s}
        return out


def post(client: KubeClient, resource: dict[str, Any], events: list[Event]) -> int:
    """Create core/v1 Events on the DocParser; failures are logged, never raised (best effort)."""
    meta = resource["metadata"]
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    posted = 0
    for ev in events:
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": naming.API_VERSION,
                "kind": naming.KIND,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "type": ev.type,
            "reason": ev.reason,
            "message": ev.message[:1024],
            # legacy core/v1 shape (source, not reportingController: that one obliges the
            # events.k8s.io fields eventTime/action on create)
            "source": {"component": COMPONENT, "host": socket.gethostname()[:128]},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            client.create(body)
            posted += 1
        except ApiError as exc:
            log.warning("could not post event %s on %s: %s", ev.reason, meta["name"], exc)
    return posted

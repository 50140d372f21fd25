"""Passes between resyncs: the ones a DocParser asked for, and scale to zero's readings.

A pass asks for the next one at a time of its choosing (``Outcome.wake_in_s``: an analysis
window's end, a drain's deadline). Scale to zero reads the front's and the pods' ``/metrics``
every few seconds (``DOCPARSER_OPERATOR_IDLE_POLL_INTERVAL_S``) instead, and most readings
change nothing, so a reading is not a pass: it decides from the watch-backed indexes (no
request; not even the children a pass reads by name) and only when its decision differs
from the DocParser's ``status.scaleToZero`` (it sleeps, wakes, grows its backlog's size, or
cannot read) does the DocParser get a pass. A DocParser at rest at zero so costs the API
server nothing between resyncs, whatever else a pass reads.
"""

from __future__ import annotations

import time
from typing import Any

import pydantic

from docparser_operator.controller import features, reconcile
from docparser_operator.controller.state import OperatorState
from docparser_operator.core.plan.idle import IdleStep
from docparser_operator.core.plan.schedule import schedule_step
from docparser_operator.core.status.outcome import Outcome

BLIND = "neither scales to zero nor wakes"  # in ActivityUnknown's message (core/plan/idle.py)


def after_pass(state: OperatorState, uid: str, outcome: Outcome) -> None:
    """Schedule what the pass asked for, and its next scale-to-zero reading."""
    now = time.monotonic()
    if outcome.wake_in_s is None:
        state.wakeups.pop(uid, None)
    else:
        state.wakeups[uid] = now + outcome.wake_in_s
    if outcome.idle is None:
        state.idle_polls.pop(uid, None)
    else:
        state.idle_polls[uid] = now + outcome.idle.next_read_s


def due(state: OperatorState, now: float) -> list[str]:
    """The DocParsers whose requested pass (an analysis window's end) is due; forgotten."""
    found = [uid for uid, at in list(state.wakeups.items()) if at <= now]
    for uid in found:
        state.wakeups.pop(uid, None)
    return found


def changed(body: dict[str, Any], step: IdleStep) -> bool:
    """Whether the status would say something else of scale to zero than it does."""
    status = body.get("status") or {}
    if step.to_status().to_wire() != (status.get("scaleToZero") or {}):
        return True
    blind = any(
        c.get("type") == "Degraded" and BLIND in (c.get("message") or "")
        for c in status.get("conditions") or []
    )
    return blind != (step.problem is not None)


def idle_readings(state: OperatorState) -> list[str]:
    """Read the DocParsers whose reading is due; return those that need a pass for it (the
    others get their next reading scheduled)."""
    now = time.monotonic()
    passes = []
    for uid in [u for u, at in list(state.idle_polls.items()) if at <= now]:
        body = state.known.get(uid)
        if body is None or state.observer is None:
            state.idle_polls.pop(uid, None)
            continue
        meta = body["metadata"]
        model = reconcile.parse(body)
        if isinstance(model, pydantic.ValidationError):  # a pass reports it
            state.idle_polls.pop(uid, None)
            passes.append(uid)
            continue
        now_ = reconcile.now_rfc3339()
        schedule = schedule_step(model.spec.replicas, reconcile.instant(now_))
        with state.lock_for(uid):  # a pass may be reading the same memory
            view = state.observer.view(meta.get("namespace", ""), meta["name"], named=False)
            args = state.idle_args()
            step = features.idle_step(
                model,
                features.analysis_begin(model),
                schedule,
                view,
                args["idle"],
                args["activity"],
                now=now_,
                poll_s=args["poll_s"],
                skipped=state.skipped_pods,
            )
        if step is None or changed(body, step):
            state.idle_polls.pop(uid, None)
            passes.append(uid)
        else:
            state.idle_polls[uid] = time.monotonic() + step.next_read_s
    return passes

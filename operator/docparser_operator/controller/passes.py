"""One reconcile pass as every trigger runs it: the per-object lock, the freshness check, the
Events, kopf's error types. Apart from ``handlers.py`` (start-up and the DocParser's own
triggers) and ``child_events.py`` (the children's watches) because both call it, and neither
should import the other.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from typing import Any

import kopf

from docparser_operator.controller import post_events, wakeups
from docparser_operator.controller.reconcile import reconcile
from docparser_operator.controller.state import OperatorState
from docparser_operator.core.status.outcome import Outcome
from docparser_operator.core.status.transition_events import Event, events_for
from docparser_operator.kube.client import ApiError


def state_of(memo: Any) -> OperatorState:
    """The operator run's state, kept in kopf's ``memo`` (``handlers.configure``)."""
    return memo.state  # type: ignore[no-any-return]


def plain_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """A kopf body as a plain dict of our own (kopf keeps and reuses its views)."""
    return copy.deepcopy({k: body[k] for k in body})


def run_reconcile(state: OperatorState, resource: dict[str, Any], *, strict: bool) -> Outcome:
    """Reconcile one DocParser, post its events, translate errors for kopf.

    ``strict`` raises PermanentError for an unservable spec; the operator's own passes pass
    False and leave the Degraded status, which a fixed spec (a new generation) clears.
    The freshness check is inside the per-object lock: a pass that waited for the lock while
    a newer spec (or our own newer status) arrived works on the newer one, so an old spec is
    never re-applied, ``observedGeneration`` never goes backwards, and the status a pass builds
    on (was a rollout under way? what weight was routed?) is the latest one written."""
    api = state.client
    uid = resource["metadata"]["uid"]
    namespace, name = resource["metadata"].get("namespace", ""), resource["metadata"]["name"]
    with state.lock_for(uid):
        resource = state.newest(resource)
        started = time.monotonic()
        try:
            outcome = reconcile(
                api,
                resource,
                observer=state.observer,
                analysis=state.analysis,
                sources=state.analysis_sources(),
                credentials=state.credentials,
                skipped=state.skipped_pods,
                refusals=state.refusals,
                capacity=state.capacity_args(),
                **state.idle_args(),
            )
        except ApiError as exc:
            if state.metrics is not None:
                state.metrics.failed(namespace, name, exc.status, time.monotonic() - started)
            failed = [Event("Warning", "ReconcileFailed", str(exc))]
            post_events.post(api, resource, state.event_limiter.admit(uid, failed))
            delay = state.settings.retry_delay_s * (1 if exc.transient else 6)
            raise kopf.TemporaryError(str(exc), delay=delay) from exc
        state.saw_write(outcome.body)
        state.handled[uid] = int(resource["metadata"].get("generation") or 0)
        wakeups.after_pass(state, uid, outcome)
        if state.metrics is not None:
            state.metrics.reconciled(namespace, name, outcome.status, time.monotonic() - started)
    post_events.post(api, resource, state.event_limiter.admit(uid, events_for(outcome)))
    if strict and outcome.spec_invalid:
        message = "; ".join(p.message for p in outcome.problems if p.reason == "SpecInvalid")
        raise kopf.PermanentError(message)
    return outcome

"""One pass's part of the live capacity report (``spec.capacity``, issue 36): read the runtime
pods when a reading is due, and publish a new ``status.capacity`` when a whole window has
passed since the last one and a rounded figure moved.

A reading is due every ``poll_s`` (``DOCPARSER_OPERATOR_CAPACITY_POLL_INTERVAL_S``, a minute
by default), and the pass asks to be woken for the next one (``CapacityStep.next_read_s``).
Reading costs one bounded HTTP request per Ready runtime pod and no API request; a pass that
publishes nothing writes nothing.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from docparser_operator.api import labels
from docparser_operator.api.capacity_spec import CapacityStatus
from docparser_operator.api.models import DocParser
from docparser_operator.core.plan.children import Observed, readable_pods
from docparser_operator.core.plan.problem import Problem
from docparser_operator.core.render import roles_of
from docparser_operator.core.status.capacity_status import CapacityStep, report, same_figures
from docparser_operator.core.status.capacity_window import (
    CapacityMemory,
    Figures,
    figures,
    window_seconds,
)
from docparser_operator.core.status.outcome import Outcome
from docparser_operator.providers.base import SourceUnavailable
from docparser_operator.providers.capacity import CapacitySource
from docparser_operator.providers.pods import Skipped


def _published(previous: CapacityStatus | None, window: str) -> float | None:
    """When the report in status was taken (None: none, or one of another window)."""
    if previous is None or previous.window != window or not previous.since:
        return None
    when = datetime.datetime.fromisoformat(previous.since.replace("Z", "+00:00"))
    return when.timestamp()


def _revisions(model: DocParser, observed: Observed) -> set[str]:
    """The spec's revisions and those of the DocParser's Deployments still there (a revision
    leaving after a rollout served part of the window)."""
    found = {t.revision for t in roles_of(model)}
    for (kind, _name), child in observed.children.items():
        revision = ((child.get("metadata") or {}).get("labels") or {}).get(labels.LABEL_REVISION)
        if kind == "Deployment" and revision:
            found.add(str(revision))
    return found


def capacity_step(
    model: DocParser | None,
    observed: Observed,
    memory: CapacityMemory,
    source: CapacitySource,
    *,
    now: str,
    poll_s: float,
    skipped: Skipped | None = None,
    clock: Callable[[], float] = time.time,
) -> tuple[CapacityStep | None, list[Problem]]:
    """This pass's report (None without ``spec.capacity``) and the problems reading found
    (a Prometheus URL outside the allow-list). Pods that cannot be read leave the report in
    status as it is (the next reading starts a new interval). Readings are timed by
    ``clock`` (unix seconds, finer than ``now``'s whole seconds: a 3 s interval measured to
    the second would be off by a third). ``model``: the DocParser the pass parsed (None: its
    spec does not parse, the pass reports that)."""
    if model is None:
        return None, []
    uid = model.metadata.uid or ""
    config = model.spec.capacity
    if config is None:
        memory.forget(uid)
        return None, []
    previous = model.status.capacity if model.status is not None else None
    span = window_seconds(config.window)
    at = clock()
    published = _published(previous, config.window)
    due = published is None or at - published >= span
    kept = previous if published is not None else None
    found: Figures | None = None
    problems: list[Problem] = []
    if config.prometheus is None:
        seen = memory.of(uid)
        if seen.due(at, poll_s):
            readable = readable_pods(observed, uid)
            if readable.not_owned and skipped is not None:
                skipped("not_owned", readable.not_owned)
            try:
                seen.record(source.read_pods(readable.pods), at, span)
            except SourceUnavailable:
                seen.lost()
        if due and seen.covered(at, span):
            found = figures(seen)
        next_read = seen.next_in(at, poll_s)
        origin = "pods"
    else:
        memory.forget(uid)
        namespace = model.metadata.namespace
        refused = source.refusal(config.prometheus, namespace)
        if refused is not None:
            problems.append(Problem("SourceNotAllowed", refused))
        elif due:
            revisions = sorted(_revisions(model, observed))
            try:
                got = source.query(config.prometheus, namespace, revisions, span)
                found = Figures(float(span), got.counters, got.peak_pages_per_s, got.pods)
            except SourceUnavailable:
                found = None  # asked again on the next pass; status keeps the last report
        next_read = poll_s if due else max(0.0, (published or at) + span - at)
        origin = "prometheus"
    if found is None:
        return CapacityStep(kept, next_read), problems
    fresh = report(found, model.spec, window=config.window, since=now, source=origin)
    return CapacityStep(kept if same_figures(kept, fresh) else fresh, next_read), problems


@dataclass(frozen=True)
class CapacityArgs:
    """What the operator run hands each pass for ``spec.capacity``: the readings kept between
    passes, what may be read, and how often the pods are read."""

    memory: CapacityMemory
    source: CapacitySource
    poll_s: float = 60.0
    clock: Callable[[], float] = field(default=time.time)


def capacity_pass(
    out: Outcome,
    model: DocParser | None,
    observed: Observed,
    args: CapacityArgs,
    *,
    now: str,
    skipped: Skipped | None = None,
) -> None:
    """Record this pass's capacity step in ``out``: the report, the problems, and a wake-up
    for the next reading. ``model``: the pass's one parse of the DocParser (None: invalid)."""
    out.capacity, problems = capacity_step(
        model,
        observed,
        args.memory,
        args.source,
        now=now,
        poll_s=args.poll_s,
        skipped=skipped,
        clock=args.clock,
    )
    out.problems.extend(problems)
    if out.capacity is not None and out.capacity.next_read_s is not None:
        due = out.capacity.next_read_s
        out.wake_in_s = due if out.wake_in_s is None else min(out.wake_in_s, due)

"""Scheduled capacity: which ``spec.replicas.schedule`` windows are open at ``now`` (pure).

A window opens at each time its ``cron`` names, read as wall-clock time in
``replicas.timeZone`` (so ``0 8 * * 1-5`` is 08:00 local on both sides of a DST change; a
time the change skips fires at the first minute after it, as cron does), and stays open for
``duration`` of elapsed time. While open, it raises the floor (the HPA's ``minReplicas``, the
size's lower bound) to its ``min`` and the ceiling (``maxReplicas``) to its ``max`` (``min``
without one). Overlapping windows take the largest of each; none lowers anything below the
spec's own ``min`` and ``max``.

The spec is never written: a pass reads the raised bounds from ``raised`` as if the spec said
them (so a window with ``min >= 1`` wakes a DocParser with ``min: 0``: it is simply not one
that scales to zero while the window is open), and ``status.schedule`` says which window is
open and what changes next. Both move only when a window boundary passes, so at rest the
operator writes nothing; the pass asks for the next one at that boundary (``wake_in_s``).

``now`` is always an argument: nothing here reads the clock.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from cronsim import CronSim, CronSimError

from docparser_operator.api.models import DocParser
from docparser_operator.api.replicas import Replicas, ScheduleWindow, time_zone
from docparser_operator.api.status_models import ScheduleActive, ScheduleNext, ScheduleStatus

_SECOND = datetime.timedelta(seconds=1)


def _utc(at: datetime.datetime) -> str:
    return at.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Opening:
    """One open window: which, and when it closes."""

    window: ScheduleWindow
    start: datetime.datetime
    until: datetime.datetime


@dataclass(frozen=True)
class ScheduleStep:
    """The schedule's effect at one instant, and its next change."""

    floor: int  # replicas.min in effect
    ceiling: int  # replicas.max in effect
    open: tuple[Opening, ...]
    next_at: datetime.datetime | None  # the next window boundary
    next_floor: int
    next_ceiling: int

    @property
    def governing(self) -> Opening | None:
        """The open window that sets the floor (the largest ``min``; the latest to close on a
        tie): what status names as active."""
        return max(self.open, key=lambda o: (o.window.min, o.until), default=None)

    def wake_in_s(self, now: datetime.datetime) -> float | None:
        """Seconds until the next boundary (one more: status times have whole seconds)."""
        if self.next_at is None:
            return None
        return max(0.0, (self.next_at - now).total_seconds()) + 1.0

    def to_status(self) -> ScheduleStatus:
        """``status.schedule``, through its model: the window in effect, the next change."""
        active = self.governing
        return ScheduleStatus(
            active=ScheduleActive(
                cron=active.window.cron, until=_utc(active.until), min=self.floor, max=self.ceiling
            )
            if active is not None
            else None,
            next=ScheduleNext(at=_utc(self.next_at), min=self.next_floor, max=self.next_ceiling)
            if self.next_at is not None
            else None,
        )


def _latest_start(window: ScheduleWindow, local: datetime.datetime) -> datetime.datetime | None:
    """The last time ``window.cron`` fired at or before ``local``."""
    try:
        return next(iter(CronSim(window.cron, local + _SECOND, reverse=True)))
    except (CronSimError, StopIteration):
        return None


def _next_start(window: ScheduleWindow, local: datetime.datetime) -> datetime.datetime | None:
    """The first time ``window.cron`` fires after ``local``."""
    try:
        return next(iter(CronSim(window.cron, local)))
    except (CronSimError, StopIteration):
        return None


def _openings(replicas: Replicas, now: datetime.datetime) -> list[Opening]:
    """The windows open at ``now``: the latest start of each is the one that closes last
    (one window's openings all last the same), so only that one is looked at."""
    local = now.astimezone(time_zone(replicas.zone))
    out = []
    for window in replicas.schedule or ():
        start = _latest_start(window, local)
        if start is None:
            continue
        until = start + datetime.timedelta(seconds=window.duration_seconds)
        if start <= local < until:
            out.append(Opening(window, start, until))
    return out


def _bounds(replicas: Replicas, opened: list[Opening]) -> tuple[int, int]:
    floor = max([replicas.min, *(o.window.min for o in opened)])
    ceiling = max([replicas.max, floor, *(o.window.ceiling for o in opened)])
    return floor, ceiling


def schedule_step(replicas: Replicas, now: datetime.datetime) -> ScheduleStep | None:
    """The schedule at ``now`` (an aware datetime); None without ``replicas.schedule``."""
    if not replicas.schedule:
        return None
    local = now.astimezone(time_zone(replicas.zone))
    opened = _openings(replicas, now)
    floor, ceiling = _bounds(replicas, opened)
    boundaries = [o.until for o in opened]
    for window in replicas.schedule:
        start = _next_start(window, local)
        if start is not None:
            boundaries.append(start)
    next_at = min(boundaries, default=None)
    next_floor, next_ceiling = floor, ceiling
    if next_at is not None:
        next_floor, next_ceiling = _bounds(replicas, _openings(replicas, next_at))
    return ScheduleStep(floor, ceiling, tuple(opened), next_at, next_floor, next_ceiling)


def raised_model(model: DocParser, step: ScheduleStep | None) -> DocParser:
    """The parsed DocParser as this pass reads it: its
    ``spec.replicas.min``/``max`` raised to the open windows', the replicas validated again
    (min <= max); the spec's other rules only get looser when the floor goes up. The same
    object without a window that changes them."""
    replicas = model.spec.replicas
    if step is None or (replicas.min == step.floor and replicas.max == step.ceiling):
        return model
    bounds = {**replicas.model_dump(), "min": step.floor, "max": step.ceiling}
    spec = model.spec.model_copy(update={"replicas": Replicas.model_validate(bounds)})
    return model.model_copy(update={"spec": spec})

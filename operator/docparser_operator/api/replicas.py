"""``spec.replicas``: the DocParser's size, and how one with ``min: 0`` sleeps and wakes.

Apart from models.py because scale to zero gave it a policy of its own (the idle window,
the front's hold), read by core/plan/idle.py and core/render/front.py without the rest of the spec.
"""

from __future__ import annotations

import datetime
import zoneinfo
from typing import Annotated

from cronsim import CronSim, CronSimError
from pydantic import Field, field_validator, model_validator

from docparser_operator.api.wire import WireModel

# 10s..999h: a shorter window would read one quiet scrape as idleness
DURATION_PATTERN = r"^([1-9][0-9]{1,4}s|[1-9][0-9]{0,4}m|[1-9][0-9]{0,2}h)$"
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600}


def duration_seconds(text: str) -> int:
    """``15m`` -> 900 (one number, one unit: s, m or h; the CRD's pattern)."""
    return int(text[:-1]) * _DURATION_UNITS[text[-1]]


class ScaleToZero(WireModel):
    """How a DocParser with ``replicas.min: 0`` sleeps and wakes (core/plan/idle.py): after
    ``after`` without client requests and without queued or running jobs its GPU pods go; the
    front (a CPU pod of the same image) takes requests meanwhile, holding a synchronous one up
    to ``holdSeconds`` while pods start (else 503 with ``Retry-After: retryAfterSeconds``)."""

    after: Annotated[str, Field(max_length=8, pattern=DURATION_PATTERN)] = "15m"
    hold_seconds: Annotated[int, Field(ge=0, le=900)] = 120
    retry_after_seconds: Annotated[int, Field(ge=1, le=3600)] = 30

    @property
    def after_seconds(self) -> int:
        return duration_seconds(self.after)


# Five fields (minute hour day-of-month month day-of-week), no seconds, no @-macros: the
# CRD's pattern keeps the shape, the model (cronsim) each field's values.
CRON_PATTERN = r"^\S+( \S+){4}$"


def cron_error(expr: str) -> str | None:
    """Why ``expr`` is not a five-field cron expression, or None."""
    if len(expr.split()) != 5 or expr.startswith("@"):
        return "a cron expression has five fields: minute hour day-of-month month day-of-week"
    try:
        CronSim(expr, datetime.datetime(2000, 1, 1))
    except CronSimError as exc:
        return str(exc) or "not a cron expression"
    return None


class ScheduleWindow(WireModel):
    """One recurring window of ``spec.replicas.schedule`` (core/plan/schedule.py): from each time
    ``cron`` names (in ``replicas.timeZone``) for ``duration``, the autoscaler's floor is at
    least ``min`` and its ceiling at least ``max`` (``min`` without it)."""

    cron: Annotated[str, Field(max_length=100, pattern=CRON_PATTERN)]
    duration: Annotated[str, Field(max_length=8, pattern=DURATION_PATTERN)]
    min: Annotated[int, Field(ge=0, le=1000)]
    max: Annotated[int, Field(ge=1, le=1000)] | None = None

    @property
    def duration_seconds(self) -> int:
        return duration_seconds(self.duration)

    @property
    def ceiling(self) -> int:
        return self.max if self.max is not None else max(1, self.min)

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        error = cron_error(value)
        if error is not None:
            raise ValueError(f"cron {value!r}: {error}")
        return value

    @model_validator(mode="after")
    def _bounds(self) -> ScheduleWindow:
        if self.max is not None and self.min > self.max:
            raise ValueError("schedule[].min must be less than or equal to schedule[].max")
        return self


def time_zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA zone ``name`` (validated by the model: never raises on a valid spec)."""
    return zoneinfo.ZoneInfo(name)


class Replicas(WireModel):
    min: Annotated[int, Field(ge=0, le=1000)] = 1
    max: Annotated[int, Field(ge=1, le=1000)] = 1
    desired: Annotated[int, Field(ge=0, le=1000)] = 1  # the autoscaler's, through /scale
    scale_to_zero: ScaleToZero | None = None  # read only with min 0
    schedule: Annotated[list[ScheduleWindow], Field(max_length=20)] | None = None
    # None reads as UTC. Not a CRD default: a default the API server wrote into every stored
    # DocParser would be a field an operator of an earlier version refuses (its model forbids
    # unknown fields), so a chart rollback would leave every DocParser SpecInvalid.
    time_zone: Annotated[str, Field(max_length=64)] | None = None

    @property
    def zone(self) -> str:
        """The IANA zone the schedule's cron expressions are read in."""
        return self.time_zone or "UTC"

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            time_zone(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"timeZone {value!r} is not an IANA time zone name") from exc
        return value

    @property
    def floor(self) -> int:
        """Fewest pods while awake: min, and 1 for a DocParser that scales to zero (it goes
        to 0 only by the idle decision, core/plan/idle.py, never by the autoscaler)."""
        return max(1, self.min)

    @property
    def size(self) -> int:
        """The DocParser's size while awake: the autoscaler's choice clamped to [floor, max]."""
        return max(self.floor, min(self.max, self.desired))

    @property
    def idle_policy(self) -> ScaleToZero | None:
        """The scale-to-zero settings when min is 0 (defaults without the field), else None."""
        if self.min > 0:
            return None
        return self.scale_to_zero or ScaleToZero()

    @model_validator(mode="after")
    def _cel_rules(self) -> Replicas:
        if self.min > self.max:
            raise ValueError("replicas.min must be less than or equal to replicas.max")
        return self

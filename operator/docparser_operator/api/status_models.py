"""Typed DocParser status (pydantic v2), mirroring the CRD's ``status`` schema.

Written by the operator through these models (core/status/conditions.py builds them) and
read back with them (``DocParser.status``), so writer and reader cannot drift apart;
tests/operator/api/test_models.py holds the CRD and the code to the same fields.

``SECTIONS`` is the one table of the optional parts of ``status`` and the feature that owns
each: the status write (core/status/status_patch.py) removes a section its feature no longer writes,
and compares exactly what it would write, so a feature turned off leaves nothing behind and
the resync at rest writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field

from docparser_operator.api.batch_spec import BatchPoolStatus
from docparser_operator.api.capacity_spec import CapacityStatus
from docparser_operator.api.wire import StatusModel


class Condition(StatusModel):
    type: Annotated[str, Field(max_length=316)]
    status: Literal["True", "False", "Unknown"]
    reason: Annotated[str, Field(max_length=1024)] | None = None
    message: Annotated[str, Field(max_length=32768)] | None = None
    last_transition_time: str | None = None
    observed_generation: int | None = None


class TrackStatus(StatusModel):
    version: str | None = None
    revision: str | None = None
    ready_replicas: int | None = None


class StableStatus(TrackStatus):
    served_since: str | None = None  # when this revision first served (restarts tolerated)


class AnalysisCheck(StatusModel):
    name: str | None = None
    value: float | None = None
    threshold: float | None = None
    ok: bool | None = None
    canary: float | None = None
    stable: float | None = None
    quantile: float | None = None


class GoldenScore(StatusModel):
    document: str | None = None
    canary: float | None = None
    stable: float | None = None
    ok: bool | None = None


class AnalysisStatus(StatusModel):
    revision: str | None = None
    reason: str | None = None
    golden: list[GoldenScore] | None = None
    step: int | None = None
    steps: int | None = None
    weight: int | None = None
    phase: str | None = None
    window_start: str | None = None
    failures: int | None = None
    paused_generation: int | None = None
    retry: str | None = None
    message: str | None = None
    checks: list[AnalysisCheck] | None = None


class ShadowDrop(StatusModel):
    reason: str | None = None
    requests: float | None = None


class ShadowStatus(StatusModel):
    """What the shadow does and costs (``spec.canary.shadow``): its configuration as rendered
    in ``<name>-shadow``, and the stable pods' comparison figures over the span measured last."""

    enabled: bool | None = None
    percent: int | None = None
    pod_pages_per_minute: int | None = None
    since: str | None = None
    pages_compared: float | None = None
    pages_mirrored: float | None = None
    pages_per_minute: float | None = None
    quantile: float | None = None
    cer: float | None = None
    truncation_increase: float | None = None
    structure_disagreements: float | None = None
    dropped: list[ShadowDrop] | None = None


class CanaryStatus(TrackStatus):
    weight: int | None = None
    requested_weight: int | None = None
    analysis: AnalysisStatus | None = None
    shadow: ShadowStatus | None = None


class RolloutStatus(StatusModel):
    size: int | None = None
    pods: int | None = None
    max_surge: int | None = None


class DrainStatus(StatusModel):
    """One cordoned node holding our pods (core/plan/drain.py)."""

    node: str | None = None
    since: str | None = None
    deadline: str | None = None
    pods: int | None = None
    phase: str | None = None


class ScaleToZeroStatus(StatusModel):
    state: Literal["Awake", "Idle", "Waking"] | None = None
    since: str | None = None
    reason: str | None = None
    wake_replicas: int | None = None


class ScheduleActive(StatusModel):
    """The open window that sets the floor, when it closes, and the bounds in effect."""

    cron: str | None = None
    until: str | None = None
    min: int | None = None
    max: int | None = None


class ScheduleNext(StatusModel):
    """The next window boundary and the bounds from then on."""

    at: str | None = None
    min: int | None = None
    max: int | None = None


class ScheduleStatus(StatusModel):
    """``spec.replicas.schedule`` now (core/plan/schedule.py): the window in effect, the next
    change."""

    active: ScheduleActive | None = None
    next: ScheduleNext | None = None


class DocParserStatus(StatusModel):
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    stable: StableStatus | None = None
    canary: CanaryStatus | None = None
    rollout: RolloutStatus | None = None
    drains: Annotated[list[DrainStatus], Field(max_length=1000)] | None = (
        None  # one per node: at most replicas.max
    )
    scale_to_zero: ScaleToZeroStatus | None = None
    schedule: ScheduleStatus | None = None
    capacity: CapacityStatus | None = None
    batch: BatchPoolStatus | None = None
    endpoint: str | None = None
    replicas: int | None = None
    selector: str | None = None


@dataclass(frozen=True)
class StatusSection:
    """An optional part of ``status`` (camelCase ``path`` from the status root) and the feature
    that owns it: written while ``owner`` is on (``turned_on_by`` says what turns it on), and
    removed by the first write after it is off, a nested section by a nested merge-patch null
    (``{"canary": {"shadow": null}}``) while its parent stays. The section is the owner's
    whole: a field it no longer writes is removed as well (``stable.servedSince``)."""

    path: tuple[str, ...]
    owner: str
    turned_on_by: str


# Every optional part of status (tests/operator/core/status/test_status.py holds each path to a
# model field, and every other model field to one written by every pass). The fields outside
# these (observedGeneration, conditions, endpoint, replicas, selector) are written by every pass.
SECTIONS: tuple[StatusSection, ...] = (
    StatusSection(("stable",), "stable", "a valid spec (its stable revision)"),
    StatusSection(("canary",), "canary", "spec.canary"),
    StatusSection(("canary", "analysis"), "analysis", "spec.canary.analysis"),
    StatusSection(("canary", "shadow"), "shadow", "spec.canary.shadow"),
    StatusSection(("rollout",), "rollout", "a valid spec (its rollout plan)"),
    StatusSection(("drains",), "drains", "a cordoned node holding pods of the spec's revisions"),
    StatusSection(("scaleToZero",), "scaleToZero", "spec.replicas.min: 0"),
    StatusSection(("schedule",), "schedule", "spec.replicas.schedule"),
    StatusSection(("schedule", "active"), "schedule", "an open spec.replicas.schedule window"),
    StatusSection(("schedule", "next"), "schedule", "a spec.replicas.schedule window ahead"),
    StatusSection(("capacity",), "capacity", "spec.capacity"),
    StatusSection(("batch",), "batch", "spec.batch"),
    StatusSection(("capacity", "recommended"), "capacity", "spec.capacity, a window measured"),
)

"""What one reconcile pass did: the record events, metrics, logs, tests and the benchmark
read after the pass.

A plain value in core (no client): the pure event builder (core/status/transition_events.py)
and the status builder (core/status/report.py) take it, so both can be tested without an API server.
Both statuses in it are typed (api/status_models.py): the pass parsed the previous one with
the DocParser, and nothing below the controller reads a status as a dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from docparser_operator.analysis import walk as analysis_module
from docparser_operator.api.status_models import DocParserStatus, DrainStatus
from docparser_operator.core.plan import rollout_planner as rollout
from docparser_operator.core.plan.batch_pool import PoolStep
from docparser_operator.core.plan.children import Key
from docparser_operator.core.plan.idle import IdleStep
from docparser_operator.core.plan.problem import Problem
from docparser_operator.core.plan.schedule import ScheduleStep
from docparser_operator.core.status.capacity_status import CapacityStep


@dataclass
class Outcome:
    """What one pass did (for events, logs, tests and the benchmark)."""

    name: str = ""
    applied: list[Key] = field(default_factory=list)
    scaled: list[Key] = field(default_factory=list)
    pruned: list[Key] = field(default_factory=list)
    conflicts: list[Key] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    status: DocParserStatus = field(default_factory=DocParserStatus)  # as this pass wrote it
    previous_status: DocParserStatus = field(default_factory=DocParserStatus)  # as it found it
    status_written: bool = False
    rollout: rollout.Rollout | None = None
    created_revisions: list[str] = field(default_factory=list)
    body: dict[str, Any] | None = None  # the DocParser as the status write returned it
    analysis: analysis_module.AnalysisState | None = None  # the canary analysis after the pass
    idle: IdleStep | None = None  # scale to zero (replicas.min 0): core/plan/idle.py
    schedule: ScheduleStep | None = None  # spec.replicas.schedule now: core/plan/schedule.py
    capacity: CapacityStep | None = None  # spec.capacity's report: core/status/capacity_status.py
    batch: PoolStep | None = None  # spec.batch's pool and status.batch: core/plan/batch_pool.py
    wake_in_s: float | None = None  # a pass is due then (the analysis window's end)
    written: dict[Key, dict[str, Any]] = field(default_factory=dict[Key, Any])  # as returned
    deleted: dict[Key, str] = field(default_factory=dict[Key, str])  # pruned: their uids
    drain_waits: list[str] = field(default_factory=list)  # drains in progress (Progressing)
    drains: list[DrainStatus] = field(default_factory=list[DrainStatus])  # status.drains

    @property
    def spec_invalid(self) -> bool:
        return any(p.reason == "SpecInvalid" for p in self.problems)

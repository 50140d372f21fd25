"""``spec.batch`` and ``status.batch`` (issue 35): the batch pool's types.

A batch pool is a Deployment of the stable revision that serves no interactive traffic
(core/render/batch_pool.py): it runs the lines of ``/v1/batches`` only, on nodes of its own
(spot capacity: ``nodeSelector``, ``tolerations``, ``priorityClassName``), sized on the
batch backlog in pages from ``replicas.min`` (0 by default) to ``replicas.max``
(core/plan/batch_pool.py). Kept apart from models.py and status_models.py, which name them, so the
feature's fields read in one place; tests/operator/api/test_models.py holds them to the CRD.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from docparser_operator.api.wire import StatusModel, WireModel

MAX_POOL = 1000


class BatchReplicas(WireModel):
    min: Annotated[int, Field(ge=0, le=MAX_POOL)] = 0
    max: Annotated[int, Field(ge=1, le=MAX_POOL)] = 1

    @model_validator(mode="after")
    def _cel_rules(self) -> BatchReplicas:
        if self.min > self.max:
            raise ValueError("batch.replicas.min must be less than or equal to batch.replicas.max")
        return self


class BatchSpec(WireModel):
    """The pool: its size bounds, the pages one pod is sized for, where it runs, and whether
    the stable pods also take batch lines when they have free slots (``backfill``)."""

    replicas: BatchReplicas = Field(default_factory=BatchReplicas)
    pages_per_replica: Annotated[int, Field(ge=1, le=1_000_000)] = 1000
    node_selector: Annotated[
        dict[str, Annotated[str, Field(max_length=253)]], Field(max_length=32)
    ] = Field(default_factory=dict)
    tolerations: Annotated[list[dict[str, Any]], Field(max_length=32)] = Field(default_factory=list)
    priority_class_name: Annotated[str, Field(min_length=1, max_length=253)] | None = None
    backfill: bool = True


class BatchPoolStatus(StatusModel):
    """The pool and the DocParser's batches now, rounded to two significant digits so a
    batch in progress writes status only when a figure moves by a step, and none at rest."""

    replicas: int | None = None  # the pool's size as the operator set it
    ready_replicas: int | None = None
    batches_in_progress: int | None = None
    pages_queued: int | None = None  # estimated: lines left x pages per line so far
    pages_done: int | None = None  # in the batches not finished
    pages_per_minute: float | None = None  # over the last minutes (all pods, every batch)
    eta_minutes: int | None = None  # pagesQueued at pagesPerMinute; absent without a rate
    last_scale_time: str | None = None  # when the pool last changed size

"""``spec.capacity`` and ``status.capacity`` (issue 36): the live capacity report's types.

Kept apart from models.py and status_models.py (which name them) so the feature's fields
read in one place; tests/operator/api/test_models.py holds them to the CRD like every field.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from docparser_operator.api.analysis_spec import PrometheusSource
from docparser_operator.api.wire import StatusModel, WireModel

# 10..9999 s, 1..9999 min, 1..24 h: a window shorter than a few readings measures nothing
WINDOW_PATTERN = r"^([1-9][0-9]{1,3}s|[1-9][0-9]{0,3}m|([1-9]|1[0-9]|2[0-4])h)$"


class CapacitySpec(WireModel):
    """Measure the traffic the DocParser serves over ``window`` and report it, with what its
    spec should say (``status.capacity``, condition ``CapacityAdvice``)."""

    window: Annotated[str, Field(pattern=WINDOW_PATTERN, max_length=8)] = "1h"
    prometheus: PrometheusSource | None = None


class CapacityTier(StatusModel):
    """One tier's share of the pages ``auto`` chose, and the seconds its pages held a slot."""

    tier: int | None = None
    auto_share: float | None = None
    seconds_per_page: float | None = None


class CapacityRecommended(StatusModel):
    """What the spec should say for the traffic measured (core/status/capacity_sizing.py)."""

    replicas: int | None = None
    tier: str | None = None  # "auto" or a tier number
    memory: str | None = None
    max_batch_size: int | None = None
    target_wait_seconds: float | None = None  # the p95 queue wait ``replicas`` is sized for


class CapacityStatus(StatusModel):
    """The last whole window's figures (rounded; written at most once per window)."""

    window: str | None = None
    since: str | None = None  # when the window these figures cover ended
    source: str | None = None  # pods | prometheus
    pods: int | None = None
    pages_per_second: float | None = None
    peak_pages_per_second: float | None = None
    vision_tokens_per_page: float | None = None
    output_tokens_per_page: float | None = None
    seconds_per_page: float | None = None
    slots: int | None = None
    queue_wait_p95_seconds: float | None = None
    memory_peak: str | None = None
    memory_limit: str | None = None
    tiers: Annotated[list[CapacityTier], Field(max_length=7)] | None = None
    recommended: CapacityRecommended | None = None

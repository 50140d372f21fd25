"""The canary analysis' part of the DocParser spec (``spec.canary.analysis``): steps,
thresholds, golden documents and a Prometheus source, mirroring crds/docparser.yaml.

Kept apart from models.py because it is a spec of its own (the walk in analysis/ reads
it) and grows with each check; the CEL rules are repeated here with the same messages.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from docparser_operator.api.wire import SecretRef, WireModel


class AnalysisStep(WireModel):
    weight: Annotated[int, Field(ge=1, le=99)]
    pause: bool = False  # after this step passes, wait for a spec change
    # With canary.shadow: the step's window is judged only once this many pages were compared.
    min_shadow_pages: Annotated[int, Field(ge=0, le=1000000)] = 0


DEFAULT_STEPS = (10, 25, 50)


GOLDEN_URI_PATTERN = r"^(file|s3|gs|gcs|az|abfs|https?)://[^\s]+$"


class GoldenSet(WireModel):
    """Documents with their expected text the canary must read before it gets any traffic:
    a ConfigMap (``<id>.png`` / ``<id>.pdf`` in binaryData, ``<id>.txt`` or ``<id>.md`` in
    data) or a folder of the same files at ``uri`` (golden_source.py)."""

    config_map_ref: SecretRef | None = None  # a name in the DocParser's namespace
    uri: Annotated[str, Field(pattern=GOLDEN_URI_PATTERN, max_length=2048)] | None = None
    max_cer: Annotated[float, Field(ge=0, le=1, alias="maxCER")] = 0.05
    max_cer_increase: Annotated[float, Field(ge=0, le=1, alias="maxCERIncrease")] = 0.02
    every_step: bool = False  # the gate again before each later step (analysis.py)

    @model_validator(mode="after")
    def _cel_rules(self) -> GoldenSet:
        if (self.config_map_ref is None) == (self.uri is None):
            raise ValueError("golden: give configMapRef or uri, exactly one")
        return self


class ShadowDisagreement(WireModel):
    """The shadow's main check: the ``quantile`` of the per-page character error rate of the
    canary's text against stable's (the same live pages) may be at most ``cer``."""

    quantile: Annotated[float, Field(ge=0.5, le=0.99)] = 0.9
    cer: Annotated[float, Field(ge=0, le=1)] = 0.02


PROMETHEUS_LABEL = r"^[a-zA-Z_][a-zA-Z0-9_]*$"


class PrometheusSource(WireModel):
    """Judge windows on PromQL over a Prometheus that scrapes the runtime pods, instead of
    the operator reading the pods' /metrics itself (prometheus.py)."""

    url: Annotated[str, Field(pattern=r"^https?://[^\s]+$", max_length=2048)]
    revision_label: Annotated[str, Field(pattern=PROMETHEUS_LABEL, max_length=128)] = (
        "docparser_io_revision"
    )
    namespace_label: Annotated[str, Field(pattern=PROMETHEUS_LABEL, max_length=128)] = "namespace"


class CanaryAnalysis(WireModel):
    """Automated steps for the canary weight (analysis.py): ``steps``, or ``stepWeight`` up
    to ``maxWeight``; without either 10, 25 and 50 %."""

    steps: Annotated[list[AnalysisStep], Field(max_length=20)] = Field(default_factory=list)
    step_weight: Annotated[int, Field(ge=1, le=99)] | None = None
    max_weight: Annotated[int, Field(ge=1, le=99)] = 50
    interval_seconds: Annotated[int, Field(ge=5, le=86400)] = 300
    min_requests: Annotated[int, Field(ge=1, le=1000000)] = 50
    failure_limit: Annotated[int, Field(ge=1, le=100)] = 2
    max_error_rate_increase: Annotated[float, Field(ge=0, le=1)] = 0.01
    max_latency_ratio: Annotated[float, Field(ge=1, le=100)] = 1.5
    max_truncated_rate_increase: Annotated[float, Field(ge=0, le=1)] = 0.02
    max_empty_rate_increase: Annotated[float, Field(ge=0, le=1)] = 0.02
    max_repetition_rate_increase: Annotated[float, Field(ge=0, le=1)] = 0.05
    # With canary.shadow (the stable pods' comparison of live pages): the dark gate before
    # step 1 waits for minShadowPages compared pages; every window also checks these two.
    min_shadow_pages: Annotated[int, Field(ge=1, le=1000000)] = 100
    max_shadow_disagreement: ShadowDisagreement = Field(default_factory=ShadowDisagreement)
    max_shadow_truncation_increase: Annotated[float, Field(ge=0, le=1)] = 0.02
    retry: Annotated[str, Field(max_length=63)] | None = None
    resume: Annotated[str, Field(max_length=63)] | None = None  # a new value ends a pause
    golden: GoldenSet | None = None
    prometheus: PrometheusSource | None = None

    @model_validator(mode="after")
    def _cel_rules(self) -> CanaryAnalysis:
        if self.steps and self.step_weight is not None:
            raise ValueError("analysis: give steps or stepWeight, not both")
        return self

    def schedule(self) -> list[AnalysisStep]:
        if self.steps:
            return list(self.steps)
        if self.step_weight is not None:
            top = max(self.max_weight, self.step_weight)
            weights = list(range(self.step_weight, top + 1, self.step_weight))
            return [AnalysisStep(weight=w) for w in weights]
        return [AnalysisStep(weight=w) for w in DEFAULT_STEPS]

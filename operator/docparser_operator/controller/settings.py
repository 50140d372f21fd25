"""Operator settings (env vars ``DOCPARSER_OPERATOR_<FIELD>``; nothing else reads os.environ).

Why a separate prefix from the runtime's ``DOCPARSER_``: the operator Deployment and the
runtime pods are configured independently, and a runtime knob must never leak into the
operator by accident.
"""

from __future__ import annotations

from pydantic import AliasChoices, Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from docparser_operator.providers.golden_uri import DEFAULT_SOURCES, http_allow_list
from docparser_operator.providers.urls import AllowList


class OperatorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DOCPARSER_OPERATOR_", extra="ignore")

    resync_interval_s: float = Field(60.0, gt=0, description="drift-correction timer period")
    resync_initial_delay_s: float = Field(5.0, ge=0, description="timer start after (re)start")
    request_timeout_s: float = Field(30.0, gt=0, description="one API request")
    retry_delay_s: float = Field(5.0, gt=0, description="backoff after a transient API error")
    refusal_backoff_s: float = Field(
        5.0,
        gt=0,
        description="a child the API server refuses (quota, IP range, admission, RBAC) is "
        "tried again after this, then twice as long each time (core/plan/refusals.py)",
    )
    refusal_backoff_max_s: float = Field(
        300.0, gt=0, description="the longest wait before a refused child is tried again"
    )
    liveness_endpoint: str | None = Field(
        None, description="e.g. http://0.0.0.0:8080/healthz for the operator pod's probe"
    )
    event_interval_s: float = Field(
        300.0, ge=0, description="at most one Warning Event per DocParser and reason this often"
    )
    metrics_port: int | None = Field(
        None, ge=1, le=65535, description="serve Prometheus /metrics here (the chart sets 8081)"
    )
    node_watch_timeout_s: float = Field(
        300.0,
        ge=1,
        le=3600,
        description="the cordoned-node watch is renewed after 0.8-1.2x this (kube/nodes.py)",
    )
    idle_poll_interval_s: float = Field(
        5.0,
        ge=1.0,
        le=300.0,
        description="with replicas.min 0: how often the front's and the pods' /metrics are read "
        "(one bounded HTTP request per Ready pod; no API request)",
    )
    capacity_poll_interval_s: float = Field(
        60.0,
        ge=1.0,
        le=3600.0,
        description="with spec.capacity: how often the runtime pods' /metrics are read (the "
        "report's peak is the busiest of these intervals; no API request)",
    )
    batch_cooldown_s: float = Field(
        120.0,
        ge=0.0,
        le=86400.0,
        description="with spec.batch: how long every reading must ask for fewer pool pods "
        "before the pool shrinks (it grows at once); pods that take minutes to load are not "
        "stopped by a backlog that dips between two lines",
    )
    pod_metrics_deadline_s: float = Field(
        5.0,
        gt=0,
        le=60.0,
        description="one reading of a DocParser's pods' /metrics (scale to zero, canary "
        "analysis): all of them in parallel, at most this long in all (providers/pods.py)",
    )
    log_level: str = "INFO"
    leader_elect: bool = Field(
        False, description="hold a Lease before reconciling (the chart runs 2 replicas with it)"
    )
    lease_name: str = Field("docparser-operator", description="the Lease's name")
    pod_namespace: str | None = Field(
        None,
        validation_alias=AliasChoices("POD_NAMESPACE", "DOCPARSER_OPERATOR_POD_NAMESPACE"),
        description="the Lease's namespace (downward API); default: the service account's",
    )
    pod_name: str | None = Field(
        None,
        validation_alias=AliasChoices("POD_NAME", "DOCPARSER_OPERATOR_POD_NAME"),
        description="this replica's name in the Lease (downward API)",
    )
    golden_sources: str = Field(
        ",".join(DEFAULT_SOURCES),
        description="comma-separated URI prefixes a golden.uri may name; {namespace} in one is "
        "the DocParser's namespace (providers/golden_uri.py)",
    )
    prometheus_urls: str = Field(
        "",
        description="comma-separated http(s) URL prefixes a DocParser's "
        "spec.canary.analysis.prometheus.url may name; {namespace} in one is the DocParser's "
        "namespace (providers/urls.py); empty: none",
    )
    kubeconfig: str | None = Field(
        None,
        validation_alias=AliasChoices("KUBECONFIG", "DOCPARSER_OPERATOR_KUBECONFIG"),
        description="kubeconfig path(s) when not running in a pod (the standard KUBECONFIG)",
    )

    @field_validator("prometheus_urls", "golden_sources")
    @classmethod
    def _plain_prefixes(cls, value: str, info: ValidationInfo) -> str:
        """A bad allow-list entry stops start-up with its name (never a list that silently
        admits less, or more, than the admin wrote)."""
        entries = [p.strip() for p in value.split(",") if p.strip()]
        if info.field_name == "prometheus_urls":
            AllowList.of(entries, "DOCPARSER_OPERATOR_PROMETHEUS_URLS")
        else:
            http_allow_list(entries)
        return value

    @property
    def golden_source_prefixes(self) -> tuple[str, ...]:
        return tuple(p.strip() for p in self.golden_sources.split(",") if p.strip())

    @property
    def prometheus_url_prefixes(self) -> tuple[str, ...]:
        return tuple(p.strip() for p in self.prometheus_urls.split(",") if p.strip())


def load() -> OperatorSettings:
    return OperatorSettings()

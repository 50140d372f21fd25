"""``spec.pod`` (placement, identity and extra settings of the runtime pods) and the env
rule it shares with ``spec.canary.runtime.env``: names the operator renders are refused.

Apart from models.py so the spec's pass-through Kubernetes settings sit in one place.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from docparser_operator.api import naming
from docparser_operator.api.wire import SecretRef, WireModel


class EnvVar(BaseModel):
    """A core/v1 EnvVar: its name is checked here, the rest (value, valueFrom) by the API
    server inside the Deployment."""

    model_config = ConfigDict(extra="allow", frozen=True)
    name: Annotated[str, Field(min_length=1, max_length=253)]


class PodSettings(WireModel):
    """Placement, identity and extra settings of the runtime pods (both tracks).

    Kubernetes objects (tolerations, affinity, spread constraints, env) pass through as
    given; the API server validates them inside the Deployment. What the operator owns is
    refused: its labels (selectors) and the env it renders from the spec."""

    tolerations: Annotated[list[dict[str, Any]], Field(max_length=32)] = Field(default_factory=list)
    affinity: dict[str, Any] | None = None
    topology_spread_constraints: Annotated[list[dict[str, Any]], Field(max_length=8)] | None = (
        None  # None: spread the runtime pods across nodes
    )
    priority_class_name: Annotated[str, Field(min_length=1, max_length=253)] | None = None
    runtime_class_name: Annotated[str, Field(min_length=1, max_length=253)] | None = None
    image_pull_secrets: Annotated[list[SecretRef], Field(max_length=16)] = Field(
        default_factory=list
    )
    service_account_name: Annotated[str, Field(min_length=1, max_length=253)] | None = None
    annotations: Annotated[dict[str, str], Field(max_length=64)] = Field(default_factory=dict)
    labels: Annotated[dict[str, Annotated[str, Field(max_length=63)]], Field(max_length=32)] = (
        Field(default_factory=dict)
    )
    env: Annotated[list[EnvVar], Field(max_length=64)] = Field(default_factory=list)
    env_from: Annotated[list[dict[str, Any]], Field(max_length=16)] = Field(default_factory=list)

    @model_validator(mode="after")
    def _owned_fields(self) -> PodSettings:
        taken = sorted(
            k
            for k in self.labels
            if k in naming.RESERVED_LABELS or k.startswith(naming.RESERVED_LABEL_PREFIX)
        )
        if taken:
            raise ValueError(
                f"pod.labels may not set {', '.join(taken)}: the operator selects pods by them"
            )
        check_env(self.env, "pod.env")
        return self


def check_env(env: list[EnvVar], where: str) -> None:
    """Each name once, and none the operator renders (it would be overwritten silently)."""
    names = [e.name for e in env]
    owned = sorted(set(names) & naming.OPERATOR_ENV)
    if owned:
        raise ValueError(
            f"{where} may not set {', '.join(owned)}: the operator renders it from the spec "
            "(change the spec field instead)"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: each name at most once")

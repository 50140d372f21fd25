"""Operator settings (env vars ``DOCPARSER_OPERATOR_<FIELD>``; nothing else reads os.environ).

Why a separate prefix from the runtime's ``DOCPARSER_``: the operator Deployment and the
runtime pods are configured independently, and a runtime knob must never leak into the
operator by accident.
"""

from __future__ import annotations

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class OperatorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DOCPARSER_OPERATOR_", extra="ignore")

    resync_interval_s: float = Field(60.0, gt=0, description="drift-correction timer period")
    resync_initial_delay_s: float = Field(5.0, ge=0, description="timer start after (re)start")
    request_timeout_s: float = Field(30.0, gt=0, description="one API request")
    retry_delay_s: float = Field(5.0, gt=0, description="backoff after a transient API error")
    liveness_endpoint: str | None = Field(
        None, description="e.g. http://0.0.0.0:8080/healthz for the operator pod's probe"
    )
    log_level: str = "INFO"
    kubeconfig: str | None = Field(
        None,
        validation_alias=AliasChoices("KUBECONFIG", "DOCPARSER_OPERATOR_KUBECONFIG"),
        description="kubeconfig path(s) when not running in a pod (the standard KUBECONFIG)",
    )


def load() -> OperatorSettings:
    return OperatorSettings()

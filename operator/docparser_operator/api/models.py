"""Typed DocParser spec and status (pydantic v2), mirroring crds/docparser.yaml.

The CRD is what the API server enforces; these models are what the renderers read. Both
describe the same fields, types, enums, defaults and ranges (tests/operator/api/test_models.py
walks the two and fails on any difference), and the model repeats the CRD's CEL rules with
the same messages so `docparser-operator render -f` rejects what `kubectl apply` would.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from docparser_operator.api import uri as uris
from docparser_operator.api.analysis_spec import CanaryAnalysis
from docparser_operator.api.batch_spec import BatchSpec
from docparser_operator.api.capacity_spec import CapacitySpec
from docparser_operator.api.pod import EnvVar, PodSettings, check_env
from docparser_operator.api.replicas import Replicas
from docparser_operator.api.status_models import DocParserStatus
from docparser_operator.api.wire import SecretRef, WireModel

EngineName = Literal["deepseek-ocr2", "rapidocr"]
MAX_TIER = 6  # tiles are 0 or 2..6 (DESIGN); auto is sized and capped here
SHA256_PATTERN = r"^[0-9a-f]{64}$"
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$"
CPU_PATTERN = r"^[0-9]+(\.[0-9]+)?m?$"
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
PVC_URI_PATTERN = r"^pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?/.+$"


class SecretKeyRef(WireModel):
    name: Annotated[str, Field(min_length=1, max_length=253)]
    key: Annotated[str, Field(min_length=1, max_length=253)] = "url"


class Weights(WireModel):
    uri: Annotated[
        str, Field(min_length=1, max_length=2048, pattern=r"^(s3|gs|https?|file|pvc)://.+$")
    ]
    version: Annotated[
        str,
        Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"),
    ]
    sha256: Annotated[str, Field(max_length=64)]
    credentials_secret_ref: SecretRef | None = None

    @model_validator(mode="after")
    def _cel_rules(self) -> Weights:
        if not re.fullmatch(SHA256_PATTERN, self.sha256):
            raise ValueError("sha256 must be 64 lowercase hex characters")
        if self.uri.startswith("pvc://") and not re.fullmatch(PVC_URI_PATTERN, self.uri):
            raise ValueError("a pvc:// uri must look like pvc://CLAIM/PATH")
        # Past the CRD's pattern, the one URI parser (api/uri.py): a malformed URI (a bad IPv6
        # literal, a port that is not a number) is a reason code here, not an init container
        # failing in every pod; credentials belong in credentialsSecretRef, not userinfo.
        problem = uris.problem(self.uri, uris.WEIGHTS)
        if problem is not None:
            raise ValueError(f"uri: {problem}")
        return self

    @property
    def pvc(self) -> tuple[str, str] | None:
        """(claim, path inside the claim) for pvc://CLAIM/PATH sources, else None."""
        if not self.uri.startswith("pvc://"):
            return None
        claim, _, path = self.uri.removeprefix("pvc://").partition("/")
        return claim, path


class Rollout(WireModel):
    max_surge: Annotated[int, Field(ge=0, le=100)] = 1
    # how long a drain's eviction is held while no replacement can come up (core/plan/drain.py)
    drain_timeout_seconds: Annotated[int, Field(ge=0, le=86400)] = 600


class WeightsCache(WireModel):
    """Where fetched weights live: each pod's own emptyDir (fetched per pod), or one
    PersistentVolumeClaim per weights sha256, filled once by a Job and mounted read-only by
    every pod of every revision using it (render/weights_cache.py)."""

    mode: Literal["EmptyDir", "PersistentVolume"] = "EmptyDir"
    storage_class_name: Annotated[str, Field(min_length=1, max_length=253)] | None = None
    access_mode: Literal["ReadWriteMany", "ReadWriteOnce"] = "ReadWriteMany"
    volume_size: Annotated[str, Field(max_length=32, pattern=QUANTITY_PATTERN)] | None = None


class Autoscaling(WireModel):
    """``latency`` keeps the runtime's estimated queue wait at ``target_seconds`` (a number:
    the HPA's quantity has millisecond steps, hence the 0.001 floor); the others keep a
    count per pod at ``target``."""

    metric: Literal["queue", "backlog", "inflight", "cpu", "latency"] = "queue"
    target: Annotated[int, Field(ge=1, le=10000)] = 4
    target_seconds: Annotated[float, Field(ge=0.001, le=3600)] | None = None
    scale_down_stabilization_seconds: Annotated[int, Field(ge=0, le=3600)] = 600

    @model_validator(mode="after")
    def _cel_rules(self) -> Autoscaling:
        if self.metric == "latency" and self.target_seconds is None:
            raise ValueError(
                "autoscaling.targetSeconds is required when autoscaling.metric is latency "
                "(the queue wait in seconds to keep)"
            )
        if self.metric != "latency" and self.target_seconds is not None:
            raise ValueError(
                "autoscaling.targetSeconds applies to metric latency only "
                "(the other metrics use autoscaling.target)"
            )
        return self


class Resources(WireModel):
    gpu: Annotated[int, Field(ge=0, le=16)] | None = None
    gpu_memory: Annotated[str, Field(max_length=32, pattern=QUANTITY_PATTERN)] | None = None
    cpu: Annotated[str, Field(max_length=32, pattern=CPU_PATTERN)] | None = None
    memory: Annotated[str, Field(max_length=32, pattern=QUANTITY_PATTERN)] | None = None
    node_selector: Annotated[
        dict[str, Annotated[str, Field(max_length=253)]], Field(max_length=32)
    ] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _cel_rules(self) -> Resources:
        # The engine loads one model on one device: more GPUs would be reserved and idle.
        if self.gpu is not None and self.gpu > 1:
            raise ValueError(
                "resources.gpu above 1 is not supported yet: the engine runs on one GPU per pod "
                "(scale out with replicas)"
            )
        return self


class Runtime(WireModel):
    image: Annotated[str, Field(min_length=1, max_length=512)]
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    max_batch_size: Annotated[int, Field(ge=1, le=256)] = 8
    max_new_tokens: Annotated[int, Field(ge=1, le=8192)] = 4096
    redis_url_secret_ref: SecretKeyRef | None = None
    startup_timeout_seconds: Annotated[int, Field(ge=60, le=86400)] = 1800


class GatewayRef(WireModel):
    name: Annotated[str, Field(min_length=1, max_length=253)]
    namespace: Annotated[str, Field(min_length=1, max_length=63)] | None = None
    section_name: Annotated[str, Field(min_length=1, max_length=253)] | None = None


class Traffic(WireModel):
    router: Literal["service", "gateway"] = "service"
    gateway_ref: GatewayRef | None = None
    hostnames: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=253)]], Field(max_length=16)
    ] = Field(default_factory=list)
    # NetworkPolicyPeer objects allowed to reach the runtime pods' HTTP port; None: no policy.
    allow_from: Annotated[list[dict[str, Any]], Field(max_length=16)] | None = None

    @model_validator(mode="after")
    def _cel_rules(self) -> Traffic:
        if self.router == "gateway" and self.gateway_ref is None:
            raise ValueError("traffic.gatewayRef is required when traffic.router is gateway")
        return self


class RuntimeOverride(WireModel):
    """What the canary's pods run differently from ``spec.runtime`` (None: the same)."""

    image: Annotated[str, Field(min_length=1, max_length=512)] | None = None
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    max_batch_size: Annotated[int, Field(ge=1, le=256)] | None = None
    max_new_tokens: Annotated[int, Field(ge=1, le=8192)] | None = None
    startup_timeout_seconds: Annotated[int, Field(ge=60, le=86400)] | None = None
    # Runtime settings the spec has no field for, on the canary only (over spec.pod.env by
    # name): a canary of a setting, or a test fault (DOCPARSER_TEST_DROP_LINE_EVERY).
    env: Annotated[list[EnvVar], Field(max_length=64)] = Field(default_factory=list)

    @model_validator(mode="after")
    def _owned_env(self) -> RuntimeOverride:
        check_env(self.env, "canary.runtime.env")
        return self

    def applied_to(self, runtime: Runtime) -> Runtime:
        return runtime.model_copy(update=self.model_dump(exclude_none=True, exclude={"env"}))

    def env_over(self, pod: PodSettings) -> PodSettings:
        """spec.pod with this env over its own (same name: the canary's value)."""
        if not self.env:
            return pod
        mine = {e.name for e in self.env}
        kept = [e for e in pod.env if e.name not in mine]
        return pod.model_copy(update={"env": kept + list(self.env)})


class Shadow(WireModel):
    """Stable's pods copy a sample of the live parse requests they answered to the canary
    and compare both outputs page by page (docs/operations.md, "Shadow canary"). The budget
    is the DocParser's; each stable pod gets ``ceil(maxPagesPerMinute / stable pods)``."""

    percent: Annotated[int, Field(ge=1, le=100)] = 10
    max_pages_per_minute: Annotated[int, Field(ge=1, le=100000)] = 60


class Canary(WireModel):
    weights: Weights | None = None  # None: stable's (a runtime-only canary)
    runtime: RuntimeOverride | None = None
    weight: Annotated[int, Field(ge=0, le=100)] = 0
    analysis: CanaryAnalysis | None = None
    shadow: Shadow | None = None

    @model_validator(mode="after")
    def _cel_rules(self) -> Canary:
        steps = self.analysis.steps if self.analysis is not None else []
        if self.shadow is None and any(s.min_shadow_pages for s in steps):
            raise ValueError("analysis: a step's minShadowPages needs canary.shadow")
        return self


class KeyRef(WireModel):
    """One entry of a Secret in the DocParser's namespace."""

    name: Annotated[str, Field(min_length=1, max_length=253)]
    key: Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")] = (
        "admin-key"
    )


class Auth(WireModel):
    api_key_secret_ref: SecretRef | None = None
    admin_key_secret_ref: KeyRef | None = None  # /admin/v1/ routes (the shadow's worst pages)


class DocParserSpec(WireModel):
    engine: EngineName = "deepseek-ocr2"
    weights: Weights | None = None
    tier: int | Literal["auto"] = 6
    replicas: Replicas = Field(default_factory=Replicas)
    rollout: Rollout = Field(default_factory=Rollout)
    weights_cache: WeightsCache = Field(default_factory=WeightsCache)
    autoscaling: Autoscaling = Field(default_factory=Autoscaling)
    resources: Resources = Field(default_factory=Resources)
    runtime: Runtime
    traffic: Traffic = Field(default_factory=Traffic)
    canary: Canary | None = None
    auth: Auth | None = None
    pod: PodSettings = Field(default_factory=PodSettings)
    capacity: CapacitySpec | None = None  # status.capacity: live figures and advice
    batch: BatchSpec | None = None  # a pool of the stable revision for batch lines only

    @property
    def canary_weights(self) -> Weights | None:
        """The canary's weights: its own, else stable's (a runtime-only canary)."""
        if self.canary is None:
            return None
        return self.canary.weights or self.weights

    def for_canary(self) -> DocParserSpec:
        """The spec the canary's pods are rendered from: spec.runtime with the canary's
        runtime override applied (the same spec when there is none)."""
        if self.canary is None or self.canary.runtime is None:
            return self
        override = self.canary.runtime
        return self.model_copy(
            update={
                "runtime": override.applied_to(self.runtime),
                "pod": override.env_over(self.pod),
            }
        )

    @field_validator("tier", mode="before")
    @classmethod
    def _tier_rule(cls, tier: object) -> object:
        """The CRD's rule, before pydantic would turn "6" into 6 (the API server refuses it)."""
        number = isinstance(tier, int) and not isinstance(tier, bool) and 0 <= tier <= MAX_TIER
        if not (number or tier == "auto"):
            raise ValueError("tier must be an integer 0..6 or auto")
        return tier

    @property
    def max_tier(self) -> int:
        """The most tiles a request may get: ``tier``, or 6 for ``auto`` (sizing, the cap)."""
        return MAX_TIER if self.tier == "auto" else self.tier

    @model_validator(mode="after")
    def _cel_rules(self) -> DocParserSpec:
        if self.engine == "deepseek-ocr2" and self.weights is None:
            raise ValueError("weights is required for engine deepseek-ocr2")
        if self.replicas.min == 0 and self.runtime.redis_url_secret_ref is None:
            raise ValueError(
                "replicas.min 0 needs runtime.redisUrlSecretRef: while no pod runs, the front "
                "queues jobs in the DocParser's Redis"
            )
        if self.batch is not None and self.runtime.redis_url_secret_ref is None:
            raise ValueError(
                "batch needs runtime.redisUrlSecretRef: the batches and their backlog live in "
                "the DocParser's Redis"
            )
        if self.canary is not None:
            theirs = self.canary.weights
            other_weights = theirs is not None and (
                self.weights is None
                or (self.weights.uri, self.weights.version, self.weights.sha256)
                != (theirs.uri, theirs.version, theirs.sha256)
            )  # the CRD's rule compares these three only (credentials may differ)
            own_env = self.canary.runtime is not None and bool(self.canary.runtime.env)
            if not other_weights and self.for_canary().runtime == self.runtime and not own_env:
                raise ValueError(
                    "canary must differ from stable: other weights (uri, version or sha256) or "
                    "runtime settings"
                )  # a canary.runtime.env entry counts as a runtime setting (the CRD's rule)
        return self

    @property
    def gpus(self) -> int:
        """GPUs per pod: the explicit value, else 1 for deepseek-ocr2 and 0 for rapidocr."""
        if self.resources.gpu is not None:
            return self.resources.gpu
        return 1 if self.engine == "deepseek-ocr2" else 0

    @property
    def autoscaled(self) -> bool:
        """An HPA manages replicas exactly when the range is open (floor < max; at 0 the
        idle decision, not the HPA, scales: core/plan/idle.py)."""
        return self.replicas.floor < self.replicas.max


class ObjectMeta(BaseModel):
    """The few metadata fields rendering needs; everything else passes through untouched."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str
    namespace: str = "default"
    uid: str | None = None
    generation: int | None = None

    @model_validator(mode="after")
    def _cel_rules(self) -> ObjectMeta:
        if not (re.fullmatch(NAME_PATTERN, self.name) and len(self.name) <= 56):
            raise ValueError(
                "metadata.name must be a DNS-1035 label of at most 56 characters "
                "(child names append -canary)"
            )
        return self


class DocParser(BaseModel):
    """A whole DocParser resource as read from the API server or a manifest file."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    api_version: Literal["docparser.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["DocParser"]
    metadata: ObjectMeta
    spec: DocParserSpec
    status: DocParserStatus | None = None

    @model_validator(mode="after")
    def _cel_rules(self) -> DocParser:
        if self.spec.replicas.min == 0 and len(self.metadata.name) > 55:
            raise ValueError(
                "metadata.name of a DocParser with replicas.min 0 must be at most 55 characters "
                "(child names append -serving)"
            )
        return self

    @classmethod
    def from_resource(cls, resource: dict[str, Any]) -> DocParser:
        """Parse a resource dict (API object or manifest); raises pydantic.ValidationError."""
        return cls.model_validate(resource)

"""The DocParser CRD as a real kube-apiserver enforces it: CEL rules, pruning, defaults, status.

WHY against the real server: these are the API semantics an emulator can only imitate. Each test
also checks the operator's own model (docparser_operator.api.models) agrees with what the server
does, so `docparser-operator render -f` and `kubectl apply` accept and reject the same specs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml
from controlplane.kubeapi import KubeApi, KubeApiError
from crd_objects import BASE_SPEC, SHA_A, SHA_B, docparser, path, with_changes
from docparser_operator.api.models import DocParser, DocParserSpec

pytestmark = pytest.mark.realcluster

CRD_FILE = Path(__file__).resolve().parents[3] / "crds" / "docparser.yaml"


def crd_rule_messages() -> set[str]:
    """Every x-kubernetes-validations message in the CRD file (the rules the server runs)."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for rule in node.get("x-kubernetes-validations", []):
                found.add(rule["message"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(yaml.safe_load(CRD_FILE.read_text()))
    return found


INVALID_SPECS = {
    "replicas-min-above-max": with_changes(replicas={"min": 3, "max": 2}),
    "sha256-uppercase": with_changes(weights={**BASE_SPEC["weights"], "sha256": SHA_A.upper()}),
    "pvc-uri-without-path": with_changes(weights={**BASE_SPEC["weights"], "uri": "pvc://claim"}),
    "deepseek-without-weights": with_changes(weights=None),
    "canary-same-weights": with_changes(canary={"weights": BASE_SPEC["weights"], "weight": 10}),
    "gateway-without-ref": with_changes(traffic={"router": "gateway"}),
    "tier-not-auto": with_changes(tier="max"),
    "tier-above-6": with_changes(tier=7),
    "latency-without-target-seconds": with_changes(autoscaling={"metric": "latency"}),
    "target-seconds-without-latency": with_changes(autoscaling={"targetSeconds": 5}),
}


def model_rule_message(spec: dict[str, Any]) -> str:
    """The message of the CEL rule the operator's model says this spec breaks."""
    with pytest.raises(pydantic.ValidationError) as info:
        DocParserSpec.model_validate(spec)
    errors = [e for e in info.value.errors() if e["type"] == "value_error"]
    assert len(errors) == 1, info.value.errors()
    return str(errors[0]["ctx"]["error"])


@pytest.mark.parametrize("case", sorted(INVALID_SPECS))
def test_cel_violation_is_rejected_with_the_rules_message(
    real_api: KubeApi, real_namespace: str, case: str
) -> None:
    spec = INVALID_SPECS[case]
    expected = model_rule_message(spec)
    assert expected in crd_rule_messages(), "the model checks a rule the CRD does not have"

    with pytest.raises(KubeApiError) as info:
        real_api.create(path(real_namespace), docparser(case, spec))

    assert info.value.status_code == 422
    assert info.value.reason == "Invalid"
    assert expected in str(info.value.body["message"])
    with pytest.raises(KubeApiError) as missing:
        real_api.get(path(real_namespace, case))
    assert missing.value.status_code == 404


def test_root_rule_rejects_names_too_long_for_child_suffixes(
    real_api: KubeApi, real_namespace: str
) -> None:
    """57 characters is a valid object name but leaves no room for "-canary" on children."""
    message = next(m for m in crd_rule_messages() if m.startswith("metadata.name must"))
    with pytest.raises(KubeApiError) as info:
        real_api.create(path(real_namespace), docparser("a" * 57, BASE_SPEC))
    assert info.value.status_code == 422
    assert message in info.value.body["message"]
    assert real_api.create(path(real_namespace), docparser("a" * 56, BASE_SPEC))["metadata"]


def test_scale_to_zero_needs_redis_and_room_for_serving(
    real_api: KubeApi, real_namespace: str
) -> None:
    """replicas.min 0: refused without Redis, and with a name longer than 55 characters (the
    child Service <name>-serving); accepted otherwise, with the scaleToZero defaults. The
    model agrees on each."""
    redis = {**BASE_SPEC["runtime"], "redisUrlSecretRef": {"name": "redis"}}
    no_redis = with_changes(replicas={"min": 0, "max": 2})
    for name, spec, rule in (
        ("noredis", no_redis, "replicas.min 0 needs runtime.redisUrlSecretRef"),
        ("a" * 56, with_changes(replicas={"min": 0, "max": 2}, runtime=redis), "at most 55"),
    ):
        with pytest.raises(KubeApiError) as info:
            real_api.create(path(real_namespace), docparser(name, spec))
        assert info.value.status_code == 422 and rule in info.value.body["message"]
        with pytest.raises(pydantic.ValidationError, match=rule):
            DocParser.from_resource(docparser(name, spec))
    spec = with_changes(replicas={"min": 0, "max": 2, "scaleToZero": {}}, runtime=redis)
    created = real_api.create(path(real_namespace), docparser("a" * 55, spec))
    assert created["spec"]["replicas"]["scaleToZero"] == {
        "after": "15m",
        "holdSeconds": 120,
        "retryAfterSeconds": 30,
    }
    model = DocParser.from_resource(created).spec.replicas
    assert model.idle_policy is not None and model.idle_policy.after_seconds == 900


def test_valid_spec_is_accepted_by_server_and_model(real_api: KubeApi, real_namespace: str) -> None:
    spec = with_changes(
        canary={"weights": {**BASE_SPEC["weights"], "version": "2026-03-01", "sha256": SHA_B}},
        replicas={"min": 1, "max": 4},
        traffic={"router": "gateway", "gatewayRef": {"name": "web", "namespace": "infra"}},
        tier="auto",
    )
    DocParserSpec.model_validate(spec)
    created = real_api.create(path(real_namespace), docparser("valid", spec))
    assert created["spec"]["canary"]["weights"]["sha256"] == SHA_B
    assert created["spec"]["tier"] == "auto"
    assert created["metadata"]["generation"] == 1


def test_latency_autoscaling_is_accepted_with_its_seconds(
    real_api: KubeApi, real_namespace: str
) -> None:
    """The latency rules hold for a spec that names the metric, and the server still
    accepts the CRD's own ``autoscaling: {}`` default (it checks defaults against the rules
    before filling the fields inside them: a rule that read ``self.metric`` alone was
    refused as 'no such key' when the CRD was applied)."""
    spec = with_changes(autoscaling={"metric": "latency", "targetSeconds": 2.5})
    DocParserSpec.model_validate(spec)
    created = real_api.create(path(real_namespace), docparser("latency", spec))
    assert created["spec"]["autoscaling"]["targetSeconds"] == 2.5
    assert created["spec"]["autoscaling"]["target"] == 4  # defaulted, unused by latency


def test_unknown_fields_are_pruned_and_strict_validation_rejects_them(
    real_api: KubeApi, real_namespace: str
) -> None:
    spec = with_changes(
        surprise="x", runtime={**BASE_SPEC["runtime"], "gpuFlavour": "hot"}, replicas={"mn": 2}
    )
    body = docparser("pruned", spec, extraTopLevel={"a": 1})

    with pytest.raises(KubeApiError) as strict:
        real_api.create(path(real_namespace), body, fieldValidation="Strict")
    assert strict.value.status_code == 400  # a decoding error, before any schema validation
    assert 'strict decoding error: unknown field "extraTopLevel"' in strict.value.body["message"]
    assert 'unknown field "spec.surprise"' in strict.value.body["message"]

    created = real_api.create(path(real_namespace), body)
    warnings = " ".join(real_api.last_warnings)
    for unknown in ("spec.surprise", "spec.runtime.gpuFlavour", "spec.replicas.mn"):
        assert unknown in warnings
    stored = real_api.get(path(real_namespace, "pruned"))
    assert stored == created
    assert "extraTopLevel" not in stored
    assert "surprise" not in stored["spec"]
    assert "gpuFlavour" not in stored["spec"]["runtime"]
    assert "mn" not in stored["spec"]["replicas"]
    assert stored["spec"]["runtime"]["image"] == BASE_SPEC["runtime"]["image"]


def drop_empty(value: Any) -> Any:
    """Recursively drop empty maps/lists: absent and empty mean the same to the renderers."""
    if isinstance(value, dict):
        cleaned = {k: drop_empty(v) for k, v in value.items()}
        return {k: v for k, v in cleaned.items() if v not in ({}, [], None)}
    if isinstance(value, list):
        return [drop_empty(v) for v in value]
    return value


@pytest.mark.parametrize(
    "spec",
    [
        {"engine": "rapidocr", "runtime": {"image": "r:1"}},
        with_changes(replicas={"max": 3}, autoscaling={"metric": "cpu"}, resources={"gpu": 1}),
    ],
    ids=["minimal-rapidocr", "partial-objects"],
)
def test_server_defaults_match_the_model_defaults(
    real_api: KubeApi, real_namespace: str, spec: dict[str, Any]
) -> None:
    created = real_api.create(path(real_namespace), docparser("defaults", spec))
    model = DocParserSpec.model_validate(spec).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    assert drop_empty(created["spec"]) == drop_empty(model)
    assert created["spec"] != spec, "the server applied no default at all"


def test_status_is_written_only_through_the_status_subresource(
    real_api: KubeApi, real_namespace: str
) -> None:
    name = "status"
    created = real_api.create(
        path(real_namespace), docparser(name, BASE_SPEC, status={"observedGeneration": 7})
    )
    # the client's status is dropped; what shows is the CRD's default (observedGeneration 0,
    # so Flux and Argo CD read a DocParser nobody acted on as InProgress, not Current)
    assert created["status"] == {"observedGeneration": 0}, "status on create must be dropped"
    assert created["metadata"]["generation"] == 1

    # A write to the main resource changes spec (and generation) but never status.
    patched = real_api.merge_patch(
        path(real_namespace, name), {"spec": {"tier": 2}, "status": {"observedGeneration": 9}}
    )
    assert patched["spec"]["tier"] == 2
    assert patched["status"] == {"observedGeneration": 0}
    assert patched["metadata"]["generation"] == 2

    # A write to /status changes status only: spec edits there are ignored, generation stays.
    status = {"observedGeneration": 2, "endpoint": "http://status.ns.svc:8000", "replicas": 0}
    written = real_api.merge_patch(
        path(real_namespace, name, "status"), {"spec": {"tier": 5}, "status": status}
    )
    assert written["status"] == status
    assert written["spec"]["tier"] == 2
    assert written["metadata"]["generation"] == 2
    assert real_api.get(path(real_namespace, name))["status"] == status


def test_scale_subresource_writes_the_autoscalers_size(
    real_api: KubeApi, real_namespace: str
) -> None:
    """The HPA (or `kubectl scale`) reads and writes /scale, which maps to
    spec.replicas.desired (defaulted, so /scale always reads); min and max stay the user's,
    and the operator clamps the size into them rather than rejecting a GitOps edit of max."""
    name = "scaled"
    real_api.create(
        path(real_namespace), docparser(name, with_changes(replicas={"min": 1, "max": 4}))
    )
    scale = real_api.get(path(real_namespace, name, "scale"))
    assert scale["spec"]["replicas"] == 1

    real_api.merge_patch(path(real_namespace, name, "scale"), {"spec": {"replicas": 3}})
    live = real_api.get(path(real_namespace, name))
    assert live["spec"]["replicas"] == {"min": 1, "max": 4, "desired": 3}

    real_api.merge_patch(path(real_namespace, name, "scale"), {"spec": {"replicas": 9}})
    live = real_api.get(path(real_namespace, name))
    assert DocParser.from_resource(live).spec.replicas.size == 4  # clamped to max

    with pytest.raises(KubeApiError) as info:
        real_api.merge_patch(path(real_namespace, name), {"spec": {"replicas": {"min": 5}}})
    assert info.value.status_code == 422
    assert model_rule_message(with_changes(replicas={"min": 5, "max": 4})) in str(info.value)

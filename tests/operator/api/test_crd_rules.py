"""The CRD accepts every example and rejects every invalid manifest for exactly its reason.

Offline admission (crd_tools.admit): structural defaults, the openAPIV3Schema via jsonschema,
then the x-kubernetes-validations CEL rules via cel-python. Each tests/operator/invalid/*.yaml
breaks one rule and lists every error it must produce in ``# expect:`` lines (layer schema,
cel or model); anything more or less fails. The typed model must reject it too, with the same
message for CEL rules, so `render -f` and `kubectl apply` agree.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pydantic
import pytest
from crd_tools import (
    CRD_FILE,
    EXAMPLES_DIR,
    INVALID_DIR,
    _program,
    admit,
    expectations,
    iter_rules,
    load_crd,
    load_yaml,
    root_schema,
)
from docparser_operator.api.models import DocParser
from docparser_operator.cli.main import render_resource

EXAMPLES = sorted(EXAMPLES_DIR.glob("*.yaml"))
INVALID = sorted(INVALID_DIR.glob("*.yaml"))
SHA_C = "c" * 64


def _ids(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]


def test_there_are_examples_and_invalid_cases() -> None:
    assert len(EXAMPLES) >= 3
    assert len(INVALID) >= 10


@pytest.mark.parametrize("path", EXAMPLES, ids=_ids(EXAMPLES))
def test_example_is_accepted(path: Path) -> None:
    admission = admit(load_yaml(path))
    assert admission.schema == []
    assert admission.cel == []
    DocParser.from_resource(load_yaml(path))


@pytest.mark.parametrize("path", INVALID, ids=_ids(INVALID))
def test_invalid_manifest_is_rejected_exactly_as_intended(path: Path) -> None:
    expected = expectations(path)
    assert expected, f"{path.name} has no '# expect:' lines"
    admission = admit(load_yaml(path))
    assert admission.schema == sorted(t for layer, t in expected if layer == "schema")
    assert admission.cel == [t for layer, t in expected if layer == "cel"]
    with pytest.raises(pydantic.ValidationError) as caught:
        DocParser.from_resource(load_yaml(path))
    model_messages = [e["msg"].removeprefix("Value error, ") for e in caught.value.errors()]
    assert model_messages == [t for layer, t in expected if layer == "model"]


def test_every_cel_rule_compiles_and_is_exercised_by_an_invalid_manifest() -> None:
    # An error's path is the data path (schedule[0]); the schema's is schedule[].
    expected_cel = {
        re.sub(r"\[\d+\]", "[]", t)
        for p in INVALID
        for layer, t in expectations(p)
        if layer == "cel"
    }
    for rule in iter_rules(root_schema()):
        _program(rule.rule)  # raises on a rule cel-python cannot compile
        where = f"{rule.path}: " if rule.path else ""
        assert f"{where}{rule.message}" in expected_cel, f"untested rule {rule}"


def _with(resource: dict, **spec_changes: object) -> dict:
    changed = copy.deepcopy(resource)
    changed["spec"].update(spec_changes)
    return changed


@pytest.fixture
def gateway_canary() -> dict:
    return load_yaml(EXAMPLES_DIR / "deepseek-gateway-canary.yaml")


@pytest.mark.parametrize("weight", [0, 1, 99, 100])
def test_canary_weight_bounds_are_inclusive(gateway_canary: dict, weight: int) -> None:
    canary = dict(gateway_canary["spec"]["canary"], weight=weight)
    assert admit(_with(gateway_canary, canary=canary)).accepted


@pytest.mark.parametrize("field", ["uri", "version", "sha256"])
def test_canary_differing_in_one_field_is_enough(gateway_canary: dict, field: str) -> None:
    weights = dict(gateway_canary["spec"]["weights"])
    weights[field] = {"uri": "s3://other/place", "version": "other", "sha256": SHA_C}[field]
    canary = {"weights": weights, "weight": 5}
    assert admit(_with(gateway_canary, canary=canary)).accepted


def test_service_router_needs_no_gateway_ref(gateway_canary: dict) -> None:
    assert admit(_with(gateway_canary, traffic={"router": "service"})).accepted


def test_uppercase_sha256_is_rejected(gateway_canary: dict) -> None:
    weights = dict(gateway_canary["spec"]["weights"], sha256="A" * 64)
    admission = admit(_with(gateway_canary, weights=weights))
    assert admission.cel == ["spec.weights: sha256 must be 64 lowercase hex characters"]


def test_defaults_fill_an_empty_spec_like_the_api_server() -> None:
    minimal = load_yaml(EXAMPLES_DIR / "rapidocr-minimal.yaml")
    spec = admit(minimal).defaulted["spec"]
    assert spec["tier"] == 6
    assert spec["replicas"] == {"min": 1, "max": 1, "desired": 1}
    assert spec["rollout"] == {"maxSurge": 1, "drainTimeoutSeconds": 600}
    assert spec["autoscaling"] == {
        "metric": "queue",
        "target": 4,
        "scaleDownStabilizationSeconds": 600,
    }
    assert spec["traffic"] == {"router": "service"}
    assert spec["runtime"]["maxBatchSize"] == 8
    assert spec["runtime"]["startupTimeoutSeconds"] >= 20 * 60
    assert "gpu" not in spec["resources"]  # engine-dependent, resolved by the operator


def _walk(schema: dict, path: str):
    yield path, schema
    for key, sub in schema.get("properties", {}).items():
        yield from _walk(sub, f"{path}.{key}")
    if isinstance(schema.get("items"), dict):
        yield from _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _walk(schema["additionalProperties"], f"{path}{{}}")


def test_schema_is_structural_and_every_field_is_described() -> None:
    schema = root_schema()
    for path, node in _walk(schema, ""):
        # x-kubernetes-int-or-string is the one structural node without a type
        typed = "type" in node or node.get("x-kubernetes-int-or-string") is True
        assert typed, f"{path or '<root>'} has no type (not structural)"
        if path in {".metadata"} or path.endswith("{}") or path.endswith("[]"):
            continue
        assert node.get("description"), f"{path or '<root>'} has no description"


def test_crd_names_subresources_and_printer_columns() -> None:
    crd = load_crd()
    assert crd["metadata"]["name"] == "docparsers.docparser.io"
    spec = crd["spec"]
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "DocParser"
    assert spec["names"]["shortNames"] == ["dp"]
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    scale = version["subresources"]["scale"]
    assert version["subresources"]["status"] == {}
    schema = root_schema(crd)
    # Every scale path points at an integer/string field of the schema.
    for key, kind in [("specReplicasPath", "integer"), ("statusReplicasPath", "integer")]:
        node = schema
        for part in scale[key].strip(".").split("."):
            node = node["properties"][part]
        assert node["type"] == kind
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == [
        "Ready",
        "Reason",
        "Stable",
        "Canary",
        "Weight",
        "Analysis",
        "Step",
        "Tier",
        "Replicas",
        "Age",
    ]
    assert "&" not in CRD_FILE.read_text().split("apiVersion:", 1)[1].replace("&&", "")


def test_canary_differing_only_in_credentials_is_rejected_by_both(gateway_canary: dict) -> None:
    """The CEL rule compares uri, version and sha256; `render -f` (the model) must agree, or
    it would render manifests the API server refuses."""
    same = dict(gateway_canary["spec"]["weights"], credentialsSecretRef={"name": "other-keys"})
    resource = _with(gateway_canary, canary={"weights": same, "weight": 5})
    admission = admit(resource)
    assert admission.cel == [
        "spec: canary must differ from stable: other weights (uri, version or sha256) or "
        "runtime settings"
    ]
    with pytest.raises(pydantic.ValidationError, match=r"canary must differ from stable"):
        DocParser.from_resource(resource)


def test_canary_with_the_same_weights_needs_other_runtime_settings(gateway_canary: dict) -> None:
    """An image bump (same weights) is a canary; an override that changes nothing is not.
    Admission (CEL) and the model (`render -f`) agree on both."""
    weights = gateway_canary["spec"]["weights"]
    image = gateway_canary["spec"]["runtime"]["image"]
    bump = _with(gateway_canary, canary={"weights": weights, "runtime": {"image": image + "-rc1"}})
    assert admit(bump).cel == []
    assert DocParser.from_resource(bump).spec.for_canary().runtime.image == image + "-rc1"
    noop = _with(gateway_canary, canary={"weights": weights, "runtime": {"image": image}})
    message = (
        "canary must differ from stable: other weights (uri, version or sha256) or runtime settings"
    )
    assert admit(noop).cel == [f"spec: {message}"]
    with pytest.raises(pydantic.ValidationError, match="canary must differ from stable"):
        DocParser.from_resource(noop)


def test_a_runtime_only_canary_needs_no_weights(gateway_canary: dict) -> None:
    """A canary of a new runtime image or setting: no weights (stable's), accepted by the CRD
    and the model; the canary's pods run stable's weights with the new image."""
    image = gateway_canary["spec"]["runtime"]["image"] + "-rc2"
    canary = {"runtime": {"image": image}, "weight": 10}
    resource = _with(gateway_canary, canary=canary)
    assert admit(resource).accepted
    spec = DocParser.from_resource(resource).spec
    assert spec.canary_weights == spec.weights and spec.for_canary().runtime.image == image
    same = _with(gateway_canary, canary={"weight": 10})  # differs in nothing
    assert admit(same).cel == [
        "spec: canary must differ from stable: other weights (uri, version or sha256) or "
        "runtime settings"
    ]
    with pytest.raises(pydantic.ValidationError, match="canary must differ from stable"):
        DocParser.from_resource(same)


def test_a_cpu_docparser_can_canary_a_runtime_image() -> None:
    resource = load_yaml(EXAMPLES_DIR / "rapidocr-runtime-canary.yaml")
    assert admit(resource).accepted

    images = {
        o["metadata"]["labels"].get("docparser.io/track"): o["spec"]["template"]["spec"][
            "containers"
        ][0]["image"]
        for o in render_resource(resource)
        if o["kind"] == "Deployment"
    }
    assert images == {
        "stable": "ghcr.io/docparser/docparser-runtime:0.1.0",
        "canary": "ghcr.io/docparser/docparser-runtime:0.2.0",
    }

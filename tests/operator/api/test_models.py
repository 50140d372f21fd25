"""The typed models (docparser_operator.api.models) and the CRD schema describe the same API.

Both trees are walked side by side: the same properties, types, enums, required fields,
ranges, lengths and patterns at every node, and defaults that mean the same thing (a CRD
``default: {}`` on an object equals the model's default instance after CRD defaulting).
"""

from __future__ import annotations

from typing import Any

import pytest
from crd_tools import EXAMPLES_DIR, admit, apply_defaults, load_yaml, root_schema
from docparser_operator.api.models import DocParser, DocParserSpec
from docparser_operator.api.status_models import DocParserStatus
from dp_helpers import docparser

CONSTRAINTS = (
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "maxItems",
    "maxProperties",
    "enum",
)


def _resolve(node: dict, defs: dict) -> tuple[dict, bool]:
    """Follow $ref and unwrap ``X | None``; returns (schema, nullable)."""
    nullable = False
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        nullable = len(options) < len(node["anyOf"])
        assert len(options) == 1, node
        merged = {k: v for k, v in node.items() if k != "anyOf"}
        node = {**options[0], **merged}
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[1]]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node, nullable


def _compare(model: dict, crd: dict, defs: dict, path: str, model_cls: Any = None) -> list[str]:
    diffs: list[str] = []
    if crd.get("x-kubernetes-int-or-string"):
        # int-or-string: the model is ``int | Literal[...]``; ranges live in the CEL rule,
        # which the model repeats (tests/operator/invalid/).
        types = sorted(o.get("type") for o in model.get("anyOf", [model]))
        return [] if types == ["integer", "string"] else [f"{path}: int-or-string != {types}"]
    model, _ = _resolve(model, defs)
    if model.get("type") != crd.get("type"):
        diffs.append(f"{path}: type {model.get('type')} != {crd.get('type')}")
    for key in CONSTRAINTS:
        if model.get(key) != crd.get(key):
            diffs.append(f"{path}: {key} {model.get(key)!r} != {crd.get(key)!r}")
    if crd.get("type") == "object" and "properties" in crd:
        m_props, c_props = model.get("properties", {}), crd["properties"]
        if set(m_props) != set(c_props):
            diffs.append(f"{path}: properties {sorted(m_props)} != {sorted(c_props)}")
        if sorted(model.get("required", [])) != sorted(crd.get("required", [])):
            diffs.append(f"{path}: required {model.get('required')} != {crd.get('required')}")
        for key in set(m_props) & set(c_props):
            diffs += _compare_default(m_props[key], c_props[key], defs, f"{path}.{key}")
            diffs += _compare(m_props[key], c_props[key], defs, f"{path}.{key}")
    if isinstance(crd.get("additionalProperties"), dict):
        diffs += _compare(
            model["additionalProperties"], crd["additionalProperties"], defs, f"{path}{{}}"
        )
    if "items" in crd:
        diffs += _compare(model["items"], crd["items"], defs, f"{path}[]")
    return diffs


def _compare_default(model: dict, crd: dict, defs: dict, path: str) -> list[str]:
    if crd.get("x-kubernetes-int-or-string"):
        same = model.get("default") == crd.get("default")
        return (
            [] if same else [f"{path}: default {model.get('default')!r} != {crd.get('default')!r}"]
        )
    resolved, _ = _resolve(model, defs)
    if "default" in crd:
        expected = apply_defaults(crd, crd["default"])
        if resolved.get("type") == "object" and "properties" in resolved:
            # Object defaults come from default_factory (absent in JSON schema): compare the
            # instance the model builds from {} with what CRD defaulting builds from {}.
            if "default" in model:
                return [f"{path}: model default {model['default']!r}, CRD {crd['default']!r}"]
            return []  # checked by test_object_defaults_match below
        if model.get("default") != expected:
            return [f"{path}: default {model.get('default')!r} != {expected!r}"]
        return []
    # No CRD default: the model may only default to "absent" (None or an empty collection).
    if "default" in model and model["default"] not in (None, [], {}):
        return [f"{path}: model default {model['default']!r} but the CRD has none"]
    return []


def _spec_schema() -> dict:
    return root_schema()["properties"]["spec"]


def test_spec_model_matches_crd_schema() -> None:
    schema = DocParserSpec.model_json_schema(by_alias=True)
    assert _compare(schema, _spec_schema(), schema.get("$defs", {}), "spec") == []


def test_status_model_matches_crd_schema() -> None:
    schema = DocParserStatus.model_json_schema(by_alias=True)
    crd_status = root_schema()["properties"]["status"]
    assert _compare(schema, crd_status, schema.get("$defs", {}), "status") == []


@pytest.mark.parametrize("field", ["replicas", "autoscaling", "resources", "traffic"])
def test_object_defaults_match(field: str) -> None:
    crd_field = _spec_schema()["properties"][field]
    from_crd = apply_defaults(crd_field, dict(crd_field["default"]))
    instance = DocParserSpec.model_fields[field].get_default(call_default_factory=True)
    dumped = instance.model_dump(by_alias=True, exclude_none=True)
    # Empty collections are the model's spelling of "absent" (the CRD has no default there).
    assert {k: v for k, v in dumped.items() if v not in ({}, [])} == from_crd


@pytest.mark.parametrize("path", sorted(EXAMPLES_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_model_defaults_equal_api_server_defaults_on_examples(path) -> None:
    """Parse the raw manifest with the model and the CRD-defaulted one: same spec."""
    raw = load_yaml(path)
    from_model = DocParser.from_resource(raw).spec
    from_server = DocParser.from_resource(admit(raw).defaulted).spec
    assert from_model == from_server


def test_the_walk_detects_a_disagreement() -> None:
    """Guard against a comparison that cannot fail: perturb the CRD and expect differences."""
    schema = DocParserSpec.model_json_schema(by_alias=True)
    crd = _spec_schema()
    crd["properties"]["tier"]["default"] = 5
    crd["properties"]["replicas"]["properties"]["min"]["minimum"] = 7
    crd["properties"]["runtime"]["properties"]["maxBatchSize"]["default"] = 16
    del crd["properties"]["traffic"]["properties"]["hostnames"]
    diffs = _compare(schema, crd, schema.get("$defs", {}), "spec")
    assert any("spec.tier: default" in d for d in diffs)
    assert any("spec.replicas.min: minimum" in d for d in diffs)
    assert any("spec.runtime.maxBatchSize: default" in d for d in diffs)
    assert any("spec.traffic: properties" in d for d in diffs)


def test_a_status_written_by_a_newer_operator_still_parses() -> None:
    """Helm never downgrades a CRD, so after a rollback the API server serves status fields
    only a newer operator knows; the DocParser must stay readable (a spec field nobody knows
    is still refused: that one a person wrote)."""
    newer = {
        "observedGeneration": 3,
        "stable": {"revision": "a1b2c3", "readyReplicas": 2, "warmPool": 1},
        "canary": {"revision": "d4", "shadow": {"enabled": True, "percent": 5, "p99Cer": 0.1}},
        "capacity": {"window": "1h", "recommended": {"replicas": 3, "gpuType": "h200"}},
        "batch": {"replicas": 1, "spotInterruptions": 2},
        "futureSection": {"phase": "On"},
    }
    status = DocParserStatus.model_validate(newer)
    assert status.stable is not None and status.stable.revision == "a1b2c3"
    assert status.canary is not None and status.canary.shadow is not None
    assert status.batch is not None and status.batch.replicas == 1
    assert "futureSection" not in status.to_wire()
    body = {**docparser("inv"), "status": newer}
    assert DocParser.model_validate(body).status == status
    with pytest.raises(ValueError, match="futureField"):
        DocParser.model_validate({**body, "spec": {**body["spec"], "futureField": 1}})

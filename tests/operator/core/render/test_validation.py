"""Every rendered object is valid against the official schemas.

Core kinds: kubernetes-validate in strict mode (unknown fields are errors) for Kubernetes
1.30 and the newest version it ships. HTTPRoute: the Gateway API v1 CRD's openAPIV3Schema
(made strict the same way) plus its CEL rules, from the official CRD files of the
`sigs.k8s.io/gateway-api` Go module (fetched into the cache by tests/controlplane/gateway_crds.py,
which `make test` runs; not copied into the repo).
"""

from __future__ import annotations

import copy
import functools

import kubernetes_validate
import pytest
import yaml
from controlplane import gateway_crds
from crd_tools import apply_defaults, cel_errors, schema_errors
from docparser_operator.cli.main import render_resource
from golden import CASES, Case, of_kind

VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]
CORE_KINDS = ["Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"]
HTTPROUTE_CRD = gateway_crds.crds_dir() / gateway_crds.HTTPROUTES


@pytest.fixture(autouse=True, scope="module")
def _cached_schemas():
    """kubernetes-validate re-reads its multi-MB definitions on every call; cache them here."""
    utils = kubernetes_validate.utils
    original = utils.schema_contents
    utils.schema_contents = functools.lru_cache(maxsize=64)(original)
    yield
    utils.schema_contents = original


def _objects(case: Case) -> list[dict]:
    return render_resource(case.resource(), canary_ready=case.canary_ready)


def test_newest_version_is_newer_than_1_30() -> None:
    major, minor = (int(x) for x in VERSIONS[1].split(".")[:2])
    assert (major, minor) > (1, 30)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_core_objects_validate_strictly(case: Case, version: str) -> None:
    objects = [o for o in _objects(case) if o["kind"] in CORE_KINDS]
    assert objects
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            pytest.fail(
                f"{obj['kind']}/{obj['metadata']['name']} @ {version}: {path}: {exc.message}"
            )


@pytest.mark.parametrize("version", VERSIONS)
def test_latency_hpa_validates_strictly(version: str) -> None:
    """The latency metric's HPA (a Pods metric, a millisecond quantity) is a valid object."""
    resource = Case("deepseek-gateway-canary").resource()
    resource["spec"]["autoscaling"] = {"metric": "latency", "targetSeconds": 2.5}
    (hpa,) = of_kind(render_resource(resource), "HorizontalPodAutoscaler")
    assert hpa["spec"]["metrics"][0]["pods"]["target"]["averageValue"] == "2500m"
    kubernetes_validate.validate(hpa, version, strict=True)


def test_strict_validation_rejects_an_unknown_field() -> None:
    """The validator really is strict: a misspelt field fails (guards against a no-op check)."""
    (dep, *_) = of_kind(_objects(Case("rapidocr-minimal")), "Deployment")
    broken = copy.deepcopy(dep)
    broken["spec"]["template"]["spec"]["containers"][0]["startupProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[0], strict=True)


def _strict(schema: dict) -> dict:
    """Forbid unknown properties where the schema lists properties (kubectl --validate=strict)."""
    if isinstance(schema, dict):
        if schema.get("type") == "object" and "properties" in schema:
            schema.setdefault("additionalProperties", False)
        for value in schema.values():
            if isinstance(value, dict):
                _strict(value)
            elif isinstance(value, list):
                for item in value:
                    _strict(item)
    return schema


@functools.lru_cache(maxsize=1)
def _httproute_schema() -> dict:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load(HTTPROUTE_CRD.read_text(), Loader=loader)
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = v1["schema"]["openAPIV3Schema"]
    return _strict(schema)


def _httproute_errors(route: dict) -> list[str]:
    schema = _httproute_schema()
    defaulted = apply_defaults(schema, copy.deepcopy(route))
    return schema_errors(schema, defaulted) + cel_errors(schema, defaulted)


needs_gateway_crds = pytest.mark.skipif(
    not HTTPROUTE_CRD.is_file(),
    reason=gateway_crds.missing_message(),
)

GATEWAY_CASES = [c for c in CASES if c.example == "deepseek-gateway-canary"]


@needs_gateway_crds
@pytest.mark.parametrize("case", GATEWAY_CASES, ids=lambda c: c.id)
def test_httproute_validates_against_gateway_api_v1(case: Case) -> None:
    (route,) = of_kind(_objects(case), "HTTPRoute")
    assert _httproute_errors(route) == []


@needs_gateway_crds
def test_httproute_without_canary_validates() -> None:
    resource = Case("deepseek-gateway-canary").resource()
    del resource["spec"]["canary"]
    resource["spec"]["traffic"] = {"router": "gateway", "gatewayRef": {"name": "web"}}
    (route,) = of_kind(render_resource(resource), "HTTPRoute")
    assert _httproute_errors(route) == []


@needs_gateway_crds
def test_gateway_schema_and_rules_catch_broken_routes() -> None:
    """Both layers bite: a schema range and a CEL rule of the real CRD reject bad routes."""
    (route,) = of_kind(_objects(GATEWAY_CASES[0]), "HTTPRoute")
    too_heavy = copy.deepcopy(route)
    too_heavy["spec"]["rules"][0]["backendRefs"][0]["weight"] = 1_000_001
    assert any("greater than the maximum" in e for e in _httproute_errors(too_heavy))
    relative = copy.deepcopy(route)
    relative["spec"]["rules"][0]["matches"][0]["path"]["value"] = "v1"
    assert any("must be an absolute path" in e for e in _httproute_errors(relative))
    unknown = copy.deepcopy(route)
    unknown["spec"]["rules"][0]["backendRefs"][0]["wieght"] = 1
    assert any("Additional properties" in e for e in _httproute_errors(unknown))

"""HTTPRoute renderer: weighted backends, never routing to a canary that is not Ready."""

from __future__ import annotations

import pytest
from docparser_operator.cli.main import render_resource
from golden import CASES, Case, check_golden, of_kind

GATEWAY = Case("deepseek-gateway-canary")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_golden(case: Case) -> None:
    check_golden(case, "HTTPRoute")


def _backends(resource: dict, *, canary_ready: bool = True) -> dict[str, int]:
    """Backend weights by the role of the revision behind each backend Service."""
    objects = render_resource(resource, canary_ready=canary_ready)
    (route,) = of_kind(objects, "HTTPRoute")
    (rule,) = route["spec"]["rules"]
    roles = {
        d["metadata"]["name"]: d["metadata"]["labels"]["docparser.io/track"]
        for d in of_kind(objects, "Deployment")
    }
    return {roles[b["name"]]: b["weight"] for b in rule["backendRefs"]}


@pytest.mark.parametrize("weight", [0, 10, 55, 100])
def test_backend_weights_follow_the_canary_weight(weight: int) -> None:
    resource = GATEWAY.resource()
    resource["spec"]["canary"]["weight"] = weight
    assert _backends(resource) == {"stable": 100 - weight, "canary": weight}


def test_canary_not_ready_gets_no_traffic() -> None:
    backends = _backends(GATEWAY.resource(), canary_ready=False)
    assert backends == {"stable": 100, "canary": 0}


def test_no_canary_means_one_stable_backend() -> None:
    resource = GATEWAY.resource()
    del resource["spec"]["canary"]
    assert _backends(resource) == {"stable": 100}


def test_parent_ref_and_hostnames() -> None:
    (route,) = of_kind(render_resource(GATEWAY.resource()), "HTTPRoute")
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["spec"]["parentRefs"] == [
        {
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
            "name": "web",
            "namespace": "infra",
        }
    ]
    assert route["spec"]["hostnames"] == ["ocr.example.com"]


def test_service_router_renders_no_httproute() -> None:
    assert of_kind(render_resource(Case("deepseek-service-router").resource()), "HTTPRoute") == []

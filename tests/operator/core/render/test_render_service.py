"""Service renderer: stable endpoint + per-track Services, and who the endpoint selects."""

from __future__ import annotations

import pytest
from docparser_operator.cli.main import render_resource
from golden import CASES, Case, check_golden, of_kind


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_golden(case: Case) -> None:
    check_golden(case, "Service")


def _services(case: Case, resource: dict | None = None) -> dict[str, dict]:
    objects = render_resource(resource or case.resource(), canary_ready=case.canary_ready)
    return {s["metadata"]["name"]: s for s in of_kind(objects, "Service")}


def _revision(case: Case, role: str, resource: dict | None = None) -> str:
    objects = render_resource(resource or case.resource(), canary_ready=case.canary_ready)
    (dep,) = [
        d
        for d in of_kind(objects, "Deployment")
        if d["metadata"]["labels"]["docparser.io/track"] == role
    ]
    return dep["metadata"]["labels"]["docparser.io/revision"]


def test_endpoint_canary_and_revision_services_serve_port_8000() -> None:
    case = Case("deepseek-gateway-canary")
    services = _services(case)
    stable, canary = _revision(case, "stable"), _revision(case, "canary")
    assert set(services) == {
        "invoices",
        "invoices-canary",
        f"invoices-{stable}",
        f"invoices-{canary}",
    }
    for svc in services.values():
        assert svc["spec"]["ports"][0]["port"] == 8000
        assert svc["spec"]["ports"][0]["targetPort"] == "http"
    assert services["invoices-canary"]["spec"]["selector"]["docparser.io/revision"] == canary
    assert services[f"invoices-{stable}"]["spec"]["selector"]["docparser.io/revision"] == stable


def test_service_router_needs_no_revision_services() -> None:
    assert set(_services(Case("rapidocr-minimal"))) == {"receipts"}
    assert set(_services(Case("deepseek-service-router"))) == {"contracts", "contracts-canary"}


def test_gateway_endpoint_selects_only_stable_while_a_canary_runs() -> None:
    case = Case("deepseek-gateway-canary")
    endpoint = _services(case)["invoices"]
    assert endpoint["spec"]["selector"]["docparser.io/revision"] == _revision(case, "stable")
    alone = case.resource()
    del alone["spec"]["canary"]
    assert "docparser.io/revision" not in _services(case, alone)["invoices"]["spec"]["selector"]


def test_service_router_endpoint_spans_revisions_only_when_canary_is_ready_and_weighted() -> None:
    case = Case("deepseek-service-router")
    ready = _services(case)["contracts"]["spec"]["selector"]
    assert "docparser.io/revision" not in ready
    assert ready["app.kubernetes.io/instance"] == "contracts"
    not_ready = Case("deepseek-service-router", canary_ready=False)
    selector = _services(not_ready)["contracts"]["spec"]["selector"]
    assert selector["docparser.io/revision"] == _revision(not_ready, "stable")
    dark = case.resource()
    dark["spec"]["canary"]["weight"] = 0
    selector = _services(case, dark)["contracts"]["spec"]["selector"]
    assert selector["docparser.io/revision"] == _revision(case, "stable", dark)

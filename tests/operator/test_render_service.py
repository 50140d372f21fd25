"""Service renderer: stable endpoint + per-track Services, and who the endpoint selects."""

from __future__ import annotations

import pytest
from docparser_operator.render import render_all
from golden import CASES, Case, check_golden, of_kind


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_golden(case: Case) -> None:
    check_golden(case, "Service")


def _services(case: Case, resource: dict | None = None) -> dict[str, dict]:
    objects = render_all(resource or case.resource(), canary_ready=case.canary_ready)
    return {s["metadata"]["name"]: s for s in of_kind(objects, "Service")}


def test_endpoint_and_track_services_serve_port_8000() -> None:
    services = _services(Case("deepseek-gateway-canary"))
    assert set(services) == {"invoices", "invoices-stable", "invoices-canary"}
    for svc in services.values():
        assert svc["spec"]["ports"][0]["port"] == 8000
        assert svc["spec"]["ports"][0]["targetPort"] == "http"
    assert services["invoices-canary"]["spec"]["selector"]["docparser.io/track"] == "canary"
    assert services["invoices-stable"]["spec"]["selector"]["docparser.io/track"] == "stable"


def test_no_canary_service_without_a_canary() -> None:
    assert set(_services(Case("rapidocr-minimal"))) == {"receipts", "receipts-stable"}


def test_gateway_endpoint_selects_only_stable() -> None:
    endpoint = _services(Case("deepseek-gateway-canary"))["invoices"]
    assert endpoint["spec"]["selector"]["docparser.io/track"] == "stable"


def test_service_router_endpoint_spans_tracks_only_when_canary_is_ready_and_weighted() -> None:
    ready = _services(Case("deepseek-service-router"))["contracts"]["spec"]["selector"]
    assert "docparser.io/track" not in ready
    assert ready["app.kubernetes.io/instance"] == "contracts"
    not_ready = Case("deepseek-service-router", canary_ready=False)
    assert _services(not_ready)["contracts"]["spec"]["selector"]["docparser.io/track"] == "stable"
    dark = Case("deepseek-service-router").resource()
    dark["spec"]["canary"]["weight"] = 0
    selector = _services(Case("deepseek-service-router"), dark)["contracts"]["spec"]["selector"]
    assert selector["docparser.io/track"] == "stable"

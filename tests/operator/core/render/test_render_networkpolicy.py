"""NetworkPolicy renderer: with traffic.allowFrom, only those peers (and the DocParser's own
pods, for the shadow's mirror) reach the runtime port."""

from __future__ import annotations

import pytest
from docparser_operator.cli.main import render_resource
from golden import CASES, Case, check_golden, of_kind

SERVICE = Case("deepseek-service-router")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_golden(case: Case) -> None:
    check_golden(case, "NetworkPolicy")


def test_policy_selects_every_runtime_pod_and_opens_only_the_http_port() -> None:
    objects = SERVICE.render()
    (policy,) = of_kind(objects, "NetworkPolicy")
    selector = policy["spec"]["podSelector"]["matchLabels"]
    for dep in of_kind(objects, "Deployment"):
        assert selector.items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8000}]
    own = {"podSelector": {"matchLabels": selector}}
    assert rule["from"] == [*SERVICE.resource()["spec"]["traffic"]["allowFrom"], own]
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress stays open (weights, Redis)


def test_no_allow_from_no_policy_and_an_empty_list_admits_only_the_own_pods() -> None:
    """allowFrom: [] closes the port to everyone but the DocParser's own runtime pods (the
    shadow's stable-to-canary copies; a podSelector peer means this namespace only)."""
    resource = SERVICE.resource()
    del resource["spec"]["traffic"]["allowFrom"]
    assert of_kind(render_resource(resource), "NetworkPolicy") == []
    resource["spec"]["traffic"]["allowFrom"] = []
    (policy,) = of_kind(render_resource(resource), "NetworkPolicy")
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [
        {"podSelector": {"matchLabels": policy["spec"]["podSelector"]["matchLabels"]}}
    ]

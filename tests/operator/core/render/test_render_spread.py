"""The default topology spread of the runtime pods: distinct nodes, then distinct zones."""

from __future__ import annotations

from docparser_operator.cli.main import render_resource
from golden import Case, of_kind


def test_default_spread_prefers_distinct_nodes_then_zones() -> None:
    resource = Case("deepseek-gateway-canary").resource()
    for dep in of_kind(render_resource(resource), "Deployment"):
        spread = dep["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert [c["topologyKey"] for c in spread] == [
            "kubernetes.io/hostname",
            "topology.kubernetes.io/zone",
        ]
        assert {c["whenUnsatisfiable"] for c in spread} == {"ScheduleAnyway"}  # a preference
        selector = dep["spec"]["selector"]["matchLabels"]
        for constraint in spread:  # all the DocParser's pods, every revision together
            assert constraint["labelSelector"]["matchLabels"].items() <= selector.items()

"""The real operator, asked by a DocParser to fetch from the API server's own address.

A namespace user who may create DocParsers names the address the operator reaches its API
server at (through the recording proxy on the real kube-apiserver backend, which forwards
with the operator's credentials: the most a tenant could hope to read) as its Prometheus and
as a golden set. With the chart's defaults the DocParser turns Degraded ``SourceNotAllowed``
and not one request reaches that address on those paths, counted where the API server's
requests are recorded. The same test then allows one path prefix on that address (as an
admin would) and sees the operator's guarded client reach it: the count is one that can move.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
import yaml
from dp_helpers import CANARY_WEIGHTS, condition, create, docparser
from kube_cluster import Cluster, wait_for
from operator_runner import running_operator

pytestmark = pytest.mark.slow


def _server(cluster: Cluster) -> str:
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    return str(config["clusters"][0]["cluster"]["server"]).rstrip("/")


def _analysis(cluster: Cluster, name: str) -> dict:
    from docparser_operator.api.kinds import DOCPARSER

    dp = cluster.get(DOCPARSER, name) or {}
    return ((dp.get("status") or {}).get("canary") or {}).get("analysis") or {}


def test_a_docparser_naming_the_api_server_is_degraded_and_nothing_reaches_it(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = _server(cluster)
    secrets = f"/api/v1/namespaces/{cluster.namespace}/secrets"
    allowed_prefix = f"{server}/allowed-golden/"
    monkeypatch.delenv("DOCPARSER_OPERATOR_PROMETHEUS_URLS", raising=False)  # the default
    monkeypatch.setenv("DOCPARSER_OPERATOR_GOLDEN_SOURCES", f"file:///golden/,{allowed_prefix}")

    def reached(path: str) -> list:
        return [r for r in cluster.records() if r.path.startswith(path)]

    with running_operator(cluster):
        create(
            cluster,
            docparser(
                "nosy",
                canary={
                    "weights": CANARY_WEIGHTS,
                    "analysis": {"prometheus": {"url": server}, "intervalSeconds": 5},
                },
            ),
        )
        create(
            cluster,
            docparser(
                "golden-nosy",
                canary={
                    "weights": CANARY_WEIGHTS,
                    "analysis": {"golden": {"uri": server + secrets}},
                },
            ),
        )
        degraded = {
            name: wait_for(
                f"{name} Degraded",
                lambda name=name: (
                    (c := condition(cluster, name, "Degraded")).get("status") == "True" and c
                ),
                timeout=60,
            )
            for name in ("nosy", "golden-nosy")
        }
        assert degraded["nosy"]["reason"] == "SourceNotAllowed", degraded
        assert "spec.canary.analysis.prometheus.url" in degraded["nosy"]["message"]
        assert "DOCPARSER_OPERATOR_PROMETHEUS_URLS" in degraded["nosy"]["message"]
        assert degraded["golden-nosy"]["reason"] == "SourceNotAllowed", degraded
        assert "DOCPARSER_OPERATOR_GOLDEN_SOURCES" in degraded["golden-nosy"]["message"]
        for said in degraded.values():  # the rule, never the URL the author wrote
            assert secrets not in said["message"] and "/api/v1/query" not in said["message"]

        # An admin allowed one prefix on that address: the operator's client does reach it,
        # and status says the HTTP status only (the proxy forwards as the admin: a real reply).
        create(
            cluster,
            docparser(
                "allowed",
                canary={
                    "weights": CANARY_WEIGHTS,
                    "analysis": {"golden": {"uri": allowed_prefix + "set"}},
                },
            ),
        )
        message = wait_for(
            "the allowed golden set read",
            lambda: "HTTP" in (m := _analysis(cluster, "allowed").get("message", "")) and m,
            timeout=60,
        )
        # The reason code alone: never the URI the author wrote (status names no tenant text).
        assert re.fullmatch(r"golden documents: HTTP 4\d\d", message), message
        assert reached("/allowed-golden/set/"), "the counter saw the operator's allowed read"

    # Not one request on the refused paths, from the operator or anything else.
    assert reached("/api/v1/query") == [], reached("/api/v1/query")
    # There, the operator only creates each DocParser's internal token Secret (a POST, the
    # shadow's credential): nothing read the Secrets the golden URI named.
    assert [r for r in reached(secrets) if r.method != "POST"] == [], reached(secrets)
    # ... and the counter would have seen one: a request of our own there is recorded.
    httpx.get(f"{server}/api/v1/query", params={"query": "up"}, timeout=10)
    assert len(reached("/api/v1/query")) == 1

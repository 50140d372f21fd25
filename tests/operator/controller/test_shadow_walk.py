"""The shadow gate with the real operator (kopf) on the emulator and a real API server: a
dark canary with ``canary.shadow`` is judged on the stable pods' comparison of live pages
before step 1. Its stable pods are a real HTTP server on a loopback address serving the
runtime's contract-shaped ``/metrics`` (shadow_metrics.py), growing as a live shadow does.

A canary whose pages disagree with stable's (a line dropped in twenty: page CER about 0.05)
is rolled back with ``Degraded ShadowRegression`` and the figures in the message, at weight
0 the whole time, and the shadow configuration turns off; one that reads like stable passes
to step 1."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from docparser_operator.api import naming
from docparser_operator.api.kinds import KNOWN_KINDS
from dp_helpers import CANARY_WEIGHTS, condition, create, docparser, revision, set_spec, spec_of
from kube_cluster import Cluster, wait_for
from kubelet_sim import Kubelet
from operator_runner import running_operator
from pod_endpoint import loopback_subnet
from shadow_metrics import ShadowPod

DOCPARSER, CONFIG_MAP = KNOWN_KINDS["DocParser"], KNOWN_KINDS["ConfigMap"]
ANALYSIS = {"steps": [{"weight": 50}], "intervalSeconds": 5, "minShadowPages": 100}


def _canary(cluster: Cluster) -> dict[str, Any]:
    dp = cluster.get(DOCPARSER, "dark") or {}
    return (dp.get("status") or {}).get("canary") or {}


@pytest.mark.parametrize(("cer", "verdict"), [(0.05, "Failed"), (0.0, "Progressing")])
def test_a_dark_canary_is_judged_on_live_pages_before_step_1(
    cluster: Cluster, cer: float, verdict: str
) -> None:
    host = f"{loopback_subnet()}.2"  # no clash on the pod port with an earlier or a parallel test
    with (
        ShadowPod(host, naming.HTTP_PORT, ("", ""), cer=cer, per_second=200) as stable_pod,
        running_operator(cluster),
    ):
        create(cluster, docparser("dark", replicas={"min": 2, "max": 2}))
        stable = wait_for("stable revision", lambda: revision(cluster, "dark"))
        with Kubelet(cluster, ready_after=0.2, pod_ip={stable: host}):
            wait_for("ready", lambda: condition(cluster, "dark", "Ready").get("status") == "True")
            spec = copy.deepcopy(spec_of(cluster, "dark"))
            spec["canary"] = {
                "weights": CANARY_WEIGHTS,
                "shadow": {"percent": 100, "maxPagesPerMinute": 600},
                "analysis": ANALYSIS,
            }
            set_spec(cluster, "dark", spec)
            canary = wait_for("canary revision", lambda: revision(cluster, "dark", "canary"))
            stable_pod.pair = (stable, canary)
            weights: list[int] = []

            def judged() -> dict[str, Any] | None:
                seen = _canary(cluster)
                walk = seen.get("analysis") or {}
                if walk.get("phase") in (None, "Shadowing"):
                    weights.append(int(seen.get("weight") or 0))  # routed before the verdict
                    return None
                return seen

            done = wait_for("the shadow gate's verdict", judged, timeout=60)
            walk = done["analysis"]
            assert walk["phase"] == verdict, walk
            assert weights and set(weights) == {0}  # dark until the verdict: no client reached it
            figures = done["shadow"]
            assert figures["pagesCompared"] >= 100 and figures["quantile"] == 0.9
            assert figures["pagesPerMinute"] > 0 and figures["since"]
            if verdict == "Progressing":
                assert figures["cer"] <= 0.001 and walk["weight"] == 50
                return
            assert walk["reason"] == "ShadowRegression" and 0.02 < figures["cer"] <= 0.05
            degraded = condition(cluster, "dark", "Degraded")
            assert degraded["reason"] == "ShadowRegression", degraded
            assert "p90 page CER against stable" in degraded["message"]
            assert "no traffic was sent to it" in degraded["message"]

            def mirror_off() -> bool:
                config_map = cluster.get(CONFIG_MAP, "dark-shadow") or {"data": {}}
                config = json.loads(config_map["data"].get("config.json") or "{}")
                return (
                    config == {"enabled": False} and _canary(cluster)["shadow"]["enabled"] is False
                )

            wait_for("the shadow off once the canary failed", mirror_off, timeout=20)
            assert _canary(cluster)["weight"] == 0

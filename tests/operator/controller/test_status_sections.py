"""Issue 37 with the real operator, on the emulator and on a real kube-apiserver: a feature
turned on and then off with a spec change leaves no section of its own in status, and the
operator then writes nothing at rest.

Each case is the user's action from the issue: scale to zero off (``replicas.min`` 0 -> 1),
the shadow removed with the canary kept, the analysis removed with the canary kept, the
canary removed. The stand-in kubelet makes every pod Ready. After the change the test waits
for the section to go, lets the cluster settle, then counts the operator's requests over a
rest window of several resyncs (the suite's operator resyncs every second, conftest.py):
none may be a write, and the DocParser's resourceVersion may not move. Before the fix, the
first three kept their section (``kubectl get dp`` showed ANALYSIS Paused on a DocParser
without analysis) and re-sent the same status at every resync.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from docparser_operator.api.kinds import DOCPARSER
from dp_helpers import CANARY_WEIGHTS, create, docparser, quiet, set_spec
from gitopscheck.checker import GitOpsCheck
from kube_cluster import Cluster, wait_for
from kubelet_sim import Kubelet
from operator_runner import running_operator

pytestmark = pytest.mark.slow  # a few resyncs at rest per case
NAME = "sections"
REST_S = 5.0  # five resyncs of the suite's operator: before the fix, five status PATCHes
CANARY = {"weights": CANARY_WEIGHTS, "weight": 10}
AT_ZERO = {"image": "ghcr.io/example/docparser-runtime:0.1.0", "redisUrlSecretRef": {"name": "r"}}
# feature: (the spec with it on, the spec after the user turned it off, the section it owns)
FEATURES: dict[str, tuple[dict[str, Any], dict[str, Any], tuple[str, ...]]] = {
    "scaleToZero": (
        {"replicas": {"min": 0, "max": 1, "scaleToZero": {"after": "10m"}}, "runtime": AT_ZERO},
        {"replicas": {"min": 1, "max": 1, "scaleToZero": {"after": "10m"}}, "runtime": AT_ZERO},
        ("scaleToZero",),
    ),
    "shadow": (
        {"canary": {**CANARY, "shadow": {"percent": 20, "maxPagesPerMinute": 30}}},
        {"canary": CANARY},
        ("canary", "shadow"),
    ),
    "analysis": (
        {"canary": {**CANARY, "analysis": {"steps": [{"weight": 10}], "intervalSeconds": 5}}},
        {"canary": CANARY},
        ("canary", "analysis"),
    ),
    "canary": ({"canary": CANARY}, {}, ("canary",)),
}


def _section(cluster: Cluster, path: tuple[str, ...]) -> Any:
    node: Any = (cluster.get(DOCPARSER, NAME) or {}).get("status") or {}
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node


def _current(cluster: Cluster) -> bool:
    dp = cluster.get(DOCPARSER, NAME) or {"metadata": {}}
    observed = (dp.get("status") or {}).get("observedGeneration")
    return observed is not None and observed == dp["metadata"].get("generation")


@pytest.mark.parametrize("feature", list(FEATURES))
def test_a_feature_turned_off_leaves_no_section_and_no_writes_at_rest(
    cluster: Cluster, feature: str, gitops_check_optional: GitOpsCheck | None
) -> None:
    on, off, path = FEATURES[feature]
    where = "status." + ".".join(path)
    with running_operator(cluster) as operator, Kubelet(cluster, ready_after=0.3):
        create(cluster, docparser(NAME, **on))
        wait_for(where, lambda: _section(cluster, path), timeout=60)
        set_spec(cluster, NAME, docparser(NAME, **off)["spec"])
        wait_for(
            f"{where} gone once {feature} is off",
            lambda: _current(cluster) and _section(cluster, path) is None,
            timeout=60,
        )
        quiet(cluster, timeout=60)
        before = cluster.get(DOCPARSER, NAME) or {}
        passes = operator.reconciles(cluster.namespace, NAME)
        mark = cluster.mark()
        time.sleep(REST_S)
        writes = cluster.writes_since(mark)
        assert writes == [], writes
        after = cluster.get(DOCPARSER, NAME) or {}
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        assert _section(cluster, path) is None
        # the window held passes (resyncs): each decided there was nothing to write
        assert operator.reconciles(cluster.namespace, NAME) >= passes + 2
    if gitops_check_optional is not None:  # Flux and Argo CD read it as at rest
        assert gitops_check_optional.verdict(after) == ("Current", "Healthy"), after["status"]

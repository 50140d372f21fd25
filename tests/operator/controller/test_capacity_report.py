"""The live capacity report with the real operator, on the emulator and a real kube-apiserver.

A runtime pod's ``/metrics`` is served on the pod's loopback address (as the scale-to-zero
tests stand pods) by ``EmulatedPod``: traffic at a known rate, pages of known tiers holding a
decode slot a known time, rendered by the runtime's own metrics code. The operator reads it
every 3 s over a 15 s window. The test checks that ``status.capacity`` reports every figure
within 10 % of that truth; that ``CapacityAdvice`` says to raise ``replicas.max`` from 2 to 4
(the spec 2x too small) while Flux and Argo CD read Current / Healthy; that it is gone on the
pass after the spec is fixed; and that, the traffic stopped and its report written, the
operator writes nothing over more than a window.
"""

from __future__ import annotations

import datetime
import io
import time
from collections.abc import Iterator
from typing import Any

import pytest
from capacity_pods import EmulatedPod
from docparser_operator.api.kinds import DOCPARSER
from docparser_operator.cli import capacity as kubectl_capacity
from docparser_operator.cli.connection import connect
from dp_helpers import condition, create, docparser, event_reasons, revision, set_spec
from gitopscheck.checker import GitOpsCheck
from kube_cluster import Cluster, wait_for
from kubelet_sim import Kubelet
from operator_runner import running_operator
from pod_endpoint import loopback_subnet, metrics_endpoint

pytestmark = pytest.mark.slow  # three 15 s windows
NAME = "busy"
RATE, SERVICE_S, SLOTS = 5.6, 1.0, 2  # the truth: 4 pods at 80 % busy for the peak


@pytest.fixture
def pod() -> Iterator[tuple[str, EmulatedPod]]:
    """An address on the runtime's port answering the emulated pod's /metrics."""
    emulated = EmulatedPod(rate=0.0, service_s=SERVICE_S, slots=SLOTS)  # traffic once Ready
    with metrics_endpoint(f"{loopback_subnet()}.7", emulated.text) as host:
        yield host, emulated


def capacity(cluster: Cluster) -> dict[str, Any]:
    return ((cluster.get(DOCPARSER, NAME) or {}).get("status") or {}).get("capacity") or {}


def whole_window_after(report: dict[str, Any], began: float) -> bool:
    if not report.get("since"):
        return False
    ended = datetime.datetime.fromisoformat(report["since"].replace("Z", "+00:00")).timestamp()
    return ended - 15 - 3 >= began  # the window, and the one 3 s reading it may reach back


def near(value: float, truth: float) -> bool:
    return abs(value - truth) <= 0.1 * truth


def test_figures_advice_and_rest(
    cluster: Cluster,
    gitops_check: GitOpsCheck,
    pod: tuple[str, EmulatedPod],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCPARSER_OPERATOR_CAPACITY_POLL_INTERVAL_S", "3")
    monkeypatch.setenv("DOCPARSER_OPERATOR_RESYNC_INTERVAL_S", "600")
    host, emulated = pod
    spec = docparser(
        NAME,
        tier="auto",
        replicas={"min": 1, "max": 2},
        resources={"gpu": 1},
        capacity={"window": "15s"},
    )
    ips: dict[str, str] = {}
    with running_operator(cluster), Kubelet(cluster, ready_after=0.3, pod_ip=ips):
        create(cluster, spec)
        ips[wait_for("stable revision", lambda: revision(cluster, NAME))] = host
        ready = lambda: condition(cluster, NAME, "Ready").get("status") == "True"  # noqa: E731
        wait_for("serving", ready, timeout=60)
        emulated.set_rate(RATE)
        began = time.time()
        # the first report whose whole window had the traffic (one may end before it began)
        wait_for("a report", lambda: whole_window_after(capacity(cluster), began), timeout=90)
        got = capacity(cluster)
        # every figure within 10 % of the traffic's truth
        assert near(got["pagesPerSecond"], RATE), got
        assert near(got["peakPagesPerSecond"], RATE), got
        assert near(got["secondsPerPage"], SERVICE_S), got
        assert near(got["visionTokensPerPage"], (256 + 256 + 544 + 1120) / 4), got
        assert near(got["outputTokensPerPage"], 400), got
        assert near(got["queueWaitP95Seconds"], 0.95), got  # waits spread over 0.05..1 s
        shares = {t["tier"]: t.get("autoShare") for t in got["tiers"]}
        truth = {0: 0.5, 2: 0.25, 6: 0.25}  # the tiers auto chose, in turn: 0, 0, 2, 6
        assert shares.keys() == truth.keys(), got
        assert all(near(shares[t], truth[t]) for t in truth), got
        assert all(near(t["secondsPerPage"], SERVICE_S) for t in got["tiers"]), got
        assert (got["slots"], got["memoryPeak"], got["memoryLimit"]) == (SLOTS, "3Gi", "4Gi")
        assert got["recommended"] == {
            "replicas": 4,
            "tier": "auto",
            "memory": "4Gi",
            "targetWaitSeconds": 5.0,
        }, got
        # the spec is 2x too small: advice, advisory only
        advice = condition(cluster, NAME, "CapacityAdvice")
        assert advice["status"] == "True" and advice["reason"] == "RaiseReplicas", advice
        assert "raise replicas.max from 2 to 4" in advice["message"], advice
        assert condition(cluster, NAME, "Degraded")["status"] == "False"
        assert gitops_check.verdict(cluster.get(DOCPARSER, NAME)) == ("Current", "Healthy")
        wait_for("the event", lambda: "CapacityAdvice" in event_reasons(cluster, NAME))
        # kubectl docparser capacity: the same report and advice as a table
        shown = io.StringIO()
        where = connect(kubeconfig=str(cluster.kubeconfig), namespace=cluster.namespace)
        assert kubectl_capacity.run(NAME, where, shown) == 0
        assert "pages/s, busiest minute" in shown.getvalue()
        assert "CapacityAdvice (RaiseReplicas): raise replicas.max from 2 to 4" in shown.getvalue()
        # the spec fixed: the advice goes on the next pass
        set_spec(cluster, NAME, {**spec["spec"], "replicas": {"min": 1, "max": 4}})
        wait_for("advice gone", lambda: not condition(cluster, NAME, "CapacityAdvice"))
        assert capacity(cluster)["recommended"]["replicas"] == 4
        # at rest: the traffic stops, its report is written, then nothing for over a window
        emulated.set_rate(0.0)
        wait_for("an idle report", lambda: capacity(cluster).get("pagesPerSecond") == 0, timeout=60)
        time.sleep(1)
        mark = cluster.mark()
        time.sleep(20)
        writes = cluster.writes_since(mark)
        assert writes == [], writes
        assert not condition(cluster, NAME, "CapacityAdvice")

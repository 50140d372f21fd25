"""Canary analysis on real pods: the operator in the cluster gates a release on golden
documents, then walks its steps on the pods' own /metrics while load flows through the
Service, and ends with the canary carrying all traffic, no request lost on the way.

`kubectl get dp -w` runs beside it; its lines and the DocParser's Events are recorded for
docs/operations.md (the worked example there comes from this scenario).
"""

from __future__ import annotations

import base64
import subprocess

import pytest
from cluster_load import Load
from cluster_support import (
    docparser,
    page_png,
    parse,
    record,
    serving_url,
    wait_for,
    wait_ready,
    weights_volume,
)

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def _golden_configmap(cluster, namespace: str, url: str) -> None:
    """One document and the text today's release (stable) reads in it."""
    document = page_png(("Invoice 4711", "Total 1280 EUR"))
    reply = parse(url, document)
    assert reply.status_code == 200, reply.text
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "golden", "namespace": namespace},
            "binaryData": {"invoice.png": base64.b64encode(document).decode()},
            "data": {"invoice.txt": reply.json()["content"]},
        }
    )


ANALYSIS = {
    "steps": [{"weight": 25}, {"weight": 50}],
    "intervalSeconds": 5,
    "minRequests": 5,
    # Thresholds for a 2-core node running 5 pods with millisecond answers (the load sends
    # one page, answered from each pod's result cache): one request held up by the CPU
    # is a 10x p99, and a second noisy window in a row is unlikely. The checks' own
    # sensitivity is tested on processes (tests/operator/controller/test_canary_analysis.py); here
    # the walk itself runs on pods: the gate, the steps, the Service weights, no loss.
    "maxLatencyRatio": 20,
    "failureLimit": 2,
    "golden": {"configMapRef": {"name": "golden"}, "maxCER": 0.05},
}


def test_a_good_release_passes_the_golden_gate_and_walks_to_full_traffic(cluster, namespace):
    weights = weights_volume(cluster, namespace, ("v1", "v2"))
    name = "invoices"
    stable = docparser(name, namespace, cluster.runtime_image, weights=weights["v1"], replicas=4)
    release = docparser(
        name,
        namespace,
        cluster.runtime_image,
        weights=weights["v1"],
        canary=weights["v2"],
        replicas=4,
    )
    release["spec"]["canary"].pop("weight")
    release["spec"]["canary"]["analysis"] = dict(ANALYSIS)
    load, lines = _walk(cluster, namespace, stable, release)
    versions = {s.version for s in load.samples}
    assert versions == {"v1", "v2"}, versions  # both served while the walk ran
    for line in lines.splitlines():
        record("canary analysis (kubectl get dp -w)", line.rstrip())

    def events_now() -> str:
        out = cluster.kubectl(
            "-n",
            namespace,
            "get",
            "events",
            "--field-selector",
            f"involvedObject.name={name}",
            "--sort-by=.lastTimestamp",
            "-o",
            "custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message",
        )
        return out if "AnalysisSucceeded" in out else ""

    events = wait_for(cluster, namespace, "the AnalysisSucceeded Event", events_now, 30)
    assert "GoldenPassed" in events and "AnalysisStepPassed" in events, events
    for line in events.splitlines():
        record("canary analysis (events)", line.rstrip())
    record("canary analysis", load.report("walk under load"))


def test_a_runtime_only_canary_of_the_cpu_engine_walks_through_the_analysis(cluster, namespace):
    """A rapidocr DocParser has no weights: its canary differs only in ``canary.runtime``
    (here a runtime setting; a new image is the same path) and is judged by the golden gate
    and the steps like any other, on the canary's own pods, then promoted by the analysis."""
    name = "receipts"
    stable = docparser(name, namespace, cluster.runtime_image, replicas=2)
    release = docparser(name, namespace, cluster.runtime_image, replicas=2)
    release["spec"]["canary"] = {"runtime": {"maxNewTokens": 2048}, "analysis": dict(ANALYSIS)}
    load, _lines = _walk(cluster, namespace, stable, release)

    def at_full_weight():
        status = cluster.get("docparser", name, namespace).get("status") or {}
        return (status.get("canary") or {}).get("weight") == 100

    wait_for(cluster, namespace, "the runtime canary at 100 %", at_full_weight, 120, interval=1)
    record("runtime-only canary analysis", load.report("walk under load"))


def _walk(cluster, namespace: str, stable: dict, release: dict) -> tuple[Load, str]:
    """Serve ``stable``, record its golden answer, apply ``release`` under paced load through
    the Service and wait for the analysis' verdict: Succeeded, every check and golden document
    passed, no request lost. Returns the load and what `kubectl get dp -w` printed."""
    name = stable["metadata"]["name"]
    cluster.apply(stable)
    wait_ready(cluster, namespace, name, timeout=300)
    url = serving_url(cluster, namespace, name)
    _golden_configmap(cluster, namespace, url)
    watch = subprocess.Popen(  # what a person watching the release sees
        [
            cluster.kubectl_bin,
            "--kubeconfig",
            str(cluster.kubeconfig),
            "-n",
            namespace,
            "get",
            "dp",
            name,
            "-w",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with Load(
            url, page_png(("Total 12",)), clients=3, max_requests=60_000, max_seconds=400
        ) as load:
            cluster.apply(release)

            def verdict():
                dp = cluster.get("docparser", name, namespace)
                walk = ((dp.get("status") or {}).get("canary") or {}).get("analysis") or {}
                return walk if walk.get("phase") in ("Succeeded", "Failed") else None

            done = wait_for(cluster, namespace, "the analysis verdict", verdict, 300, interval=1)
    finally:
        watch.terminate()
        lines, _ = watch.communicate(timeout=10)
    assert done["phase"] == "Succeeded", done
    assert [g["ok"] for g in done["golden"]] == [True], done
    latency = next(c for c in done["checks"] if c["name"] == "latencyP99Ratio")
    assert 0.5 <= latency["quantile"] <= 0.99, latency  # what the window's count supports
    assert all(c["ok"] for c in done["checks"]), done
    assert not load.ran_out, load.report("the load ended before the walk did")
    assert not load.failed, f"{load.failures()}\n{cluster.explain(namespace)}"
    return load, lines

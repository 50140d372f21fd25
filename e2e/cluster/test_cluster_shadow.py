"""The shadow canary on real pods: a dark canary is judged on the live documents stable's pods
answer while it serves no one; a release that reads worse is rolled back before any client
reaches it, and one that reads the same is promoted, under paced load with no request lost.

The regressing release is the same runtime with the test-only fault
``DOCPARSER_TEST_DROP_LINE_EVERY`` in its own environment (``canary.runtime.env``): it drops
one line in two of every page, which only a comparison of the two outputs can see (it
answers 200, as fast as stable). The identical release sets the same fault to 0 (off, the
default): a new canary revision, a new pod template, the same text. The result cache is off,
so each request is a parse stable's pods can copy. The shadow configuration reaches the
running stable pods through the mounted ConfigMap (no restart), so the scenarios also show
how long the kubelet takes to deliver it.

Both scenarios share one stable DocParser (the module's fixture; its creation is the
slowest part): the regressing release is rolled back, then the identical one replaces it.
Each scenario also holds on its own, on a fresh stable.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from cluster_load import EndpointSampler, Load
from cluster_settle import settled_start
from cluster_support import (
    Target,
    docparser,
    page_png,
    record,
    serving_url,
    wait_for,
    wait_ready,
)

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.timeout(600)]

NAME = "shadowed"
SHADOW = {"percent": 100, "maxPagesPerMinute": 600}
ANALYSIS = {
    "steps": [{"weight": 50}],
    "intervalSeconds": 5,
    "minRequests": 5,
    "maxLatencyRatio": 20,  # a 2-core node: see test_cluster_canary_analysis.py
    "minShadowPages": 20,
}
NO_CACHE = {"name": "DOCPARSER_CACHE_MAX_BYTES", "value": "0"}
DOCUMENT = page_png(("Invoice number 4711", "Delivery 2026-12-02", "Total due 1280 EUR"))
GATE = (None, "Verifying", "Shadowing")  # the walk's phases before any traffic


@dataclass(frozen=True)
class Stable:
    """The module's serving DocParser (two stable pods) and its Service's URL."""

    cluster: Target
    namespace: str
    url: str

    def canary(self) -> dict[str, Any]:
        return (self.cluster.get("docparser", NAME, self.namespace).get("status") or {}).get(
            "canary"
        ) or {}

    def judged_revision(self) -> str | None:
        """The canary revision the walk in status speaks of (None before any release)."""
        return (self.canary().get("analysis") or {}).get("revision")

    def release(self, drop_line_every: int, analysis: dict[str, Any]) -> dict[str, Any]:
        """The stable spec with a dark, shadowed canary differing only in the fault setting."""
        manifest = docparser(NAME, self.namespace, self.cluster.runtime_image, replicas=2)
        manifest["spec"]["pod"] = {"env": [NO_CACHE]}
        fault = {"name": "DOCPARSER_TEST_DROP_LINE_EVERY", "value": str(drop_line_every)}
        manifest["spec"]["canary"] = {
            "runtime": {"env": [fault]},
            "shadow": SHADOW,
            "analysis": analysis,
        }
        return manifest

    def judged(self, before: str | None, gate_weights: list[int]):
        """A probe for the verdict on the canary revision applied after ``before`` (the
        revision the status spoke of until then): its canary status once its walk left the
        gate; meanwhile the weight routed to it (``gate_weights``)."""

        def verdict() -> dict[str, Any] | None:
            canary = self.canary()
            walk = canary.get("analysis") or {}
            if walk.get("revision") in (None, before) or walk.get("phase") in GATE:
                if walk.get("revision") not in (None, before):
                    gate_weights.append(int(canary.get("weight") or 0))
                return None
            return canary

        return verdict


@pytest.fixture(scope="module")
def stable(cluster: Target) -> Iterator[Stable]:
    namespace = f"e2e-shadow-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", namespace)
    try:
        manifest = docparser(NAME, namespace, cluster.runtime_image, replicas=2)
        manifest["spec"]["pod"] = {"env": [NO_CACHE]}
        cluster.apply(manifest)
        wait_ready(cluster, namespace, NAME, timeout=300)
        yield Stable(cluster, namespace, serving_url(cluster, namespace, NAME))
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_a_dark_canary_that_reads_worse_is_rolled_back_before_any_traffic(stable: Stable):
    cluster, namespace = stable.cluster, stable.namespace
    settled_start(cluster, namespace, NAME, docparser=NAME)  # whatever the other test left
    before = stable.judged_revision()
    weights: list[int] = []
    load = Load(stable.url, DOCUMENT, clients=2, pace_s=0.25, max_requests=5000, max_seconds=300)
    with load:
        began = time.monotonic()
        cluster.apply(stable.release(2, ANALYSIS))
        done = wait_for(
            cluster, namespace, "the shadow gate's verdict", stable.judged(before, weights), 240
        )
        took = time.monotonic() - began
    walk, figures = done["analysis"], done["shadow"]
    assert (walk["phase"], walk["reason"]) == ("Failed", "ShadowRegression"), walk
    assert weights and set(weights) == {0}, weights  # dark: no client reached the canary
    assert not load.ran_out, load.report("the load ended before the verdict")
    assert not load.failed, f"{load.failures()}\n{cluster.explain(namespace)}"
    assert figures["pagesCompared"] >= 20 and figures["cer"] > 0.02, figures
    status = cluster.get("docparser", NAME, namespace)["status"]
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "ShadowRegression", degraded
    record("shadow canary", f"regressing release rolled back {took:.0f} s after it was applied")
    record("shadow canary", f"Degraded ShadowRegression: {degraded['message']}")
    record("shadow canary", f"status.canary.shadow: {figures}")
    record("shadow canary", load.report("stable under load while the shadow ran"))


def test_a_dark_canary_that_reads_the_same_is_judged_and_promoted(stable: Stable):
    """After the rollback above (or on a fresh stable): the identical release passes the
    shadow gate at weight 0, walks its step and ends carrying 100 %, every client request
    answered and a Ready endpoint behind the Service at every sampled moment."""
    cluster, namespace = stable.cluster, stable.namespace
    settled_start(cluster, namespace, NAME, docparser=NAME)  # whatever the other test left
    before = stable.judged_revision()
    analysis = {**ANALYSIS, "minShadowPages": 10}
    weights: list[int] = []
    # The load must outlast both waits below (240 s + 150 s), or it stops on its own first.
    load = Load(stable.url, DOCUMENT, clients=2, pace_s=0.25, max_requests=5000, max_seconds=420)
    with load, EndpointSampler(cluster, namespace, NAME) as sampler:
        began = time.monotonic()
        cluster.apply(stable.release(0, analysis))
        done = wait_for(
            cluster, namespace, "the shadow gate's verdict", stable.judged(before, weights), 240
        )
        gated = time.monotonic() - began
        gate, figures = done["analysis"], done["shadow"]  # the gate's span, not a window's
        assert gate["phase"] in ("Progressing", "Succeeded"), gate  # the gate passed

        def promoted() -> dict[str, Any] | None:
            canary = stable.canary()
            phase = (canary.get("analysis") or {}).get("phase")
            assert phase != "Failed", canary  # an identical release must not fail a window
            return canary if phase == "Succeeded" and canary.get("weight") == 100 else None

        done = wait_for(cluster, namespace, "the canary at 100 %", promoted, 150)
        took = time.monotonic() - began
    assert weights and set(weights) == {0}, weights  # dark while the gate judged it
    assert figures["pagesCompared"] >= 10 and figures["cer"] <= 0.02, figures
    assert not load.ran_out, load.report("the load ended before the promotion")
    assert not load.failed, f"{load.failures()}\n{cluster.explain(namespace)}"
    assert sampler.samples and min(sampler.samples) >= 1, sampler.samples
    record(
        "shadow canary",
        f"identical release: shadow gate passed {gated:.0f} s after it was applied, "
        f"at 100 % after {took:.0f} s; fewest Ready endpoints {min(sampler.samples)} "
        f"over {len(sampler.samples)} samples",
    )
    record("shadow canary", f"identical release's gate: {gate['message']}")
    record("shadow canary", f"identical release's status.canary.shadow at the gate: {figures}")
    record("shadow canary", f"identical release's walk: {done['analysis']['message']}")
    record("shadow canary", load.report("clients through the identical release's walk"))

"""Canary analysis end to end: the real operator, real runtime processes for each track.

Each track's pods report a loopback address (127.0.x.2 for stable, 127.0.x.3 for the canary)
where a real ``docparser-runtime serve`` process (the deterministic test engine) listens on
the pod port, so the operator reads real ``/metrics``. A client loop stands in for the
Service: it sends parse requests to each process in the share the DocParser's status says
the canary carries. A good canary passes the golden documents and walks every step to 100 %
(an operator restart mid-walk resumes at the same step); a canary answering 500s is rolled
back to 0 % within ``failureLimit`` windows, never above its first step; a canary that reads
the golden documents worse never gets a request.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import io
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from docparser_operator.api import naming
from docparser_operator.api.kinds import KNOWN_KINDS
from docparser_operator.kube.client import ApiError
from dp_helpers import CANARY_WEIGHTS, GATEWAY, condition, create, docparser, revision, set_spec
from gateway_sim import GatewayController
from kube_cluster import Cluster, wait_for
from kubelet_sim import Kubelet
from live_server import LiveServer, start_all
from operator_runner import running_operator
from PIL import Image
from pod_endpoint import loopback_subnet
from traffic_sampler import TrafficSampler

pytestmark = [pytest.mark.slow, pytest.mark.realcluster]
DOCPARSER = KNOWN_KINDS["DocParser"]
ANALYSIS = {
    "steps": [{"weight": 25}, {"weight": 50}],
    "intervalSeconds": 5,
    "minRequests": 8,
    "failureLimit": 2,
}
# The client loop's bounds. 5000 requests once lasted about 25 s at its pace, shorter than a
# walk on an idle machine: a loop that stops early starves the analysis it is there to feed.
MAX_REQUESTS = 30000
MAX_SECONDS = 240.0


def png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (64, 32), "white").save(buf, format="PNG")
    return buf.getvalue()


def analysis_status(cluster: Cluster, name: str) -> dict[str, Any]:
    dp = cluster.get(DOCPARSER, name) or {}
    return ((dp.get("status") or {}).get("canary") or {}).get("analysis") or {}


class Traffic:
    """Parse requests split between the two processes by the routed canary weight."""

    def __init__(self, cluster: Cluster, name: str, stable: str, canary: str) -> None:
        self.cluster, self.name, self.urls = cluster, name, (stable, canary)
        self.weights_seen: list[int] = []
        self.phases_seen: set[tuple[str, int, int]] = set()  # (phase, step, routed weight)
        self.sent = 0
        self.errors: list[str] = []  # weight reads the API server failed (the last one kept)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="traffic", daemon=True)

    def _weight(self) -> int:
        dp = self.cluster.get(DOCPARSER, self.name) or {}
        canary = (dp.get("status") or {}).get("canary") or {}
        walk = canary.get("analysis") or {}
        if walk:
            self.phases_seen.add((walk.get("phase"), walk.get("step"), canary.get("weight")))
        return int(canary.get("weight") or 0)

    def _run(self) -> None:
        body, rng = png(), random.Random(7)
        weight, checked = 0, 0.0
        end = time.monotonic() + MAX_SECONDS
        with httpx.Client(timeout=10) as client:
            while not self._stop.is_set() and self.sent < MAX_REQUESTS and time.monotonic() < end:
                if time.monotonic() - checked > 0.3:
                    checked = time.monotonic()
                    try:
                        weight = self._weight()
                    except ApiError as exc:  # a busy API server: the last weight, read again
                        self.errors.append(str(exc)[:200])
                    else:
                        self.weights_seen.append(weight)
                url = self.urls[1] if rng.random() * 100 < weight else self.urls[0]
                with contextlib.suppress(httpx.HTTPError):
                    client.post(
                        f"{url}/v1/document/parse", files={"file": ("p.png", body, "image/png")}
                    )
                self.sent += 1
                time.sleep(0.005)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(15)


def _tracks(canary_args: tuple[str, ...], env: dict[str, object]) -> tuple[LiveServer, LiveServer]:
    subnet = loopback_subnet()  # no clash on the pod port with an earlier or a parallel test
    stable = LiveServer(gated_delay_s=0.0, host=f"{subnet}.2", port=naming.HTTP_PORT, env=env)
    canary = LiveServer(
        gated_delay_s=0.0,
        host=f"{subnet}.3",
        port=naming.HTTP_PORT,
        engine_args=canary_args,
        env={**env, "DOCPARSER_LOG_FORMAT": "json"},  # request ids in its log: golden reads
    )
    return stable, canary


def _golden_set(cluster: Cluster, stable: LiveServer) -> None:
    """A ConfigMap of two documents whose expected text is what today's release (stable)
    reads in them: the regression set a team keeps for its documents."""
    binary, data = {}, {}
    for doc, size in (("invoice", (64, 32)), ("letter", (96, 48))):
        buf = io.BytesIO()
        Image.new("RGB", size, "white").save(buf, format="PNG")
        reply = httpx.post(
            f"{stable.url}/v1/document/parse",
            files={"file": (f"{doc}.png", buf.getvalue(), "image/png")},
            timeout=30,
        )
        binary[f"{doc}.png"] = base64.b64encode(buf.getvalue()).decode()
        data[f"{doc}.txt"] = reply.json()["content"]
    cluster.client.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "golden", "namespace": cluster.namespace},
            "binaryData": binary,
            "data": data,
        }
    )


def _walk_reaches(
    cluster: Cluster, traffic: Traffic, what: str, done: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """The walk's status once ``done`` holds. Why not plain ``wait_for``: a timeout names where
    the walk stood (its phase, step, message and last checks) and what the client loop had
    sent, so a stall on a loaded machine says whether the traffic, a window or the operator
    held it up; a walk that failed instead ends the wait at once, with its checks. 90 s
    bounds each wait: a phase takes about 10 s on two busy cores."""
    last: dict[str, Any] = {}

    def probe() -> dict[str, Any] | None:
        last.clear()
        last.update(analysis_status(cluster, "walk"))
        if done(last):
            return dict(last)
        assert last.get("phase") != "Failed", f"the walk failed waiting for {what}: {last}"
        return None

    try:
        return wait_for(what, probe, timeout=90)
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}; the walk: {last}; the client loop: {traffic.sent} sent, "
            f"{len(traffic.errors)} weight reads failed {traffic.errors[-3:]}"
        ) from None


def _hold_then_resume(cluster: Cluster, traffic: Traffic, analysis: dict[str, Any]) -> None:
    """A pause step holds its weight past a whole window with nobody acting; then a person
    runs `docparser-operator resume` (the real CLI, against the API server) and it goes on."""
    _walk_reaches(cluster, traffic, "the pause", lambda walk: walk.get("phase") == "Paused")
    time.sleep(analysis["intervalSeconds"] + 1)
    still = analysis_status(cluster, "walk")
    assert (still["phase"], still["step"], still["weight"]) == ("Paused", 1, 25), still
    resume = subprocess.run(
        [sys.executable, "-m", "docparser_operator", "resume", "walk", "-n", cluster.namespace],
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert resume.returncode == 0 and "resumed" in resume.stdout, resume.stderr


def _walk(
    cluster: Cluster,
    *,
    canary_args: tuple[str, ...] = (),
    analysis: dict[str, Any] = ANALYSIS,
    restart_at_step: int | None = None,
    resume_paused: bool = False,
    env: dict[str, object] | None = None,
) -> dict:
    stable, canary = _tracks(canary_args, env or {})
    servers = (stable, canary)
    try:
        start_all(*servers)
        first = docparser("walk", traffic=GATEWAY, replicas={"min": 2, "max": 2})
        with_canary = copy.deepcopy(first["spec"])
        with_canary["canary"] = {"weights": CANARY_WEIGHTS, "analysis": analysis}
        if "golden" in analysis:
            _golden_set(cluster, stable)
        operator = running_operator(cluster)
        operator.__enter__()
        gateway = GatewayController(cluster)  # accepts the route: Ready waits for a verdict
        gateway.__enter__()
        try:
            create(cluster, first)
            ips = {wait_for("stable revision", lambda: revision(cluster, "walk")): stable.host}
            with (
                Kubelet(cluster, ready_after=0.2, pod_ip=ips),
                Traffic(cluster, "walk", stable.url, canary.url) as traffic,
            ):
                # Stable serves first; then the release arrives as a canary with analysis.
                wait_for(
                    "stable Ready",
                    lambda: condition(cluster, "walk", "Ready").get("status") == "True",
                    timeout=60,
                )
                sampler = TrafficSampler(cluster, "walk", floor=2, interval=0.5)
                sampler.__enter__()  # every moment of the walk: Ready pods behind each backend
                set_spec(cluster, "walk", with_canary)
                canary_revision = wait_for(
                    "canary revision", lambda: revision(cluster, "walk", "canary")
                )
                ips[canary_revision] = canary.host
                if resume_paused:
                    _hold_then_resume(cluster, traffic, analysis)
                if restart_at_step is not None:
                    _walk_reaches(
                        cluster,
                        traffic,
                        f"step {restart_at_step}",
                        lambda walk: walk.get("step") == restart_at_step,
                    )
                    operator.__exit__(None, None, None)
                    operator = running_operator(cluster)
                    operator.__enter__()
                    after = analysis_status(cluster, "walk")
                    assert after["step"] >= restart_at_step, after  # never back to step 1
                done = _walk_reaches(
                    cluster,
                    traffic,
                    "a verdict",
                    lambda walk: walk.get("phase") in ("Succeeded", "Failed"),
                )
                wait_for(
                    "the routed weight follows the verdict",
                    lambda: traffic.weights_seen and traffic.weights_seen[-1] == done["weight"],
                    timeout=30,
                )
                sampler.__exit__(None, None, None)
                assert sampler.violations == [], sampler.report()
                assert sampler.samples, sampler.report()
                return {
                    "analysis": done,
                    "weights": list(traffic.weights_seen),
                    "phases": traffic.phases_seen,
                    "golden_reads": canary.log(tail=10**7).count('"golden-invoice.png-'),
                }
        finally:
            gateway.__exit__(None, None, None)
            operator.__exit__(None, None, None)
    finally:
        for server in servers:
            server.stop()


def test_a_good_canary_passes_the_gate_and_walks_every_step_to_full_traffic(
    real_cluster: Cluster,
) -> None:
    """Through a golden gate, a pause that holds until `resume`, an operator restart at step 2
    and the gate again before it, to 100 %."""
    cluster = real_cluster
    golden = {
        **ANALYSIS,
        "steps": [{"weight": 25, "pause": True}, {"weight": 50}],
        "golden": {"configMapRef": {"name": "golden"}, "everyStep": True},
        # The same engine on both tracks, answering in milliseconds: their p99s differ only by
        # the machine's noise, and one request held up by a busy CPU (make test runs the
        # cluster session beside this one) moves a p99 across a histogram bucket, a 2-2.5x
        # ratio. This scenario is about the walk (gates, pause, restart, resume); the latency
        # check's own sensitivity is test_a_slower_canary_is_rolled_back_on_its_p99's.
        "maxLatencyRatio": 20,
    }
    seen = _walk(cluster, analysis=golden, resume_paused=True, restart_at_step=2)
    done = seen["analysis"]
    assert (done["phase"], done["weight"], done["step"]) == ("Succeeded", 100, 2), done
    assert all(c["ok"] for c in done["checks"]), done
    assert [g["ok"] for g in done["golden"]] == [True, True]
    walked = [w for i, w in enumerate(seen["weights"]) if i == 0 or w != seen["weights"][i - 1]]
    assert walked[-3:] == [25, 50, 100], walked  # through each step, in order
    # The gate ran again before step 2 (each run parses every document on the canary, past
    # its result cache), the canary holding step 1's 25 % meanwhile.
    assert seen["golden_reads"] == 2, seen["golden_reads"]
    assert ("Verifying", 2, 0) not in seen["phases"], seen["phases"]
    assert condition(cluster, "walk", "Degraded")["status"] == "False"


def test_a_canary_answering_500s_is_rolled_back_at_the_failure_limit(
    real_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Also: no resync for 10 minutes, so only the pass each window asks for at its end
    (a quiet window has no event to wake the operator) can judge the windows."""
    monkeypatch.setenv("DOCPARSER_OPERATOR_RESYNC_INTERVAL_S", "600")
    cluster = real_cluster
    seen = _walk(cluster, canary_args=("--fail",))
    done = seen["analysis"]
    assert (done["phase"], done["weight"], done["step"]) == ("Failed", 0, 1), done
    assert done["failures"] == ANALYSIS["failureLimit"]
    assert "errorRate" in done["message"]
    assert max(seen["weights"]) <= 25, seen["weights"]  # never past its first step
    degraded = condition(cluster, "walk", "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "CanaryFailed", degraded


def test_a_slower_canary_is_rolled_back_on_its_p99(real_cluster: Cluster) -> None:
    """Every canary batch takes 0.3 s more (a slower kernel, a bigger tier): its answers are
    all 200s, but its p99 is far over 1.5 x stable's, so it goes back to 0 %. The result cache
    is off, or repeated documents would be answered from it at stable's speed."""
    cluster = real_cluster
    no_cache = {"DOCPARSER_CACHE_MAX_BYTES": 0}
    seen = _walk(cluster, canary_args=("--delay", "0.3"), env=no_cache)
    done = seen["analysis"]
    assert (done["phase"], done["weight"], done["step"]) == ("Failed", 0, 1), done
    checks = {c["name"]: c for c in done["checks"]}
    assert not checks["latencyP99Ratio"].get("ok") and checks["errorRate"]["ok"], checks
    assert checks["latencyP99Ratio"]["canary"] >= 0.3 > checks["latencyP99Ratio"]["stable"]
    assert "latencyP99Ratio" in done["message"]
    assert max(seen["weights"]) <= 25, seen["weights"]


def test_a_canary_that_reads_worse_fails_the_golden_gate_before_any_traffic(
    real_cluster: Cluster,
) -> None:
    cluster = real_cluster
    """The canary cuts its text short (as a too-low max_new_tokens would): the golden gate
    scores it against the expected text and stable's reading, and it never gets a request."""
    golden = {**ANALYSIS, "golden": {"configMapRef": {"name": "golden"}}}
    seen = _walk(cluster, canary_args=("--truncate", "8"), analysis=golden)
    done = seen["analysis"]
    assert (done["phase"], done["reason"], done["weight"]) == ("Failed", "GoldenRegression", 0)
    scores = {g["document"]: g for g in done["golden"]}
    assert set(scores) == {"invoice", "letter"}
    assert all(not g["ok"] and g["canary"] > 0.5 and g["stable"] == 0 for g in scores.values())
    assert max(seen["weights"]) == 0, seen["weights"]  # no traffic ever
    degraded = condition(cluster, "walk", "Degraded")
    assert degraded["reason"] == "GoldenRegression", degraded

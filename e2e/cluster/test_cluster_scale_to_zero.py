"""Scale to zero on real pods: a DocParser with `replicas.min: 0` goes to 0 after its idle window,
a job submitted at 0 is accepted at once by the front and completes once a pod is up, it goes
back to 0, and a synchronous parse right after is held by the front (counted in its
`docparser_front_held_requests`, which wakes the DocParser) and answered by the woken pod.
Redis is a `redis-server` on this host at the node bridge's address (every node's default
gateway), so it runs on the local cluster only.
"""

from __future__ import annotations

import base64
import math
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from cluster_settle import settled_start
from cluster_support import (
    conditions,
    docparser,
    page_png,
    record,
    service_url,
    wait_for,
    wait_ready,
)

pytestmark = [pytest.mark.slow, pytest.mark.cluster]
IDLE_AFTER = "10s"  # as the burst scenario's: waited twice, the state read within 1 s


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@pytest.fixture
def redis_url(cluster) -> Iterator[str]:
    if not cluster.local or shutil.which("redis-server") is None:
        pytest.skip("needs the local cluster and a redis-server binary on this host")
    from controlplane.localcluster.topology import host_bridge_address

    host = host_bridge_address()
    port = _free_port(host)
    server = subprocess.Popen(
        [
            *("redis-server", "--bind", host, "--port", str(port)),
            *("--save", "", "--appendonly", "no", "--protected-mode", "no"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection((host, port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"redis://{host}:{port}/0"
    finally:
        server.terminate()
        server.wait(10)


def _state(cluster, namespace: str, name: str) -> str:
    obj = cluster.get("docparser", name, namespace)
    return ((obj.get("status") or {}).get("scaleToZero") or {}).get("state", "")


def _runtime_pods(cluster, namespace: str, name: str) -> int:
    pods = cluster.items("pods", namespace, f"app.kubernetes.io/instance={name}")
    return sum(
        1
        for p in pods
        if p["metadata"]["labels"].get("app.kubernetes.io/name") == "docparser"
        and not p["metadata"].get("deletionTimestamp")
    )


def _redis_secret(namespace: str, redis_url: str) -> dict:
    """The Secret a DocParser at ``min: 0`` must name (the front and the pods share its queue)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "redis", "namespace": namespace},
        "data": {"url": base64.b64encode(redis_url.encode()).decode()},
    }


def _at_zero(cluster, namespace: str, name: str) -> bool:
    return (
        _state(cluster, namespace, name) == "Idle" and _runtime_pods(cluster, namespace, name) == 0
    )


def test_a_job_at_zero_is_accepted_wakes_a_pod_completes_and_it_sleeps_again(
    cluster, namespace, redis_url
):
    name = "night"
    secret = _redis_secret(namespace, redis_url)
    dp = docparser(name, namespace, cluster.runtime_image)
    dp["spec"]["replicas"] = {"min": 0, "max": 2, "scaleToZero": {"after": IDLE_AFTER}}
    dp["spec"]["runtime"]["redisUrlSecretRef"] = {"name": "redis"}
    cluster.apply(secret, dp)
    started = time.monotonic()
    wait_ready(cluster, namespace, name, timeout=180)
    slept = wait_for(
        cluster, namespace, "idle at 0 pods", lambda: _at_zero(cluster, namespace, name), 90
    )
    assert slept
    obj = cluster.get("docparser", name, namespace)
    ready = conditions(obj)["Ready"]
    assert (ready["status"], ready["reason"]) == ("True", "Idle"), ready
    assert conditions(obj)["Stalled"]["status"] == "False"
    assert conditions(obj)["Reconciling"]["status"] == "False"
    idle_at = time.monotonic()

    # Posted at once: the pod scaled away is most likely still in its 10 s preStop sleep. It
    # may even answer the POST, but its preStop hook told it to claim no job (the runtime's
    # server/drain.py), so the job stays queued, the backlog wakes a pod, and the state
    # below is Waking or Awake (a leaving pod that took the job left it Idle: it did once).
    leaving = sum(
        1
        for p in cluster.items("pods", namespace, f"app.kubernetes.io/instance={name}")
        if p["metadata"]["labels"].get(NAME_LABEL) == "docparser"
        and p["metadata"].get("deletionTimestamp")
    )

    # At 0 the endpoint's ClusterIP reaches the front: the job is accepted at once.
    url = service_url(cluster, namespace, name)
    submitted = time.monotonic()
    reply = wait_for(
        cluster,
        namespace,
        "the front accepting a job",
        lambda: _submit(url),
        timeout=30,
        interval=0.5,
    )
    accepted_s = time.monotonic() - submitted
    assert reply.status_code == 202, reply.text
    job = reply.json()["id"]
    done = wait_for(
        cluster,
        namespace,
        "the job done by a woken pod",
        lambda: _finished(url, job),
        timeout=180,
        interval=1.0,
    )
    done_s = time.monotonic() - submitted
    assert done["status"] == "succeeded", done
    assert "4711" in done["result"]["content"]
    assert _state(cluster, namespace, name) in ("Waking", "Awake")

    again = wait_for(
        cluster, namespace, "idle again", lambda: _at_zero(cluster, namespace, name), 120
    )
    assert again
    back_s = time.monotonic() - submitted
    # Idle at 0 counts pods that are leaving as gone, but a leaving pod still serves through
    # its preStop sleep (the Service keeps a terminating endpoint while no other is Ready),
    # and answers a parse sent then. The held path starts once the last one has exited.
    _wait_gone(cluster, namespace, name)

    # A synchronous parse right after it went back to 0 (a page the result cache has not seen,
    # so a pod reads it): the front holds it, which wakes the DocParser, then hands it over.
    front = service_url(cluster, namespace, f"{name}-front")
    page = page_png(("Invoice number 4712", "Total due 99 EUR"))
    asked = time.monotonic()
    held = _Background(
        lambda: httpx.post(
            f"{url}/v1/document/parse", files={"file": ("q.png", page, "image/png")}, timeout=150
        )
    )
    deadline = time.monotonic() + 30
    while _held(front) <= 0 and not held.done() and time.monotonic() < deadline:
        time.sleep(0.2)
    if held.done() or _held(front) <= 0:
        pytest.fail(
            "the front did not hold the parse: "
            + (held.describe() if held.done() else "no held request after 30 s")
            + "\n"
            + _front_diagnosis(cluster, namespace, name, front)
        )
    woke = wait_for(
        cluster,
        namespace,
        "the held parse waking the DocParser",
        lambda: _state(cluster, namespace, name) in ("Waking", "Awake"),
        60,
    )
    assert woke
    answer = held.result(160)
    held_s = time.monotonic() - asked
    assert answer.status_code == 200, answer.text
    assert "4712" in answer.json()["content"]
    record(
        "scale-to-zero",
        f"first Ready {idle_at - started:.0f}s incl. the {IDLE_AFTER} window; job at 0 "
        f"(posted with {leaving} pod(s) still leaving) accepted in {accepted_s:.2f}s, done in "
        f"{done_s:.1f}s (pod start from 0 + parse); back at 0 "
        f"{back_s:.0f}s after the job; a sync parse at 0 held and answered in {held_s:.1f}s",
    )


class _Background:
    """One request on a thread: a held parse blocks its client while the test watches."""

    def __init__(self, call) -> None:
        self.reply: httpx.Response | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call) -> None:
        try:
            self.reply = call()
        except BaseException as exc:  # reported by result()
            self.error = exc

    def done(self) -> bool:
        return not self._thread.is_alive()

    def describe(self) -> str:
        if self.error is not None:
            return f"it failed: {self.error!r}"
        assert self.reply is not None
        return f"it was answered {self.reply.status_code}: {self.reply.text[:300]}"

    def result(self, timeout: float) -> httpx.Response:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the held parse did not finish in time"
        if self.error is not None:
            raise self.error
        assert self.reply is not None
        return self.reply


def _held(front: str) -> float:
    """The front's held parses, from its /metrics (what the operator reads to wake)."""
    try:
        text = httpx.get(f"{front}/metrics", timeout=5).text
    except httpx.HTTPError:
        return 0.0
    for line in text.splitlines():
        if line.startswith("docparser_front_held_requests "):
            return float(line.split()[1])
    return 0.0


def _front_diagnosis(cluster, namespace: str, name: str, front: str) -> str:
    """What the front and the Services said, for a failure message."""
    try:
        metrics = [
            line
            for line in httpx.get(f"{front}/metrics", timeout=5).text.splitlines()
            if line.startswith("docparser_front")
        ]
    except httpx.HTTPError as exc:
        metrics = [f"/metrics failed: {exc!r}"]
    logs = cluster.kubectl(
        "logs", "-n", namespace, f"deployment/{name}-front", "--tail=40", check=False
    )
    slices = cluster.kubectl("get", "endpointslices", "-n", namespace, "-o", "wide", check=False)
    operator = cluster.kubectl(
        *("logs", "-n", "docparser-system", "deployment/docparser-operator", "--tail=400"),
        check=False,
    )
    mine = "\n".join(line for line in operator.splitlines() if name in line)[-4000:]
    return "\n".join([*metrics, "front log:", logs, "slices:", slices, "operator log:", mine])


def _submit(url: str) -> httpx.Response | None:
    try:
        reply = httpx.post(
            f"{url}/v1/jobs", files={"file": ("p.png", page_png(), "image/png")}, timeout=10
        )
    except httpx.HTTPError:
        return None  # kube-proxy may still be moving the ClusterIP to the front
    return reply if reply.status_code == 202 else None


def _finished(url: str, job: str) -> dict | None:
    try:
        body = httpx.get(f"{url}/v1/jobs/{job}", timeout=10).json()
    except (httpx.HTTPError, ValueError):
        return None
    return body if body.get("status") in ("succeeded", "failed", "cancelled") else None


# -- a burst at 0, and a front restart at 0 ------------------------------------------------

BURST_JOBS = 8
BURST_TARGET = 2  # jobs per pod when waking (autoscaling.target): 8 jobs need 4 pods ...
BURST_MAX = 3  # ... and replicas.max caps the wake at 3
MAX_SURGE = 1
RESTART_JOBS = 3
NAME_LABEL = "app.kubernetes.io/name"
FRONT = f"{NAME_LABEL}=docparser-front"


class _Peaks:
    """The highest values one wake reached, sampled while its jobs run: status.scaleToZero's
    wakeReplicas, the runtime Deployments' replicas and the runtime pods not being deleted
    (each holds a GPU), and when the DocParser was first seen Waking and a pod first Ready (a
    pod's job worker starts with its engine, before its readiness probe: a short burst may be
    done before any sample sees a Ready pod)."""

    def __init__(self) -> None:
        self.wake = self.replicas = self.pods = 0
        self.waking_at: float | None = None
        self.ready_at: float | None = None
        self.story: list[str] = []  # each change of (state, wakeReplicas, replicas, pods)
        self._start = time.monotonic()

    def sample(self, cluster, namespace: str, name: str) -> None:
        zero = (cluster.get("docparser", name, namespace).get("status") or {}).get("scaleToZero")
        zero = zero or {}
        self.wake = max(self.wake, int(zero.get("wakeReplicas") or 0))
        if zero.get("state") == "Waking" and self.waking_at is None:
            self.waking_at = time.monotonic()
        children = cluster.items(
            "deployments,pods", namespace, f"app.kubernetes.io/instance={name}"
        )
        replicas = sum(
            int(d["spec"].get("replicas") or 0)
            for d in children
            if d["kind"] == "Deployment" and d["metadata"]["name"] != f"{name}-front"
        )
        self.replicas = max(self.replicas, replicas)
        pods = [
            p
            for p in children
            if p["kind"] == "Pod"
            and p["metadata"]["labels"].get("app.kubernetes.io/name") == "docparser"
            and not p["metadata"].get("deletionTimestamp")
        ]
        self.pods = max(self.pods, len(pods))
        now = (zero.get("state"), zero.get("wakeReplicas"), replicas, len(pods))
        if not self.story or not self.story[-1].endswith(str(now)):
            self.story.append(f"{time.monotonic() - self._start:5.1f}s {now}")
        if self.ready_at is None and any(
            conditions(p).get("Ready", {}).get("status") == "True" for p in pods
        ):
            self.ready_at = time.monotonic()


def test_a_burst_at_zero_scales_out_to_its_backlog_and_a_front_restart_loses_no_job(
    cluster, namespace, redis_url
):
    """One DocParser, two wakes. A burst of jobs at 0 wakes ``ceil(jobs / target)`` pods capped
    at ``replicas.max`` (never more than max + maxSurge pods), every job completes and it goes
    back to 0. Then jobs queued at 0 survive the front pod's deletion and complete."""
    name = "batch"
    secret = _redis_secret(namespace, redis_url)
    dp = docparser(name, namespace, cluster.runtime_image, max_surge=MAX_SURGE, gpu=1)
    dp["spec"]["replicas"] = {"min": 0, "max": BURST_MAX, "scaleToZero": {"after": "10s"}}
    dp["spec"]["autoscaling"] = {"metric": "queue", "target": BURST_TARGET}
    dp["spec"]["runtime"]["redisUrlSecretRef"] = {"name": "redis"}
    cluster.apply(secret, dp)
    wait_for(cluster, namespace, "idle at 0 pods", lambda: _at_zero(cluster, namespace, name), 240)
    _wait_gone(cluster, namespace, name)
    # at 0 the Service reaches the front: its pod Ready, in the slices and the host's rules
    settled_start(cluster, namespace, name, docparser=name)

    url = service_url(cluster, namespace, name)
    submitted = time.monotonic()
    burst = _submit_all(cluster, namespace, url, BURST_JOBS)
    accepted_s = time.monotonic() - submitted
    peaks = _Peaks()
    results = _run_to_end(cluster, namespace, name, url, burst, peaks)
    done_s = time.monotonic() - submitted
    need = min(BURST_MAX, math.ceil(BURST_JOBS / BURST_TARGET))
    assert [r["status"] for r in results.values()] == ["succeeded"] * BURST_JOBS, results
    assert all("4711" in r["result"]["content"] for r in results.values())
    assert peaks.wake == need, f"wakeReplicas reached {peaks.wake}, the backlog needs {need}"
    assert peaks.replicas == need, f"the Deployment reached {peaks.replicas} replicas"
    assert need <= peaks.pods <= BURST_MAX + MAX_SURGE, f"{peaks.pods} runtime pods at once"
    assert peaks.waking_at is not None
    wait_for(cluster, namespace, "idle again", lambda: _at_zero(cluster, namespace, name), 120)
    back_s = time.monotonic() - submitted
    _wait_gone(cluster, namespace, name)

    # Jobs queued at 0 are in Redis, not in the front: its pod goes, a new one wakes the pods.
    restarted = time.monotonic()
    queued = _submit_all(cluster, namespace, url, RESTART_JOBS)
    assert [_status(url, job) for job in queued] == ["queued"] * RESTART_JOBS
    before = {p["metadata"]["uid"] for p in cluster.items("pods", namespace, FRONT)}
    cluster.kubectl(
        *("-n", namespace, "delete", "pod", "-l", FRONT, "--grace-period=1", "--wait=false")
    )
    restart = _Peaks()
    after = _run_to_end(cluster, namespace, name, url, queued, restart)
    print("front restart (state, wakeReplicas, replicas, pods):", *restart.story, sep="\n  ")
    assert [r["status"] for r in after.values()] == ["succeeded"] * RESTART_JOBS, after
    fronts = cluster.items("pods", namespace, FRONT)
    assert {p["metadata"]["uid"] for p in fronts} - before, "no new front pod"
    print("burst (state, wakeReplicas, replicas, pods):", *peaks.story, sep="\n  ")
    record(
        "scale-to-zero burst",
        f"{BURST_JOBS} jobs at 0 (target {BURST_TARGET}, max {BURST_MAX}) accepted in "
        f"{accepted_s:.2f}s; Waking after {peaks.waking_at - submitted:.1f}s with wakeReplicas "
        f"{peaks.wake}, Deployment replicas {peaks.replicas}, at most {peaks.pods} runtime pods; "
        f"first pod seen Ready {(peaks.ready_at or math.nan) - submitted:.1f}s; "
        f"{len(results)}/{BURST_JOBS} done in "
        f"{done_s:.1f}s; back at 0 {back_s:.0f}s after the burst. Front deleted with "
        f"{RESTART_JOBS} jobs queued at 0: {len(after)}/{RESTART_JOBS} done in "
        f"{time.monotonic() - restarted:.1f}s",
    )


def _submit_all(cluster, namespace: str, url: str, count: int) -> list[str]:
    """``count`` jobs posted one after the other, each accepted (202) by whatever the
    endpoint reaches: their ids."""
    return [
        wait_for(cluster, namespace, "a job accepted", lambda: _submit(url), 30, 0.2).json()["id"]
        for _ in range(count)
    ]


def _wait_gone(cluster, namespace: str, name: str) -> None:
    """Until the pods scaled away have exited too: a runtime pod in its preStop sleep still
    answers parses (it claims no job then), so a parse sent before it exits does not reach the
    front."""

    def gone() -> bool:
        pods = cluster.items("pods", namespace, f"app.kubernetes.io/instance={name}")
        return not [p for p in pods if p["metadata"]["labels"].get(NAME_LABEL) == "docparser"]

    wait_for(cluster, namespace, "the runtime pods gone", gone, 90)


def _status(url: str, job: str) -> str:
    return str(httpx.get(f"{url}/v1/jobs/{job}", timeout=10).json().get("status"))


def _run_to_end(cluster, namespace: str, name: str, url: str, jobs: list[str], peaks: _Peaks):
    """Sample the wake into ``peaks`` until every job is finished (bounded): job -> its body."""
    results: dict[str, dict] = {}

    def finished() -> bool:
        peaks.sample(cluster, namespace, name)
        for job in jobs:
            body = results.get(job) or _finished(url, job)
            if body:
                results[job] = body
        return len(results) == len(jobs)

    wait_for(cluster, namespace, f"{len(jobs)} jobs finished", finished, 180, 1.0)
    return results

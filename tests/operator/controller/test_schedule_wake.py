"""Scheduled capacity with scale to zero (issue 36), through reconcile passes with the clock
given to each pass, on the emulator and on a real kube-apiserver: a DocParser that sleeps at
night is woken by its window a quarter of an hour before the business hour, holds the
window's floor through the day, and after the window ends goes back to its own policy and
sleeps again. Status says the next change throughout; at rest, asleep or inside the window,
a pass writes nothing. KEDA's cron scaler needs a pod to scale from one; here the window
itself wakes the DocParser from zero, and a person (or a dashboard) reads when it will.

The kubelet stand-in makes pods Ready (the front must be Ready before the DocParser may
sleep: make-before-break); the idle readings come from a source that reads every Ready pod
as quiet (the readings' own tests are test_idle.py and test_scale_to_zero.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

import pytest
from docparser_operator.analysis.activity import Activity, PodReading
from docparser_operator.api import naming
from docparser_operator.api.kinds import DOCPARSER, KNOWN_KINDS
from docparser_operator.controller.credential import CredentialMemory
from docparser_operator.controller.reconcile import reconcile
from docparser_operator.core.plan.idle import IdleMemory
from dp_helpers import create, docparser
from kube_cluster import Cluster, client_for, wait_for
from kubelet_sim import Kubelet
from operator_runner import running_operator

DEPLOY, HPA = KNOWN_KINDS["Deployment"], KNOWN_KINDS["HorizontalPodAutoscaler"]
# 07:45 Berlin on weekdays, ten hours: the pods are up before the 08:00 business hour.
WINDOW = {"cron": "45 7 * * 1-5", "duration": "10h", "min": 2}
NAME = "desk"
RUN = CredentialMemory()


class Quiet:
    """Every Ready pod read, none with work to do: a night (or an evening) without clients."""

    def __init__(self) -> None:
        self.reads = 0

    def read(
        self, front: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
    ) -> Activity:
        self.reads += 1
        return Activity({p["metadata"]["name"]: PodReading() for p in [*front, *pods]})


def _runtime_replicas(cluster: Cluster) -> int:
    return sum(
        int(d["spec"].get("replicas") or 0)
        for d in cluster.list(DEPLOY, f"app.kubernetes.io/instance={NAME}")
        if d["metadata"]["name"] != naming.front(NAME)
    )


def _status(cluster: Cluster) -> dict[str, Any]:
    return (cluster.get(DOCPARSER, NAME) or {}).get("status") or {}


def _bounds(cluster: Cluster) -> tuple[int, int] | None:
    hpa = cluster.get(HPA, naming.hpa(NAME))
    return None if hpa is None else (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"])


def test_a_window_wakes_a_sleeping_docparser_before_the_business_hour(cluster: Cluster) -> None:
    api = client_for(cluster.kubeconfig, user_agent="docparser-operator/test")
    idle, quiet = IdleMemory(), Quiet()
    spec = docparser(
        NAME,
        replicas={
            "min": 0,
            "max": 3,
            "timeZone": "Europe/Berlin",  # UTC+1 in early March: 07:45 local is 06:45Z
            "scaleToZero": {"after": "10m"},
            "schedule": [WINDOW],
        },
        runtime={
            "image": "ghcr.io/example/docparser-runtime:0.1.0",
            "redisUrlSecretRef": {"name": "redis", "key": "url"},
        },
    )

    def step(now: str) -> Any:
        return reconcile(
            api,
            cluster.get(DOCPARSER, NAME),
            now=now,
            credentials=RUN,
            idle=idle,
            activity=quiet,
            poll_s=60,
        )

    def at_rest(first: str, second: str) -> Any:
        """A pass to take in what the cluster's controllers changed since the last write,
        then one that must find nothing to do."""
        cluster.settle()
        step(first)
        cluster.settle()
        mark = cluster.mark()
        out = step(second)
        assert out.applied == [] and not out.status_written, (out.applied, out.status_written)
        assert cluster.writes_since(mark) == [], cluster.writes_since(mark)
        return out

    create(cluster, spec)
    with Kubelet(cluster, ready_after=0.1):
        # Monday night, 02:00 Berlin: awake on one pod, then asleep once quiet for 10 minutes
        step("2026-03-02T01:00:00Z")
        wait_for(
            "the front Ready",
            lambda: ((cluster.get(DEPLOY, naming.front(NAME)) or {}).get("status", {})).get(
                "readyReplicas"
            ),
            timeout=30,
        )
        for minute in range(1, 30, 3):  # bounded: a reading every pass, 10 quiet minutes
            step(f"2026-03-02T01:{minute:02d}:00Z")
            if (_status(cluster).get("scaleToZero") or {}).get("state") == "Idle":
                break
        asleep = _status(cluster)
        assert asleep["scaleToZero"]["state"] == "Idle", asleep.get("scaleToZero")
        assert quiet.reads >= 2
        step("2026-03-02T01:40:00Z")  # the Idle decision applied: 0 pods, no autoscaler
        assert _runtime_replicas(cluster) == 0 and _bounds(cluster) is None
        assert _status(cluster)["schedule"] == {
            "next": {"at": "2026-03-02T06:45:00Z", "min": 2, "max": 3}
        }

        # asleep, at rest: nothing written, and the pass asks to be woken at the window
        rest = at_rest("2026-03-02T03:00:00Z", "2026-03-02T04:00:00Z")
        assert rest.wake_in_s == 2 * 3600 + 45 * 60 + 1, rest.wake_in_s
        assert _runtime_replicas(cluster) == 0

        # 07:45:01 Berlin: the window wakes it with its floor, a quarter hour before 08:00
        opened = step("2026-03-02T06:45:01Z")
        assert opened.applied, "the window changed nothing"
        assert _runtime_replicas(cluster) == 2 and _bounds(cluster) == (2, 3)
        woke = _status(cluster)
        assert woke["schedule"] == {
            "active": {"cron": WINDOW["cron"], "until": "2026-03-02T16:45:00Z", "min": 2, "max": 3},
            "next": {"at": "2026-03-02T16:45:00Z", "min": 0, "max": 3},
        }
        assert (woke.get("scaleToZero") or {}).get("state") != "Idle", woke.get("scaleToZero")
        live = cluster.get(DOCPARSER, NAME)
        assert live["spec"]["replicas"]["min"] == 0  # the spec is never written
        wait_for(
            "2 runtime pods Ready",
            lambda: (
                sum(
                    int((d.get("status") or {}).get("readyReplicas") or 0)
                    for d in cluster.list(DEPLOY, f"app.kubernetes.io/instance={NAME}")
                    if d["metadata"]["name"] != naming.front(NAME)
                )
                == 2
            ),
            timeout=30,
        )

        # the window open, quiet all day: the floor holds (no sleep), nothing written
        at_rest("2026-03-02T09:00:00Z", "2026-03-02T12:00:00Z")
        assert _runtime_replicas(cluster) == 2 and _bounds(cluster) == (2, 3)

        # 17:45:01 Berlin, the window over: its own policy again, then asleep once quiet
        step("2026-03-02T16:45:01Z")
        assert _bounds(cluster) == (1, 3), _bounds(cluster)
        assert _status(cluster)["schedule"] == {
            "next": {"at": "2026-03-03T06:45:00Z", "min": 2, "max": 3}
        }
        wait_for(
            "the front Ready again",
            lambda: ((cluster.get(DEPLOY, naming.front(NAME)) or {}).get("status", {})).get(
                "readyReplicas"
            ),
            timeout=30,
        )
        for minute in range(47, 60):
            step(f"2026-03-02T16:{minute:02d}:00Z")
            if (_status(cluster).get("scaleToZero") or {}).get("state") == "Idle":
                break
        assert _status(cluster)["scaleToZero"]["state"] == "Idle"
        step("2026-03-02T17:00:00Z")
        assert _runtime_replicas(cluster) == 0


def test_the_running_operator_wakes_itself_at_each_window_boundary(
    real_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real operator on the real API server and the real clock, with no resync for 10
    minutes: a window that opens every minute for 30 s is applied at its start and undone at
    its end by the passes the operator asked for at those boundaries (nothing else happens
    then), and between them it writes nothing."""
    monkeypatch.setenv("DOCPARSER_OPERATOR_RESYNC_INTERVAL_S", "600")
    cluster = real_cluster
    window = {"cron": "* * * * *", "duration": "30s", "min": 2, "max": 3}
    spec = docparser("minute", replicas={"min": 1, "max": 2, "schedule": [window]})
    seen: list[tuple[float, tuple[int, int] | None]] = []  # (unix time, HPA bounds)

    def bounds() -> tuple[int, int] | None:
        hpa = cluster.get(HPA, naming.hpa("minute"))
        return None if hpa is None else (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"])

    def until(what: str, test: Any, timeout: float) -> float:
        """Samples the HPA every 0.2 s until ``test(bounds)``; returns when it first held."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen.append((time.time(), bounds()))
            if test(seen[-1][1]):
                return seen[-1][0]
            time.sleep(0.2)
        raise AssertionError(f"{what} not within {timeout} s: {seen[-5:]}")

    with running_operator(cluster), Kubelet(cluster, ready_after=0.1):
        create(cluster, spec)
        # the first boundary after the operator settled, whichever it is
        first_at = until("the HPA", lambda b: b is not None, 60)
        state = bounds()
        opening = until("a window boundary", lambda b: b != state, 75)
        if state == (2, 3):  # created inside a window: that was its end; wait for the next start
            opening = until("the window's start", lambda b: b == (2, 3), 75)
        closing = until("the window's end", lambda b: b == (1, 2), 45)
        # each change came at its boundary: the start on a whole minute, the end 30 s later
        # (the pass asked for one second after it: status times have whole seconds)
        assert 0 <= opening % 60 < 10, (opening % 60, first_at)
        assert 30 <= closing - (opening - opening % 60) < 40, closing - opening
        # the pass writes status after it applied the HPA: read it once that write is in
        deadline = time.monotonic() + 10
        while True:
            status = cluster.get(DOCPARSER, "minute")["status"]["schedule"]
            if "active" not in status or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert "active" not in status and status["next"]["min"] == 2, status
        # at rest until the next start: the Deployment's pods settle, then no write at all
        time.sleep(5)
        mark = cluster.mark()
        quiet_until = opening - opening % 60 + 59
        time.sleep(max(0.0, quiet_until - time.time()))
        assert cluster.writes_since(mark) == [], cluster.writes_since(mark)
    # (after the operator: its runner holds stdout while it runs)
    undone = closing - opening
    print(f"window applied {opening % 60:.1f} s after the minute, undone {undone:.1f} s later")

"""Scale to zero: when a DocParser with ``replicas.min: 0`` sleeps and wakes (pure).

States (``status.scaleToZero.state``; the operator keeps no other record, so a restart goes on
from status):

- ``Awake``: the spec's size (the autoscaler's, at least 1), or more while a wake's backlog
  lasts. It goes ``Idle`` once a reading shows no request in flight, no job queued or running,
  no request held, no client request for ``scaleToZero.after`` (since the last reading that
  showed work, the pods' last-request time, and the moment it woke), no canary analysis
  running, and the front Ready (it takes the traffic: make-before-break);
- ``Idle``: size 0; the endpoint Service and the HTTPRoute send to the front. Jobs queued or
  requests held at the front, a synchronous parse the front found no capacity for since it
  went idle (with ``holdSeconds: 0`` it is answered 503 at once and never held: without this
  its client would retry for ever), or a canary analysis that needs traffic, wake it;
- ``Waking``: from 0 to ``max(the spec's size, what the backlog needs)`` pods, at most
  ``replicas.max`` (the rollout planner adds ``maxSurge`` at most during a rollout): the
  backlog needs ``ceil((jobs queued + requests held) / per-pod target)`` pods, the per-pod
  target being ``autoscaling.target`` (``maxBatchSize`` for the cpu metric). The front holds
  requests meanwhile. ``Awake`` again in the pass that finds a runtime pod Ready.

The backlog's size (``wakeReplicas``) stays a floor while jobs are queued, held or running,
so the pods a burst woke are not taken away under the jobs before the autoscaler, recreated
when the DocParser is awake, has read its metric.

Readings come from the front's and the pods' ``/metrics`` (analysis/activity.py), at most
every ``poll_s`` (a bounded HTTP read per pod; no API request: the pod addresses come from the
watch-backed index, and status is written only when it changes). Without a reading nothing
changes: a DocParser neither sleeps nor wakes on a view it could not read, and says so.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass, field
from typing import Literal

from docparser_operator.analysis.activity import Activity
from docparser_operator.api.models import DocParserSpec
from docparser_operator.api.status_models import ScaleToZeroStatus
from docparser_operator.core.plan.problem import Problem

State = Literal["Awake", "Idle", "Waking"]
STATES: tuple[State, ...] = ("Awake", "Idle", "Waking")


def epoch(rfc3339: str) -> float:
    return datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def rfc3339(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Seen:
    """What the operator read of one DocParser lately (one process's memory)."""

    read_at: float | None = None  # when the last reading was attempted (epoch seconds)
    activity: Activity | None = None  # the last reading; None when it failed
    error: str = ""  # why the last reading failed
    busy_at: float | None = None  # the last time a reading showed work (or the first reading)

    def due(self, now: float, poll_s: float) -> bool:
        return self.read_at is None or now - self.read_at >= poll_s

    def record(self, activity: Activity, now: float) -> None:
        """A reading: work waiting, under way or new requests since the last reading move
        ``busy_at`` to now. The first reading of a process counts as work (its memory of the
        quiet time before is gone: the window restarts, never ends early)."""
        if self.busy_at is None or activity.busy or activity.new_requests(self.activity):
            self.busy_at = now
        self.busy_at = max(self.busy_at, activity.last_request)
        self.read_at, self.activity, self.error = now, activity, ""

    def failed(self, error: str, now: float) -> None:
        self.read_at, self.activity, self.error = now, None, error


@dataclass
class IdleMemory:
    """Every DocParser's ``Seen`` (kept in the operator's state, like AnalysisMemory)."""

    seen: dict[str, Seen] = field(default_factory=dict[str, Seen])

    def of(self, uid: str) -> Seen:
        return self.seen.setdefault(uid, Seen())


@dataclass(frozen=True)
class IdleStep:
    """The idle decision of one pass."""

    state: State
    since: str  # when this state began
    size: int  # pods the rollout plans for (0 at Idle)
    reason: str  # why this state, in words (status, Events)
    wake_replicas: int | None = None  # the backlog's floor while it lasts
    problem: Problem | None = None
    next_read_s: float = 0.0  # when the next reading is due (a pass is asked for then)

    @property
    def awake(self) -> bool:
        return self.state == "Awake"

    def to_status(self) -> ScaleToZeroStatus:
        """``status.scaleToZero``, through its model."""
        return ScaleToZeroStatus(
            state=self.state, since=self.since, reason=self.reason, wake_replicas=self.wake_replicas
        )


def per_pod(spec: DocParserSpec) -> int:
    """Jobs (or held requests) one pod is sized for when waking."""
    if spec.autoscaling.metric == "cpu":
        return spec.runtime.max_batch_size
    return spec.autoscaling.target


def backlog_need(spec: DocParserSpec, activity: Activity) -> int:
    """Pods the backlog needs, 1..replicas.max."""
    need = math.ceil(activity.backlog / per_pod(spec))
    return max(1, min(spec.replicas.max, need))


def _work(activity: Activity) -> str:
    return f"{activity.queued} job(s) queued and {activity.held} request(s) held at the front"


def decide_idle(
    spec: DocParserSpec,
    previous: ScaleToZeroStatus | None,
    seen: Seen,
    *,
    ready: int,
    front_ready: bool,
    analysis_running: bool,
    now: str,
    poll_s: float,
) -> IdleStep:
    """This pass's state and size (module doc). ``previous``: status.scaleToZero;
    ``ready``: Ready runtime pods; ``analysis_running``: a canary analysis reads traffic."""
    policy = spec.replicas.idle_policy
    assert policy is not None  # only for replicas.min 0
    at = epoch(now)
    before = previous or ScaleToZeroStatus()
    state: State = next((s for s in STATES if s == before.state), "Awake")
    since = str(before.since or now)
    floor: int | None = before.wake_replicas
    reason = str(before.reason or "serving")
    act = seen.activity
    problem = None
    if act is None and seen.read_at is not None:
        problem = Problem(
            "ActivityUnknown",
            f"{seen.error}: the DocParser neither scales to zero nor wakes until it can read",
        )
    next_read = max(1.0, poll_s - (at - seen.read_at)) if seen.read_at is not None else 1.0

    def step(new: State, why: str, wake: int | None) -> IdleStep:
        moved = new != state
        size = 0 if new == "Idle" else min(spec.replicas.max, max(spec.replicas.size, wake or 0))
        return IdleStep(new, now if moved else since, size, why, wake, problem, next_read)

    if state == "Idle":
        if analysis_running:
            return step("Waking", "a canary analysis needs traffic: waking", 1)
        if act is not None and act.backlog > 0:
            need = backlog_need(spec, act)
            return step("Waking", f"{_work(act)}: waking with {need} pod(s)", need)
        if act is not None and act.wanted > epoch(since):
            why = "a synchronous parse found no pod at the front (answered 503 with Retry-After)"
            return step("Waking", f"{why}: waking with 1 pod(s)", 1)
        return step("Idle", reason, None)
    # A reading of no pod at all (the front being replaced, no runtime pod Ready yet) says
    # nothing about the backlog: keep the wake's floor, or the pods starting for it would be
    # scaled away and started again once the new front is read.
    if act is not None and act.pods:
        if act.backlog > 0:
            floor = max(floor or 1, backlog_need(spec, act))
        elif act.running == 0:
            floor = None  # the wake's backlog is done: the autoscaler sizes from here
    if state == "Waking":
        if ready > 0:
            return step("Awake", f"{ready} pod(s) Ready: traffic back on the runtime pods", floor)
        return step("Waking", reason, floor)
    quiet_since = max(seen.busy_at or at, epoch(since))
    quiet = act is not None and not act.busy and not analysis_running
    if quiet and front_ready and at - quiet_since >= policy.after_seconds:
        why = f"no requests and no jobs for {policy.after}: scaled to 0 (the front takes requests)"
        return step("Idle", why, None)
    return step("Awake", reason, floor)

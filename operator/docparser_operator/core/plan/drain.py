"""Drains that never drop serving capacity (pure: cordoned nodes and our pods in, holds out).

A DeepSeek-OCR-2 pod needs minutes to load, so a drain that evicts a serving pod before its
replacement is Ready removes that capacity for minutes (for ``replicas: 1``, all of it). The
operator therefore makes the drain make-before-break, as rollouts are:

1. **Leaving pods.** Pods of the spec's revisions on a cordoned node (``spec.unschedulable``,
   what ``kubectl drain`` and every managed node upgrade set first; the node lifecycle
   controller mirrors it as the ``node.kubernetes.io/unschedulable`` taint), not already
   terminating. A terminating pod (``deletionTimestamp``: evicted, or stuck on a dead node) is
   neither leaving nor capacity: its ReplicaSet has replaced it already and the Deployment's
   ``spec.replicas`` (what ``maxSurge`` is counted against) never included it twice.
2. **Replacements first.** The rollout planner (core/plan/rollout_planner.py) raises each
   revision by its leaving pods, within ``size + rollout.maxSurge`` together with any rollout,
   so replacements start on other nodes (the scheduler never picks a cordoned one). Once the
   leaving pods are gone the revision returns to its size (the ReplicaSet removes a
   not-yet-Ready extra first).
3. **The PDB holds the eviction** (render/pdb.py): ``minAvailable`` is the at-rest size, so an
   eviction is allowed only while more pods are Ready than that, i.e. once a replacement is
   Ready. This holds from the start, not only once the operator has seen the cordon:
   ``kubectl drain`` evicts milliseconds after it cordons, faster than any controller reacts.
4. **A drain never waits for ever.** Each drained node gets a deadline,
   ``since + rollout.drainTimeoutSeconds``; past it the PDB's ``minAvailable`` drops to the
   Ready pods on nodes not cordoned (``staying``: the drained node's pods may all go), and
   status and an Event name the capacity lost.
   ``since`` is when the operator first saw the node cordoned with our pods on it, kept in
   ``status.drains`` (not in memory): a restarted operator, or another replica taking the
   Lease, continues the same clock. Status, rather than the node: a Node records no cordon
   time (a NoSchedule taint has no ``timeAdded``), and writing to Nodes would need a
   cluster-scoped write permission. If status is lost (the DocParser recreated), the clock
   restarts: the safe direction, a longer hold bounded by the next deadline.

Without Node reads (an operator limited to namespaces whose RBAC grants no cluster-scope
read) the operator cannot tell a drain from any other eviction, and a PDB that held every
eviction would hold a drain for ever: it falls back to ``maxUnavailable: 1`` (the drain
evicts one pod at a time and does not wait for a replacement) and says so in its log.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from docparser_operator.api import labels
from docparser_operator.api.status_models import DrainStatus
from docparser_operator.core.plan import rollout_planner as rollout
from docparser_operator.core.plan.problem import Problem

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
Phase = Literal["Replacing", "Evictable", "Blocked", "DeadlineExceeded"]


def is_cordoned(node: Mapping[str, Any]) -> bool:
    """A node that takes no new pods and is being emptied (cordoned or tainted as such)."""
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return True
    return any(t.get("key") == UNSCHEDULABLE_TAINT for t in spec.get("taints") or [])


def cordoned_names(nodes: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    return frozenset(str((n.get("metadata") or {}).get("name")) for n in nodes if is_cordoned(n))


def _parse(ts: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(ts.replace("Z", "+00:00"))


def _format(when: datetime.datetime) -> str:
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _revision(pod: Mapping[str, Any]) -> str:
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(labels.LABEL_REVISION, ""))


def _terminating(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _node(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


@dataclass(frozen=True)
class NodeDrain:
    """One cordoned node holding pods of the spec's revisions."""

    node: str
    since: str
    deadline: str
    pods: int
    expired: bool


@dataclass(frozen=True)
class DrainPlan:
    """What the drains in progress ask of this pass: pods to replace and whether the PDB
    holds evictions (``guard``) or relaxes (no Node reads, or a deadline passed)."""

    aware: bool  # the operator can read nodes (else: PDB-only protection)
    leaving: Mapping[str, int] = field(default_factory=dict)  # revision -> pods to replace
    drains: tuple[NodeDrain, ...] = ()
    staying: int = 0  # Ready pods of the DocParser on nodes not cordoned (not terminating)

    @property
    def guard(self) -> bool:
        return self.aware and not any(d.expired for d in self.drains)

    @property
    def expired(self) -> bool:
        """A drain's deadline passed: the PDB lets its pods go, keeping only ``staying``."""
        return self.aware and any(d.expired for d in self.drains)

    def wake_in_s(self, now: str) -> float | None:
        """Seconds to the next deadline still ahead (nothing else wakes the operator then)."""
        left = [
            (_parse(d.deadline) - _parse(now)).total_seconds() for d in self.drains if not d.expired
        ]
        return max(0.0, min(left)) + 1.0 if left else None


AT_REST = DrainPlan(aware=True)  # what `docparser-operator render` assumes (the chart grants it)


def plan_drain(
    pods: Iterable[Mapping[str, Any]],
    cordoned: frozenset[str] | None,
    revisions: set[str],
    since: Mapping[str, str],
    *,
    now: str,
    timeout_s: int,
) -> DrainPlan:
    """The drains of one DocParser now. ``cordoned``: the cordoned nodes (None: the operator
    may not read nodes); ``since``: node -> when its drain began, from ``status.drains`` as
    last written (``drains_since``)."""
    if cordoned is None:
        return DrainPlan(aware=False)
    leaving: dict[str, int] = {}
    per_node: dict[str, int] = {}
    staying = 0
    for pod in pods:
        node, revision = _node(pod), _revision(pod)
        if node not in cordoned and not _terminating(pod) and _ready(pod):
            staying += 1
        if node not in cordoned or revision not in revisions or _terminating(pod):
            continue
        leaving[revision] = leaving.get(revision, 0) + 1
        per_node[node] = per_node.get(node, 0) + 1
    drains = []
    for node, count in sorted(per_node.items()):
        start = since.get(node, now)
        deadline = _format(_parse(start) + datetime.timedelta(seconds=timeout_s))
        drains.append(NodeDrain(node, start, deadline, count, _parse(now) >= _parse(deadline)))
    return DrainPlan(aware=True, leaving=leaving, drains=tuple(drains), staying=staying)


def drains_since(previous: Iterable[DrainStatus] | None) -> dict[str, str]:
    """node -> since, of ``status.drains`` as last written (what ``plan_drain`` continues)."""
    return {str(d.node): d.since for d in previous or () if d.since}


@dataclass
class DrainReport:
    """What the drains mean for status: Degraded problems, Progressing waits, status.drains."""

    problems: list[Problem] = field(default_factory=list)
    waits: list[str] = field(default_factory=list)
    status: list[DrainStatus] = field(default_factory=list[DrainStatus])


def _unschedulable(pods: Iterable[Mapping[str, Any]], revisions: set[str]) -> str | None:
    """The scheduler's message for a replacement it cannot place, if any."""
    for pod in pods:
        if _revision(pod) not in revisions or _terminating(pod):
            continue
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if (
                cond.get("type") == "PodScheduled"
                and cond.get("status") == "False"
                and cond.get("reason") == "Unschedulable"
            ):
                return str(cond.get("message") or "Unschedulable")
    return None


def report(
    plan: DrainPlan,
    step: rollout.Rollout,
    pods: list[dict[str, Any]],
    cordoned: frozenset[str],
) -> DrainReport:
    """Each drain's phase (status.drains), and why it waits (Progressing ``Draining``, while
    replacements start) or is held (Degraded ``DrainBlocked``, advisory: the DocParser serves
    at its size meanwhile). Once a replacement is Ready nothing waits on the operator: a node
    cordoned and never drained must not leave the DocParser Progressing."""
    out = DrainReport()
    if not plan.drains:
        return out
    size = sum(r.target for r in step.revisions if r.desired)
    ready = sum(r.ready for r in step.revisions if r.desired)
    wanted = {r.revision for r in step.revisions if r.desired}
    # No replacement at all may start (with some room, the pods go one replacement at a time)
    short = [
        r
        for r in step.revisions
        if r.desired and r.target > 0 and r.drain == 0 and plan.leaving.get(r.revision, 0)
    ]
    why = ""
    if short:
        why = (
            "no replacement can start: rollout.maxSurge is 0"
            if step.max_surge == 0
            else f"no room for a replacement within rollout.maxSurge {step.max_surge}"
        )
    else:
        message = _unschedulable(pods, set(plan.leaving))
        if message is not None:
            why = f"the replacement cannot be scheduled: {message}"
    elsewhere = sum(
        1
        for p in pods
        if _revision(p) in wanted and _ready(p) and not _terminating(p) and _node(p) not in cordoned
    )
    for d in plan.drains:
        phase: Phase
        lost = max(0, size - elsewhere)
        if d.expired and lost:
            phase = "DeadlineExceeded"
            out.problems.append(
                Problem(
                    "DrainBlocked",
                    f"node {d.node}: drain deadline {d.deadline} passed, its {d.pods} pod(s) may "
                    f"be evicted without a Ready replacement: {elsewhere}/{size} Ready pods "
                    f"elsewhere, capacity lost {lost} pod(s)" + (f" ({why})" if why else ""),
                )
            )
        elif why and not d.expired:
            phase = "Blocked"
            out.problems.append(
                Problem(
                    "DrainBlocked",
                    f"node {d.node} is draining: eviction of its {d.pods} pod(s) held until "
                    f"{d.deadline}; {why}",
                )
            )
        elif ready > size or d.expired:  # past the deadline with nothing to lose: the same
            phase = "Evictable"  # the operator's part is done: the drainer evicts (no wait)
        else:
            phase = "Replacing"
            out.waits.append(
                f"drain of node {d.node}: {d.pods} pod(s) held until their replacements are "
                f"Ready ({ready}/{size + sum(plan.leaving.values())} Ready; deadline {d.deadline})"
            )
        out.status.append(
            DrainStatus(node=d.node, since=d.since, deadline=d.deadline, pods=d.pods, phase=phase)
        )
    return out

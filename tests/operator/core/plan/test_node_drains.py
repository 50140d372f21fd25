"""Drains that never drop serving capacity: the pure planner (core/plan/drain.py, rule 4)."""

from __future__ import annotations

from typing import Any

from docparser_operator.core.plan import drain
from docparser_operator.core.plan import rollout_planner as rollout
from docparser_operator.kube.nodes import CordonedNodes

REV = "aaaaaa"
NOW = "2026-01-01T00:05:00Z"


def pod(name: str, node: str, *, ready: bool = True, terminating: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"docparser.io/revision": REV}}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:04:00Z"
    return {
        "metadata": meta,
        "spec": {"nodeName": node},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def desired(size: int, surge: int, leaving: dict[str, int]) -> rollout.Desired:
    return rollout.Desired(REV, None, 0, size, surge, "service", leaving)


def test_cordon_state_is_read_from_the_node_spec_or_its_taint() -> None:
    nodes = [
        {"metadata": {"name": "a"}, "spec": {"unschedulable": True}},
        {
            "metadata": {"name": "b"},
            "spec": {
                "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
            },
        },
        {"metadata": {"name": "c"}, "spec": {"taints": [{"key": "other"}]}},
    ]
    assert drain.cordoned_names(nodes) == {"a", "b"}


def test_pods_on_a_cordoned_node_are_leaving_but_terminating_ones_are_not() -> None:
    pods = [
        pod("p1", "n1"),
        pod("p2", "n1", terminating=True),  # evicted, or stuck on a dead node
        pod("p3", "n2"),
        {**pod("x", "n1"), "metadata": {"name": "x", "labels": {"docparser.io/revision": "old"}}},
    ]
    plan = drain.plan_drain(pods, frozenset({"n1"}), {REV}, {}, now=NOW, timeout_s=600)
    assert plan.leaving == {REV: 1}
    assert [(d.node, d.pods, d.since, d.deadline) for d in plan.drains] == [
        ("n1", 1, NOW, "2026-01-01T00:15:00Z")
    ]
    assert plan.guard and plan.wake_in_s(NOW) == 601.0
    only_terminating = [pod("p2", "n1", terminating=True)]
    gone = drain.plan_drain(only_terminating, frozenset({"n1"}), {REV}, {}, now=NOW, timeout_s=600)
    assert gone.leaving == {} and gone.drains == ()


def test_the_deadline_counts_from_status_so_a_restart_does_not_reset_it() -> None:
    previous = {"n1": "2026-01-01T00:00:00Z"}
    plan = drain.plan_drain(
        [pod("p1", "n1")], frozenset({"n1"}), {REV}, previous, now=NOW, timeout_s=300
    )
    (d,) = plan.drains
    assert d.since == "2026-01-01T00:00:00Z" and d.deadline == NOW and d.expired
    assert not plan.guard and plan.wake_in_s(NOW) is None


def test_past_the_deadline_only_ready_pods_off_cordoned_nodes_must_stay() -> None:
    """``staying`` (the PDB's minAvailable past a deadline): Ready pods of any revision on
    nodes not cordoned; not the drained node's, not a Pending or terminating one."""
    pods = [
        pod("p1", "n1"),  # on the drained node
        pod("p2", "n2"),
        pod("p3", "n3"),
        pod("pending", "", ready=False),  # the replacement no node can take
        pod("old", "n2", terminating=True),
        {**pod("x", "n3"), "metadata": {"name": "x", "labels": {"docparser.io/revision": "o"}}},
    ]
    previous = {"n1": "2026-01-01T00:00:00Z"}
    plan = drain.plan_drain(pods, frozenset({"n1"}), {REV}, previous, now=NOW, timeout_s=60)
    assert plan.expired and plan.staying == 3
    within = drain.plan_drain(pods, frozenset({"n1"}), {REV}, {}, now=NOW, timeout_s=60)
    assert not within.expired and within.guard


def test_without_node_reads_nothing_is_replaced_and_the_pdb_relaxes() -> None:
    plan = drain.plan_drain([pod("p1", "n1")], None, {REV}, {}, now=NOW, timeout_s=600)
    assert not plan.aware and not plan.guard and plan.leaving == {}


def test_a_leaving_pod_is_replaced_within_max_surge_and_the_size_returns_after() -> None:
    """replicas 1, maxSurge 1: the revision grows to 2 while its pod is on a cordoned node,
    stays there while the replacement loads, and returns to 1 once the pod is gone."""
    state = rollout.RevisionState(REV, "stable", replicas=1, ready=1)
    step = rollout.plan(desired(1, 1, {REV: 1}), [state])
    (r,) = step.revisions
    assert (r.target, r.replicas, r.drain) == (1, 2, 1)
    loading = rollout.plan(desired(1, 1, {REV: 1}), [rollout.RevisionState(REV, "stable", 2, 1)])
    assert loading.revisions[0].replicas == 2
    ready = rollout.plan(desired(1, 1, {REV: 1}), [rollout.RevisionState(REV, "stable", 2, 2)])
    assert ready.revisions[0].replicas == 2  # never below Ready capacity while it is there
    done = rollout.plan(desired(1, 1, {}), [rollout.RevisionState(REV, "stable", 2, 1)])
    assert done.revisions[0].replicas == 1  # the evicted pod is gone: back to the size


def test_max_surge_bounds_replacements_and_zero_allows_none() -> None:
    state = rollout.RevisionState(REV, "stable", replicas=3, ready=3)
    assert rollout.plan(desired(3, 1, {REV: 2}), [state]).revisions[0].replicas == 4
    blocked = rollout.plan(desired(3, 0, {REV: 1}), [state]).revisions[0]
    assert (blocked.replicas, blocked.drain) == (3, 0)


def test_a_drain_during_a_rollout_shares_the_surge_and_the_old_revision_keeps_its_pods() -> None:
    """Old revision 'bbbbbb' serves 2 Ready pods; the new stable is loading with the one surge
    pod. A leaving pod of the new revision gets no room beyond maxSurge, and the replacement's
    readiness is no surplus that would let the old revision drop a Ready pod."""
    old = rollout.RevisionState("bbbbbb", "stable", replicas=2, ready=2)
    new = rollout.RevisionState(REV, "stable", replicas=1, ready=1)
    step = rollout.plan(desired(2, 1, {REV: 1}), [old, new])
    assert step.pods <= 2 + 1
    assert step.get("bbbbbb") is not None and step.get("bbbbbb").replicas == 2  # type: ignore[union-attr]


def _report(pods: list[dict[str, Any]], surge: int, replicas: int, ready: int) -> drain.DrainReport:
    plan = drain.plan_drain(pods, frozenset({"n1"}), {REV}, {}, now=NOW, timeout_s=600)
    step = rollout.plan(
        desired(1, surge, dict(plan.leaving)),
        [rollout.RevisionState(REV, "stable", replicas, ready)],
    )
    return drain.report(plan, step, pods, frozenset({"n1"}))


def test_phases_replacing_evictable_blocked() -> None:
    replacing = _report([pod("p1", "n1"), pod("p2", "n2", ready=False)], 1, 2, 1)
    assert replacing.status[0].phase == "Replacing" and not replacing.problems
    assert replacing.waits[0].startswith("drain of node n1")
    evictable = _report([pod("p1", "n1"), pod("p2", "n2")], 1, 2, 2)
    assert evictable.status[0].phase == "Evictable"
    assert not evictable.waits and not evictable.problems  # the drainer's turn, no Progressing
    blocked = _report([pod("p1", "n1")], 0, 1, 1)
    assert blocked.status[0].phase == "Blocked" and not blocked.waits
    (problem,) = blocked.problems
    assert problem.reason == "DrainBlocked" and "node n1" in problem.message
    assert "maxSurge is 0" in problem.message


def test_two_leaving_pods_and_room_for_one_replace_one_at_a_time() -> None:
    """maxSurge 1, two pods on the cordoned node: one replacement now (not Blocked); the
    budget then lets one go, and its ReplicaSet's new pod is the second replacement."""
    pods = [pod("p1", "n1"), pod("p2", "n1"), pod("p3", "n2"), pod("p4", "n2", ready=False)]
    plan = drain.plan_drain(pods, frozenset({"n1"}), {REV}, {}, now=NOW, timeout_s=600)
    state = rollout.RevisionState(REV, "stable", replicas=4, ready=3)
    step = rollout.plan(desired(3, 1, dict(plan.leaving)), [state])
    assert (step.revisions[0].replicas, step.revisions[0].drain) == (4, 1)
    report = drain.report(plan, step, pods, frozenset({"n1"}))
    assert report.status[0].phase == "Replacing" and not report.problems


def test_an_unschedulable_replacement_blocks_the_drain_with_the_schedulers_words() -> None:
    pending = pod("p2", "", ready=False)
    pending["status"]["conditions"].append(
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        }
    )
    report = _report([pod("p1", "n1"), pending], 1, 2, 1)
    assert report.status[0].phase == "Blocked"
    assert "Insufficient nvidia.com/gpu" in report.problems[0].message


def test_past_the_deadline_status_names_the_capacity_lost() -> None:
    pods = [pod("p1", "n1")]
    previous = {"n1": "2026-01-01T00:00:00Z"}
    plan = drain.plan_drain(pods, frozenset({"n1"}), {REV}, previous, now=NOW, timeout_s=60)
    step = rollout.plan(
        desired(1, 0, dict(plan.leaving)), [rollout.RevisionState(REV, "stable", 1, 1)]
    )
    report = drain.report(plan, step, pods, frozenset({"n1"}))
    assert report.status[0].phase == "DeadlineExceeded"
    (problem,) = report.problems
    assert problem.reason == "DrainBlocked"
    assert "0/1 Ready pods elsewhere, capacity lost 1 pod(s)" in problem.message


def test_events_follow_the_phase_changes_and_the_deadline_names_the_capacity_lost() -> None:
    from docparser_operator.api.status_models import DocParserStatus
    from docparser_operator.core.plan.problem import Problem
    from docparser_operator.core.status.outcome import Outcome
    from docparser_operator.core.status.transition_events import events_for

    def entry(phase: str) -> dict[str, Any]:
        return {"node": "n1", "since": NOW, "deadline": NOW, "pods": 1, "phase": phase}

    lost = Problem("DrainBlocked", "node n1: drain deadline ... capacity lost 1 pod(s)")

    def reasons(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[str]:
        out = Outcome(
            previous_status=DocParserStatus.model_validate({"drains": before}),
            status=DocParserStatus.model_validate({"drains": after}),
            problems=[lost],
        )
        return [e.reason for e in events_for(out) if e.reason.startswith("Drain")]

    assert reasons([], [entry("Replacing")]) == ["DrainStarted"]
    assert reasons([entry("Replacing")], [entry("Replacing")]) == []  # no change, no Event
    assert reasons([entry("Replacing")], [entry("Evictable")]) == ["DrainReplaced"]
    assert reasons([], [entry("Blocked")]) == ["DrainStarted", "DrainBlocked"]
    out = Outcome(
        previous_status=DocParserStatus.model_validate({"drains": [entry("Blocked")]}),
        status=DocParserStatus.model_validate({"drains": [entry("DeadlineExceeded")]}),
        problems=[lost],
    )
    (event,) = [e for e in events_for(out) if e.reason.startswith("Drain")]
    assert event.type == "Warning" and event.reason == "DrainDeadlineExceeded"
    assert "capacity lost 1 pod(s)" in event.message


def test_an_eviction_or_a_binding_alone_is_worth_a_pass() -> None:
    """A pod evicted from a dead node keeps its last status for ever: its deletionTimestamp
    alone must wake the owner (back to its size now, not at the next resync)."""
    from docparser_operator.core.plan.triggers import pod_signature

    bound = pod("p1", "n1")
    assert pod_signature(bound) != pod_signature({**bound, "spec": {}})
    assert pod_signature(bound) != pod_signature(pod("p1", "n1", terminating=True))


def test_an_unanswered_start_up_check_keeps_the_budget_guarding() -> None:
    """No answer at start-up (nothing listens): neither the access review nor the list says
    "forbidden", so the operator keeps drain protection (no cordon known yet, the next poll
    tells) instead of falling back for its whole life on a transient error."""
    import socket

    from docparser_operator.kube.client import KubeClient
    from kubernetes import client as k8s_client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = k8s_client.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    nodes = CordonedNodes(KubeClient(cfg, timeout_s=2))
    assert nodes.start() is True and nodes() == frozenset() and not nodes.forbidden


def test_replacements_starting_are_progressing_with_reason_draining() -> None:
    from docparser_operator.api.status_models import DrainStatus
    from docparser_operator.core.status.conditions import build_status

    wait = "drain of node n1: 1 pod(s) held until their replacements are Ready"
    status = build_status(
        name="dr",
        namespace="ns",
        generation=1,
        stable=None,
        canary=None,
        routed_weight=0,
        requested_weight=0,
        ready_serving=1,
        min_ready=1,
        rolling=[wait],
        problems=[],
        previous=None,
        now=NOW,
        selector="",
        drains=[DrainStatus(node="n1", since=NOW, deadline=NOW, pods=1, phase="Replacing")],
        draining=True,
    ).to_wire()
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Progressing"]["reason"] == "Draining"
    assert conditions["Reconciling"]["status"] == "True"  # Flux: InProgress, Argo: Progressing
    assert status["drains"][0]["phase"] == "Replacing"


def test_past_the_deadline_with_the_replacement_ready_nothing_is_lost_or_degraded() -> None:
    pods = [pod("p1", "n1"), pod("p2", "n2")]
    previous = {"n1": "2026-01-01T00:00:00Z"}
    plan = drain.plan_drain(pods, frozenset({"n1"}), {REV}, previous, now=NOW, timeout_s=60)
    state = rollout.RevisionState(REV, "stable", 2, 2)
    step = rollout.plan(desired(1, 1, dict(plan.leaving)), [state])
    report = drain.report(plan, step, pods, frozenset({"n1"}))
    assert report.status[0].phase == "Evictable" and not report.problems and not plan.guard

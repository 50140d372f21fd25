"""Scale to zero, pure: the reading of a pod's /metrics, the idle decision over an idle -> wake
-> idle cycle, what each step plans and renders (size, endpoint, route, HPA), the status and
Events it leads to, and the verdicts of Flux (kstatus) and Argo CD (the chart's Lua) on it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from docparser_operator.analysis.activity import Activity, PodReading, parse
from docparser_operator.api.models import DocParser
from docparser_operator.api.status_models import DocParserStatus, ScaleToZeroStatus
from docparser_operator.cli.main import render_resource
from docparser_operator.core.plan.children import Observed, prepare
from docparser_operator.core.plan.idle import IdleStep, Seen, decide_idle, epoch, rfc3339
from docparser_operator.core.render import render_target
from docparser_operator.core.status.outcome import Outcome
from docparser_operator.core.status.report import pass_status
from docparser_operator.core.status.transition_events import events_for
from dp_helpers import GATEWAY, decide_on, docparser, owner
from gitopscheck.checker import AGREEING, GitOpsCheck

UID = "0b7d3c5e-0000-4000-8000-00000000002a"
T0 = "2026-03-02T01:00:00Z"
FRONT_TEXT = """# TYPE docparser_front_held_requests gauge
docparser_front_held_requests {held}
# TYPE docparser_front_queued_jobs gauge
docparser_front_queued_jobs {queued}
# TYPE docparser_front_requests_total counter
docparser_front_requests_total {requests}
# TYPE docparser_front_last_request_timestamp_seconds gauge
docparser_front_last_request_timestamp_seconds {last}
# TYPE docparser_front_capacity_wanted_timestamp_seconds gauge
docparser_front_capacity_wanted_timestamp_seconds {wanted}
"""
POD_TEXT = """# TYPE docparser_requests_total counter
docparser_requests_total{{route="/v1/document/parse",method="POST",status="200"}} {requests}
docparser_requests_total{{route="/readyz",method="GET",status="200"}} 999
# TYPE docparser_outstanding_requests gauge
docparser_outstanding_requests {in_flight}
# TYPE docparser_jobs_queued gauge
docparser_jobs_queued {queued}
# TYPE docparser_jobs_running gauge
docparser_jobs_running {running}
"""


def at(seconds: float) -> str:
    return rfc3339(epoch(T0) + seconds)


def sleeper(name: str = "night", **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "replicas": {"min": 0, "max": 3, "scaleToZero": {"after": "60s"}},
        "runtime": {
            "image": "ghcr.io/example/docparser-runtime:0.1.0",
            "redisUrlSecretRef": {"name": "redis"},
        },
        "autoscaling": {"metric": "backlog", "target": 4},
    }
    dp = docparser(name, **{**base, **spec})
    dp["metadata"].update(namespace="ocr", uid=UID, generation=1)
    return dp


def test_a_pods_metrics_text_becomes_a_reading() -> None:
    front = parse(FRONT_TEXT.format(held=2, queued=5, requests=7, last=1.7e9, wanted=1.6e9))
    assert front == PodReading(requests=7, held=2, queued=5, last_request=1.7e9, wanted=1.6e9)
    pod = parse(POD_TEXT.format(requests=3, in_flight=1, queued=5, running=2))
    assert (pod.requests, pod.in_flight, pod.queued, pod.running) == (3, 1, 5, 2)  # no probes
    both = Activity({"front": front, "pod": pod})
    assert (both.queued, both.held, both.backlog, both.running) == (5, 2, 7, 2)  # queue shared
    with pytest.raises(ValueError):
        parse("docparser_front_held_requests not-a-number\n")


def test_the_front_exports_every_series_the_operator_reads() -> None:
    """The names are a contract between two packages: read the runtime's own front series."""
    from docparser_runtime.server.ops.metrics import FrontMetrics
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    front = FrontMetrics(registry)
    front.held.set(2)
    front.queued_jobs.set(5)
    front.requests.inc(3)
    front.wanted.set(1.6e9)
    reading = parse(generate_latest(registry).decode())
    assert (reading.held, reading.queued, reading.requests, reading.wanted) == (2, 5, 3, 1.6e9)
    assert reading.last_request > 1.7e9  # its start, before the first request


def test_new_requests_are_counted_per_pod() -> None:
    one = Activity({"a": PodReading(requests=3)})
    assert not one.new_requests(one)
    assert Activity({"a": PodReading(requests=4)}).new_requests(one)
    assert Activity({"a": PodReading(requests=3), "b": PodReading(requests=1)}).new_requests(one)
    assert not Activity({"b": PodReading(requests=0)}).new_requests(one)  # a new idle pod


def reading(*, held: int = 0, queued: int = 0, running: int = 0, requests: int = 0) -> Activity:
    return Activity(
        {
            "night-front-1": PodReading(requests=requests, held=held, queued=queued),
            "night-abc-1": PodReading(running=running, queued=queued),
        }
    )


class Cycle:
    """One DocParser's idle decisions pass by pass, its status carried like the operator's."""

    def __init__(self, dp: dict[str, Any]) -> None:
        self.dp = dp
        self.spec = DocParser.from_resource(dp).spec
        self.seen = Seen()
        self.status: dict[str, Any] | None = None

    def step(
        self,
        t: float,
        activity: Activity | None,
        *,
        ready: int = 1,
        front_ready: bool = True,
        analysis: bool = False,
    ) -> IdleStep:
        now = at(t)
        if activity is None:
            self.seen.failed("cannot read the /metrics of night-front-1", epoch(now))
        else:
            self.seen.record(activity, epoch(now))
        step = decide_idle(
            self.spec,
            ScaleToZeroStatus.model_validate(self.status) if self.status else None,
            self.seen,
            ready=ready,
            front_ready=front_ready,
            analysis_running=analysis,
            now=now,
            poll_s=5,
        )
        self.status = step.to_status().to_wire()
        return step


def test_an_idle_wake_idle_cycle() -> None:
    cycle = Cycle(sleeper())
    first = cycle.step(0, reading(requests=5))
    assert (first.state, first.size) == ("Awake", 1)  # the spec's size: floor 1
    assert cycle.step(30, reading(requests=5)).state == "Awake"  # quiet for 30 s of 60
    assert cycle.step(59, reading(requests=5)).state == "Awake"
    asleep = cycle.step(61, reading(requests=5))
    assert (asleep.state, asleep.size, asleep.since) == ("Idle", 0, at(61))
    assert "no requests and no jobs for 60s" in asleep.reason
    # At zero: status polls at the front are no work; a job queued there is.
    assert cycle.step(300, reading(requests=9), ready=0).state == "Idle"
    woke = cycle.step(305, reading(queued=9, requests=10), ready=0)
    assert (woke.state, woke.size, woke.wake_replicas) == ("Waking", 3, 3)  # ceil(9/4), max 3
    assert "9 job(s) queued" in woke.reason and woke.since == at(305)
    burst = cycle.step(310, reading(queued=20), ready=0)
    assert (burst.state, burst.size, burst.since) == ("Waking", 3, at(305))  # never past max
    awake = cycle.step(330, reading(queued=6, running=3), ready=1)
    assert (awake.state, awake.size, awake.since) == ("Awake", 3, at(330))
    assert cycle.step(340, reading(running=2), ready=3).size == 3  # jobs run: pods stay
    done = cycle.step(350, reading(), ready=3)
    assert (done.state, done.size, done.wake_replicas) == ("Awake", 1, None)  # the HPA's again
    assert cycle.step(395, reading(), ready=1).state == "Awake"  # 55 s after work was seen
    again = cycle.step(401, reading(), ready=1)
    assert (again.state, again.size) == ("Idle", 0)


def test_a_reading_of_no_pod_keeps_the_wakes_size() -> None:
    """While waking, the front may be replaced and no runtime pod be Ready yet: a reading
    of no pod at all is no news of the backlog, so the pods starting for it stay (it once
    dropped the wake from 3 pods to 1 and started them again; found by the burst e2e)."""
    cycle = Cycle(sleeper())
    cycle.step(0, reading())
    assert cycle.step(61, reading()).state == "Idle"
    woke = cycle.step(70, reading(queued=9), ready=0)
    assert (woke.state, woke.size, woke.wake_replicas) == ("Waking", 3, 3)
    blank = cycle.step(75, Activity({}), ready=0)
    assert (blank.state, blank.size, blank.wake_replicas) == ("Waking", 3, 3)
    awake = cycle.step(90, reading(queued=8, running=1), ready=1)
    assert (awake.state, awake.size) == ("Awake", 3)


def test_no_sleep_while_anything_works_or_the_front_is_not_ready() -> None:
    cycle = Cycle(sleeper())
    cycle.step(0, reading())
    assert cycle.step(100, reading(running=1)).state == "Awake"  # a job runs
    assert cycle.step(170, reading(), front_ready=False).state == "Awake"  # nobody to take over
    assert cycle.step(175, reading(), analysis=True).state == "Awake"  # analysis holds the timer
    assert cycle.step(180, reading()).state == "Idle"  # 80 s after the last job


def test_an_unreadable_view_neither_sleeps_nor_wakes_and_says_so() -> None:
    cycle = Cycle(sleeper())
    cycle.step(0, reading())
    blind = cycle.step(500, None)
    assert blind.state == "Awake" and blind.problem is not None
    assert blind.problem.reason == "ActivityUnknown" and "night-front-1" in blind.problem.message
    assert cycle.step(505, reading()).state == "Idle"
    assert cycle.step(600, None, ready=0).state == "Idle"


def test_a_parse_refused_at_the_front_wakes_it() -> None:
    """With ``holdSeconds: 0`` the front answers a parse at zero 503 + Retry-After at once:
    nothing is ever held or queued, so only the front's stamp of the refusal can wake it
    (without it the client would retry for ever against zero pods)."""
    cycle = Cycle(sleeper())
    cycle.step(0, reading())
    assert cycle.step(61, reading()).state == "Idle"

    def refused(when: float) -> Activity:
        return Activity({"night-front-1": PodReading(requests=2, wanted=epoch(at(when)))})

    assert cycle.step(70, refused(40), ready=0).state == "Idle"  # before it went idle: old news
    woke = cycle.step(80, refused(78), ready=0)
    assert (woke.state, woke.size, woke.wake_replicas) == ("Waking", 1, 1)
    assert "no pod at the front" in woke.reason and "503" in woke.reason
    awake = cycle.step(100, refused(78), ready=1)
    assert (awake.state, awake.size) == ("Awake", 1)
    assert cycle.step(150, refused(78)).state == "Awake"  # the window runs from the wake
    assert cycle.step(165, refused(78)).state == "Idle"
    assert cycle.step(200, refused(78), ready=0).state == "Idle"  # the old stamp: no wake


def test_a_canary_analysis_wakes_it_and_says_so() -> None:
    cycle = Cycle(sleeper())
    cycle.step(0, reading())
    assert cycle.step(61, reading()).state == "Idle"
    woke = cycle.step(70, reading(), ready=0, analysis=True)
    assert (woke.state, woke.size) == ("Waking", 1)
    assert "canary analysis needs traffic" in woke.reason


def test_a_restarted_operator_waits_a_whole_window_again() -> None:
    """A new process has no memory of the quiet before it: the window restarts."""
    cycle = Cycle(sleeper())
    cycle.status = {"state": "Awake", "since": at(-3600), "reason": "serving"}
    assert cycle.step(0, reading()).state == "Awake"
    assert cycle.step(61, reading()).state == "Idle"


def plan_at(dp: dict[str, Any], step: IdleStep, live: dict, pods: int, ready: int) -> Any:
    """decide over a cluster that has ``pods`` runtime pods (``ready`` of them Ready)."""
    rendered = prepare(render_resource(dp), owner(dp))
    children = {(c["kind"], c["metadata"]["name"]): copy.deepcopy(c) for c in rendered}
    for (kind, name), obj in children.items():
        obj["metadata"]["managedFields"] = [{"manager": "docparser-operator", "operation": "Apply"}]
        obj["metadata"]["uid"] = f"uid-{kind}-{name}"
        if kind == "Deployment" and "front" not in name:
            obj["spec"]["replicas"] = pods
            obj["status"] = {"replicas": pods, "readyReplicas": ready}
    children.update(live)
    return decide_on(dp, Observed(children, []), previous_weight=0, idle=step)


def _endpoint(decision: Any) -> dict[str, str] | None:
    for action in decision.actions:
        if action.key == ("Service", "night") and action.obj is not None:
            return dict(action.obj["spec"]["selector"])
    return None


def test_each_state_plans_its_size_traffic_and_autoscaler() -> None:
    dp = sleeper(replicas={"min": 0, "max": 3, "scaleToZero": {"after": "60s"}})
    idle = IdleStep("Idle", T0, 0, "idle")
    decision = plan_at(dp, idle, {}, pods=1, ready=1)
    assert decision.target is not None and decision.target.rollout.pods == 0
    assert _endpoint(decision) == {
        "app.kubernetes.io/name": "docparser-front",
        "app.kubernetes.io/instance": "night",
    }
    phases = {a.key[0]: a.phase for a in decision.actions if a.verb != "prune"}
    assert phases["Service"] == "traffic" and phases["Deployment"] == "shrink"  # front first
    waking = plan_at(dp, IdleStep("Waking", T0, 3, "3 jobs"), {}, pods=0, ready=0)
    assert waking.target is not None and waking.target.rollout.pods == 3  # max 3 (+ surge)
    assert waking.target.to_front and not waking.target.awake
    kinds = {(a.verb, a.key[0]) for a in waking.actions}
    assert ("apply", "HorizontalPodAutoscaler") not in kinds  # no autoscaler until awake
    awake = plan_at(dp, IdleStep("Awake", T0, 3, "up"), {}, pods=3, ready=1)
    assert awake.target is not None and not awake.target.to_front
    assert _endpoint(awake) is None  # already the runtime pods (rendered at rest)


def test_the_route_sends_to_the_front_while_no_pod_is_ready() -> None:
    dp = sleeper(traffic=GATEWAY)
    idle = render_resource(dp, idle=True)
    (route,) = [o for o in idle if o["kind"] == "HTTPRoute"]
    weights = {b["name"]: b["weight"] for b in route["spec"]["rules"][0]["backendRefs"]}
    assert weights["night-front"] == 100 and sum(weights.values()) == 100
    (route,) = [o for o in render_resource(dp) if o["kind"] == "HTTPRoute"]
    weights = {b["name"]: b["weight"] for b in route["spec"]["rules"][0]["backendRefs"]}
    assert weights["night-front"] == 0 and sum(weights.values()) == 100
    assert not [o for o in idle if o["kind"] == "HorizontalPodAutoscaler"]


def test_the_front_is_rendered_only_for_min_zero_and_shares_the_pods_settings() -> None:
    plain = docparser("day", replicas={"min": 1, "max": 3})
    plain["metadata"]["namespace"] = "ocr"
    assert not [o for o in render_resource(plain) if o["metadata"]["name"].startswith("day-front")]
    objects = render_resource(sleeper(auth={"apiKeySecretRef": {"name": "keys"}}))
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert {("Deployment", "night-front"), ("Service", "night-front")} <= names
    assert ("Service", "night-serving") in names
    (front,) = [
        o for o in objects if o["metadata"]["name"] == "night-front" and o["kind"] == "Deployment"
    ]
    (gpu,) = [o for o in objects if o["kind"] == "Deployment" and o is not front]
    env = {
        e["name"]: e.get("value", e.get("valueFrom"))
        for e in front["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    pod_env = {
        e["name"]: e.get("value", e.get("valueFrom"))
        for e in gpu["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["DOCPARSER_ROLE"] == "front"
    assert env["DOCPARSER_FRONT_BACKEND_URL"] == "http://night-serving.ocr.svc:8000"
    for shared in (
        "DOCPARSER_REDIS_URL",
        "DOCPARSER_REDIS_PREFIX",
        "DOCPARSER_API_KEYS_FILE",
        "DOCPARSER_MODEL_VERSION",
        "DOCPARSER_MAX_TIER",
    ):
        assert env[shared] == pod_env[shared], shared
    pod = front["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False  # the front never calls the API
    assert "nvidia.com/gpu" not in str(pod["containers"][0]["resources"])
    assert front["spec"]["replicas"] == 1


def test_the_front_reaches_the_serving_service_by_its_cluster_ip_once_it_has_one() -> None:
    """A cluster without DNS for pods (the local one) must still let the front hand a held
    parse over: by the Service's ClusterIP once it exists, by its name before."""
    dp = sleeper()
    awake = IdleStep("Awake", T0, 1, "serving")

    def backend(live: dict) -> str:
        decision = plan_at(dp, awake, live, pods=1, ready=1)
        assert decision.target is not None
        (front,) = [
            o
            for o in render_target(decision.target)
            if o["kind"] == "Deployment" and o["metadata"]["name"] == "night-front"
        ]
        env = front["spec"]["template"]["spec"]["containers"][0]["env"]
        return next(e["value"] for e in env if e["name"] == "DOCPARSER_FRONT_BACKEND_URL")

    assert backend({}) == "http://night-serving.ocr.svc:8000"
    service = {
        "kind": "Service",
        "metadata": {
            "name": "night-serving",
            "ownerReferences": [{"uid": UID, "controller": True}],
        },
        "spec": {"clusterIP": "10.96.0.42"},
    }
    assert backend({("Service", "night-serving"): service}) == "http://10.96.0.42:8000"
    foreign = copy.deepcopy(service)
    foreign["metadata"]["ownerReferences"] = [{"uid": "someone-else", "controller": True}]
    assert backend({("Service", "night-serving"): foreign}) == "http://night-serving.ocr.svc:8000"


def _front_live(ready: int) -> dict:
    return {
        ("Deployment", "night-front"): {
            "kind": "Deployment",
            "metadata": {
                "name": "night-front",
                "ownerReferences": [{"uid": UID, "controller": True}],
            },
            "status": {"readyReplicas": ready},
        }
    }


def _status(
    dp: dict[str, Any],
    step: IdleStep,
    previous: dict[str, Any],
    *,
    front: int = 1,
    pods: int = 0,
    ready: int = 0,
) -> dict[str, Any]:
    decision = plan_at(dp, step, {}, pods=pods, ready=ready)
    out = Outcome(name="night", previous_status=DocParserStatus.model_validate(previous), idle=step)
    live = {
        **{a.key: a.obj for a in decision.actions if a.obj and a.verb == "apply"},
        **_front_live(front),
    }
    return pass_status(owner(dp), decision.target, live, [], out, T0).to_wire()


def judged(check: GitOpsCheck, dp: dict[str, Any], st: dict[str, Any]) -> tuple[str, str]:
    obj = {**dp, "status": st}
    flux, argo = check.kstatus(obj)[0], check.argocd_health(obj)[0]
    assert AGREEING[flux] == argo, (flux, argo, st)
    return flux, argo


def _cond(st: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next(c for c in st["conditions"] if c["type"] == ctype)


def test_idle_and_waking_are_ready_current_and_healthy(gitops_check: GitOpsCheck) -> None:
    dp = sleeper()
    idle = _status(dp, IdleStep("Idle", T0, 0, "no requests and no jobs for 60s"), {})
    ready = _cond(idle, "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Idle")
    assert _cond(idle, "Reconciling")["status"] == _cond(idle, "Stalled")["status"] == "False"
    assert idle["scaleToZero"]["state"] == "Idle" and idle["replicas"] == 0
    assert judged(gitops_check, dp, idle) == ("Current", "Healthy")
    waking = _status(dp, IdleStep("Waking", T0, 2, "3 job(s) queued"), idle)
    assert (_cond(waking, "Ready")["status"], _cond(waking, "Ready")["reason"]) == (
        "True",
        "Waking",
    )
    assert _cond(waking, "Reconciling")["status"] == "False"  # a wake is no rollout
    assert judged(gitops_check, dp, waking) == ("Current", "Healthy")
    blind = _status(dp, IdleStep("Idle", T0, 0, "idle"), idle, front=0)
    assert _cond(blind, "Ready")["reason"] == "FrontNotReady"
    assert judged(gitops_check, dp, blind) == ("InProgress", "Progressing")
    typed = DocParserStatus.model_validate
    to_waking = Outcome(previous_status=typed(idle), status=typed(waking))
    assert [e.reason for e in events_for(to_waking)] == ["Waking"]
    to_idle = Outcome(previous_status=typed(waking), status=typed(idle))
    events = [e.reason for e in events_for(to_idle)]
    assert events == ["ScaledToZero"]


def test_a_spec_change_while_idle_starts_no_pod_and_stays_current(
    gitops_check: GitOpsCheck,
) -> None:
    dp = sleeper()
    idle = _status(dp, IdleStep("Idle", T0, 0, "idle"), {})
    changed = copy.deepcopy(dp)
    changed["spec"]["runtime"]["maxBatchSize"] = 4
    changed["metadata"]["generation"] = 2
    decision = plan_at(changed, IdleStep("Idle", T0, 0, "idle"), {}, pods=0, ready=0)
    assert decision.target is not None and decision.target.rollout.pods == 0
    new = [a for a in decision.actions if a.key[0] == "Deployment" and a.verb == "apply"]
    assert new and all(a.obj is not None and a.obj["spec"]["replicas"] == 0 for a in new)
    after = _status(changed, IdleStep("Idle", T0, 0, "idle"), idle)
    assert after["observedGeneration"] == 2
    assert judged(gitops_check, changed, after) == ("Current", "Healthy")


def test_a_reading_starts_a_pass_only_when_its_decision_differs_from_status() -> None:
    """controller/wakeups.py: at rest a reading changes nothing, so it costs no pass."""
    from docparser_operator.controller.wakeups import changed

    step = IdleStep("Idle", T0, 0, "idle")
    wire = step.to_status().to_wire()
    body: dict[str, Any] = {"status": {"scaleToZero": wire, "conditions": []}}
    assert not changed(body, step)
    assert changed(body, IdleStep("Waking", at(5), 2, "2 jobs", wake_replicas=2))
    blind = Cycle(sleeper())
    blind.step(0, None)
    assert blind.seen.error and changed(body, IdleStep("Idle", T0, 0, "idle", problem=_problem()))


def _problem() -> Any:
    from docparser_operator.core.plan.problem import Problem

    return Problem("ActivityUnknown", "x: the DocParser neither scales to zero nor wakes until")

"""What the Gateway's controller said about our route, and what the operator does with it
(pure): Ready waits for the first acceptance, stale or foreign entries are not ours, a route
nobody judges is reported, and make-before-break holds scale-downs until the controller has
observed the route generation that stopped sending traffic to them."""

from __future__ import annotations

import copy
import datetime
from typing import Any

from docparser_operator.api.models import DocParser
from docparser_operator.api.naming import FIELD_MANAGER
from docparser_operator.cli.main import render_resource
from docparser_operator.core.plan.children import Observed, prepare
from docparser_operator.core.status.conditions import build_status
from docparser_operator.core.status.route_verdict import (
    JUDGE_GRACE_S,
    route_problems,
    route_verdict,
)
from dp_helpers import CANARY_WEIGHTS, GATEWAY, decide_on, docparser, owner

WRITTEN = "2026-01-01T00:00:00Z"
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
GATEWAY_REF = DocParser.from_resource(docparser("inv", traffic=GATEWAY)).spec.traffic.gateway_ref
assert GATEWAY_REF is not None


def route(generation: int = 1, *parents: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "inv",
            "namespace": "ocr",
            "generation": generation,
            "managedFields": [{"manager": FIELD_MANAGER, "operation": "Apply", "time": WRITTEN}],
        },
        "status": {"parents": list(parents)},
    }


def parent(status: str, generation: int, name: str = "web", **extra: str) -> dict[str, Any]:
    return {
        "parentRef": {"name": name, "namespace": "infra", **extra},
        "controllerName": "gateway.envoyproxy.io/gatewayclass-controller",
        "conditions": [
            {
                "type": "Accepted",
                "status": status,
                "reason": "Accepted" if status == "True" else "NotAllowedByListeners",
                "message": "Route is accepted" if status == "True" else "no listener allows it",
                "observedGeneration": generation,
            }
        ],
    }


def test_no_status_is_not_judged_and_is_reported_after_the_grace_period():
    live = route(1)
    verdict = route_verdict(live, GATEWAY_REF)
    assert verdict is not None and not verdict.judged and not verdict.accepted_ever
    assert "awaiting the verdict of Gateway infra/web" in (verdict.waiting or "")
    soon = T0 + datetime.timedelta(seconds=JUDGE_GRACE_S - 1)
    assert route_problems(verdict, live, soon) == []
    later = T0 + datetime.timedelta(seconds=JUDGE_GRACE_S + 5)
    [problem] = route_problems(verdict, live, later)
    assert problem.reason == "RouteNotJudged"
    assert "Gateway infra/web may not exist" in problem.message
    assert f"since {T0:%Y-%m-%dT%H:%M:%SZ}" in problem.message
    # the same words pass after pass: waiting costs no status write or Event per resync
    assert route_problems(verdict, live, later + datetime.timedelta(hours=1)) == [problem]
    assert route_problems(verdict, live, None) == []  # no clock, no claim about time


def test_only_our_parent_at_the_current_generation_counts():
    stale = parent("False", 1, name="old-gateway")  # an earlier parentRef's entry
    foreign = parent("False", 2, sectionName="https")  # another listener of the same Gateway
    accepted_before = parent("True", 1)
    verdict = route_verdict(route(2, stale, foreign, accepted_before), GATEWAY_REF)
    assert verdict is not None
    assert verdict.accepted_ever and not verdict.judged and verdict.refusal is None
    now = T0 + datetime.timedelta(seconds=5)
    assert route_problems(verdict, route(2, stale, foreign, accepted_before), now) == []

    refused_now = route_verdict(route(2, parent("False", 2)), GATEWAY_REF)
    assert refused_now is not None and refused_now.judged
    [problem] = route_problems(refused_now, route(2), now)
    assert problem.reason == "RouteNotAccepted"
    assert problem.message == (
        "Gateway infra/web: NotAllowedByListeners: no listener allows it"
    )  # the controller's words
    assert route_verdict(route(2, parent("True", 2)), GATEWAY_REF).judged  # type: ignore[union-attr]


def _status(gate: tuple[str, str] | None) -> dict[str, dict[str, Any]]:
    status = build_status(
        name="inv",
        namespace="ocr",
        generation=1,
        stable=None,
        canary=None,
        routed_weight=0,
        requested_weight=0,
        ready_serving=1,
        min_ready=1,
        rolling=[],
        problems=[],
        previous=None,
        now=WRITTEN,
        selector="x",
        route_gate=gate,
    ).to_wire()
    return {c["type"]: c for c in status["conditions"]}


def test_ready_waits_for_the_route_verdict():
    assert _status(None)["Ready"]["status"] == "True"
    waiting = _status(("AwaitingRouteVerdict", "HTTPRoute generation 1: awaiting ..."))
    assert (waiting["Ready"]["status"], waiting["Ready"]["reason"]) == (
        "False",
        "AwaitingRouteVerdict",
    )


def _live(resource: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """The children of a settled 50 % canary: stable grown to 2 Ready pods, canary 1."""
    live = {}
    for child in prepare(render_resource(resource), owner(resource)):
        obj = copy.deepcopy(child)
        obj["metadata"]["managedFields"] = [{"manager": FIELD_MANAGER, "operation": "Apply"}]
        obj["metadata"].update(generation=1, uid=f"uid-{obj['metadata']['name']}")
        obj.setdefault("status", {})["observedGeneration"] = 1
        if obj["kind"] == "Deployment":
            if obj["metadata"]["labels"].get("docparser.io/track") == "stable":
                obj["spec"]["replicas"] = 2
            obj["status"]["readyReplicas"] = obj["spec"]["replicas"]
        live[(obj["kind"], obj["metadata"]["name"])] = obj
    return live


def _resource(**spec: Any) -> dict[str, Any]:
    dp = docparser("inv", traffic=GATEWAY, replicas={"min": 2, "max": 2}, **spec)
    dp["metadata"].update(namespace="ocr", uid="uid-1", generation=1)
    return dp


def _shrinks(actions) -> list[tuple[str, str]]:
    return [a.key for a in actions if a.key[0] == "Deployment" and a.phase in ("shrink", "prune")]


def test_a_scale_down_waits_until_the_controller_observed_the_route():
    """A 50 % canary is aborted: the route goes back to stable alone, and the canary's pods
    stay until the controller has judged that route generation."""
    live = _live(_resource(canary={"weights": CANARY_WEIGHTS, "weight": 50}))
    live[("HTTPRoute", "inv")]["status"] = {"parents": [parent("True", 1)]}
    after = _resource()
    first = decide_on(after, Observed(live, []), previous_weight=50).actions
    rewritten = next(a.obj for a in first if a.key == ("HTTPRoute", "inv"))  # stable alone
    assert rewritten is not None and _shrinks(first) == []

    route_now = copy.deepcopy(rewritten)
    route_now["metadata"].update(
        generation=2,
        uid="uid-route",
        managedFields=[{"manager": FIELD_MANAGER, "operation": "Apply"}],
    )
    route_now["status"] = {"parents": [parent("True", 1)]}  # not seen generation 2 yet
    live[("HTTPRoute", "inv")] = route_now
    held = decide_on(after, Observed(live, []), previous_weight=0).actions
    assert ("HTTPRoute", "inv") not in [a.key for a in held if a.verb == "apply"]
    assert _shrinks(held) == [], "scaled down before the controller observed generation 2"

    route_now["status"] = {"parents": [parent("True", 2)]}
    done = decide_on(after, Observed(live, []), previous_weight=0).actions
    assert _shrinks(done), [(a.key, a.phase) for a in done]  # now the canary goes


def test_router_service_is_never_held():
    before = _resource(canary={"weights": CANARY_WEIGHTS, "weight": 50})
    before["spec"]["traffic"] = {"router": "service"}
    after = copy.deepcopy(before)
    del after["spec"]["canary"]
    live = _live(before)
    assert _shrinks(decide_on(after, Observed(live, []), previous_weight=0).actions)

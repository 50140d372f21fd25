"""core/status/stalls.py and the conditions core/status/conditions.py derives from it: Stalled
and Reconciling are never True together, each stalled reason reads Failed/Degraded to Flux
and Argo CD at once, a crash loop never flickers between Failed and InProgress, and a serving pod's
restart or an autoscaler's unschedulable pod leaves the DocParser Current/Healthy.

Verdicts come from the tools' own code (tests/gitopscheck) when it is built; the condition
assertions run either way."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
from docparser_operator.core.plan.problem import Problem
from docparser_operator.core.status.conditions import TrackObservation
from docparser_operator.core.status.stalls import (
    REASONS,
    RESTARTS_TOLERATED,
    UNSCHEDULABLE_GRACE_S,
    classify,
)
from gitopscheck.checker import AGREEING, GitOpsCheck
from test_status import T0, T1, conditions, deployment, pod, status

ROOT = Path(__file__).resolve().parents[4]
STALLED = [r for r, c in REASONS.items() if c.kind == "stalled" and not c.grace_s]


def obj(st: dict[str, Any], generation: int = 2) -> dict[str, Any]:
    """The DocParser as both tools get it from the API server."""
    meta = {"name": "inv", "namespace": "ocr", "generation": generation}
    return {"apiVersion": "docparser.io/v1alpha1", "kind": "DocParser", "metadata": meta} | {
        "status": st
    }


def verdict(check: GitOpsCheck | None, st: dict[str, Any]) -> tuple[str, str] | None:
    if check is None:
        return None
    found = check.verdict(obj(st))
    assert AGREEING[found[0]] == found[1], found  # the tools agree on every state
    return found


def flags(st: dict[str, Any]) -> tuple[str, str]:
    c = conditions(st)
    return c["Reconciling"]["status"], c["Stalled"]["status"]


def serving_stable(*pods: dict[str, Any], previous: dict[str, Any] | None = None, **kw: Any):
    obs = TrackObservation("v1", deployment(want=len(pods), ready=1), list(pods), serving=True)
    return status(obs, previous=previous, **kw)


def test_every_reason_the_operator_writes_is_classed() -> None:
    """A Problem("X", ...) anywhere in the operator has a row in the table (an unclassed one
    would stall, which is safe, but its row in docs/crd.md would be missing)."""
    source = "\n".join(p.read_text() for p in (ROOT / "operator/docparser_operator").rglob("*.py"))
    written = set(re.findall(r'Problem\(\s*"([A-Za-z]+)"', source))
    written |= set(re.findall(r'reason="([A-Za-z]+)"', source))  # the analysis walk's verdicts
    written |= set(re.findall(r'Problem\("([A-Za-z]+)"', source))
    assert written - set(REASONS) == set(), "class them in core/status/stalls.py and docs/crd.md"
    assert {"NodeLost", "DrainBlocked", "ShadowRegression", "Idle"} <= set(REASONS)


def test_docs_list_the_same_table() -> None:
    rows = re.findall(
        r"^\| `(\w+)` \| (stalled|progressing|advisory)", (ROOT / "docs/crd.md").read_text(), re.M
    )
    assert dict(rows) == {r: c.kind for r, c in REASONS.items()}


@pytest.mark.parametrize("reason", STALLED)
def test_each_stalled_reason_is_failed_at_once(
    reason: str, gitops_check_optional: GitOpsCheck | None
) -> None:
    for rolling in (None, []):  # during a rollout and at rest
        st = status(
            TrackObservation("v1", deployment(want=1, ready=0), [pod("loading")]),
            problems=[Problem(reason, f"{reason} says why")],
            rolling=rolling,
        )
        assert flags(st) == ("False", "True")
        assert conditions(st)["Stalled"]["reason"] == reason
        found = verdict(gitops_check_optional, st)
        assert found in (None, ("Failed", "Degraded"))


def test_never_reconciling_and_stalled_together() -> None:
    reasons = [*REASONS, "SomethingNew"]
    for pair in itertools.combinations(reasons, 2):
        for rolling in ([], ["revision r2 (stable): 0/1 ready"]):
            problems = [Problem(r, r, since=T0) for r in pair]
            st = status(
                TrackObservation("v1", deployment(want=1, ready=1), [pod("ready")]),
                problems=problems,
                rolling=rolling,
                now=T1,
            )
            assert flags(st) != ("True", "True"), (pair, rolling)


def test_unschedulable_waits_for_an_autoscaler_then_stalls(
    gitops_check_optional: GitOpsCheck | None,
) -> None:
    assert classify("Unschedulable", since=T0, now=T0, rolling=True) == "progressing"
    assert UNSCHEDULABLE_GRACE_S == 300
    assert classify("Unschedulable", since=T0, now=T1, rolling=True) == "stalled"  # 5 min on
    assert classify("Unschedulable", since=T0, now=T1, rolling=False) == "advisory"
    problem = [Problem("Unschedulable", "0/3 nodes are available", since=T0)]
    waiting = TrackObservation("v1", deployment(want=1, ready=0), [pod("loading")])
    early = status(waiting, problems=problem, now=T0)
    assert flags(early) == ("True", "False")
    assert verdict(gitops_check_optional, early) in (None, ("InProgress", "Progressing"))
    late = status(waiting, problems=problem, now=T1)
    assert flags(late) == ("False", "True")
    assert verdict(gitops_check_optional, late) in (None, ("Failed", "Degraded"))
    # the autoscaler's extra pod of a serving revision: the DocParser serves at its size
    scaled = TrackObservation("v1", deployment(want=2, ready=1), [pod("ready"), pod("loading")])
    at_rest = status(scaled, problems=problem, rolling=[], now=T1)
    assert (
        flags(at_rest) == ("False", "False") and conditions(at_rest)["Degraded"]["status"] == "True"
    )
    assert verdict(gitops_check_optional, at_rest) in (None, ("Current", "Healthy"))


def crash_cycle(restarts: int) -> list[dict[str, Any]]:
    """What the kubelet shows of a runtime container that fails to load, through one restart:
    running (loading), terminated, waiting in CrashLoopBackOff, running again (unready)."""
    failed = {"exitCode": 1, "reason": "Error", "message": "serve: engine failed to load"}
    before = {"terminated": failed} if restarts else None
    states = [  # (state, lastState, restartCount)
        ({"running": {}}, before, restarts),
        ({"terminated": failed}, before, restarts),
        ({"waiting": {"reason": "CrashLoopBackOff"}}, {"terminated": failed}, restarts),
        ({"running": {}}, {"terminated": failed}, restarts + 1),
    ]
    out = []
    for state, last, count in states:
        p = pod("loading")
        ctr = {**p["status"]["containerStatuses"][0], "state": state, "ready": False}
        ctr["restartCount"] = count
        if last:
            ctr["lastState"] = last
        p["status"]["containerStatuses"] = [ctr]
        out.append(p)
    return out


def test_a_crash_loop_never_flickers(gitops_check_optional: GitOpsCheck | None) -> None:
    """FailedToLoad reruns: once the runtime has failed, every state of its restart cycle
    reads Stalled (Failed), never back to Reconciling (InProgress)."""
    from docparser_operator.api.models import DocParser
    from docparser_operator.core.status.diagnose import diagnose
    from dp_helpers import docparser

    spec = DocParser.from_resource(docparser("inv")).spec
    seen = []
    previous = None
    for restarts in range(3):
        for p in crash_cycle(restarts):
            p["metadata"]["labels"] = {"docparser.io/revision": "aaaaaa"}
            problems = diagnose(spec, {"aaaaaa"}, {}, [p])
            obs = TrackObservation("v1", deployment(want=1, ready=0), [p])
            st = status(obs, problems=problems, previous=previous, rolling=["0/1 ready"])
            previous = st
            seen.append((flags(st), verdict(gitops_check_optional, st)))
    first_failed = next(i for i, (f, _) in enumerate(seen) if f == ("False", "True"))
    assert first_failed <= 1, seen  # the first termination already stalls
    assert all(f == ("False", "True") for f, _ in seen[first_failed:]), seen
    assert all(v in (None, ("Failed", "Degraded")) for _, v in seen[first_failed:]), seen


def test_a_serving_pod_restart_stays_current_until_a_crash_loop(
    gitops_check_optional: GitOpsCheck | None,
) -> None:
    from docparser_operator.api.models import DocParser
    from docparser_operator.core.status.diagnose import diagnose
    from dp_helpers import docparser

    spec = DocParser.from_resource(docparser("inv")).spec
    rest = serving_stable(pod("ready"), pod("ready"), rolling=[])
    assert rest["stable"]["servedSince"] == T0
    for restarts in range(RESTARTS_TOLERATED + 2):
        for p in crash_cycle(restarts):
            p["metadata"]["labels"] = {"docparser.io/revision": "aaaaaa"}
            problems = diagnose(spec, {"aaaaaa"}, {}, [p], serving="aaaaaa")
            st = serving_stable(pod("ready"), p, previous=rest, rolling=[], problems=problems)
            count = p["status"]["containerStatuses"][0]["restartCount"]
            if count <= RESTARTS_TOLERATED:
                assert flags(st) == ("False", "False"), (count, st["conditions"])
                assert {x.reason for x in problems} <= {"Restarting"}
                assert verdict(gitops_check_optional, st) in (None, ("Current", "Healthy"))
            else:  # a crash loop: someone has to look
                assert flags(st) == ("False", "True"), count
                assert verdict(gitops_check_optional, st) in (None, ("Failed", "Degraded"))

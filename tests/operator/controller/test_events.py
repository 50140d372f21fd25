"""The Event rate limit: one Warning per DocParser and reason per interval; Normal events
(spec-driven transitions) always pass."""

from __future__ import annotations

from docparser_operator.controller.post_events import EventLimiter
from docparser_operator.core.status.transition_events import Event


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_retried_failure_posts_once_per_interval() -> None:
    clock = Clock()
    limiter = EventLimiter(300, clock=clock)
    failed = [Event("Warning", "ReconcileFailed", "403 forbidden: docparsers/finalizers")]
    assert limiter.admit("uid-a", failed) == failed
    for _ in range(20):  # the operator retries every 5 s for a minute and a half
        clock.now += 5
        assert limiter.admit("uid-a", failed) == []
    assert limiter.admit("uid-b", failed) == failed  # per object
    other = [Event("Warning", "Unschedulable", "0/1 nodes have nvidia.com/gpu")]
    assert limiter.admit("uid-a", other) == other  # per reason
    clock.now += 300
    assert limiter.admit("uid-a", failed) == failed  # the interval is over


def test_transitions_always_pass() -> None:
    clock = Clock()
    limiter = EventLimiter(300, clock=clock)
    steps = [
        Event("Normal", "CanaryWeightChanged", f"canary traffic {a}% -> {b}%")
        for a, b in ((0, 10), (10, 50), (50, 100))
    ]
    assert [limiter.admit("uid-a", [step]) for step in steps] == [[s] for s in steps]


def test_memory_stays_bounded() -> None:
    clock = Clock()
    limiter = EventLimiter(1, clock=clock)
    for i in range(10_050):
        clock.now += 0.001
        limiter.admit(f"uid-{i}", [Event("Warning", "ReconcileFailed", "x")])
    clock.now += 2
    limiter.admit("last", [Event("Warning", "ReconcileFailed", "x")])
    limiter.admit("again", [Event("Warning", "ReconcileFailed", "x")])
    assert len(limiter._last) < 10_050


def test_canary_analysis_milestones_are_events_once_each() -> None:
    """Golden gate passed, a step passed, the walk done: each an Event on its transition;
    the same status again posts nothing, and a failure is left to the Degraded Warning."""
    from docparser_operator.api.status_models import DocParserStatus
    from docparser_operator.core.status.outcome import Outcome
    from docparser_operator.core.status.transition_events import events_for

    typed = DocParserStatus.model_validate

    def status(phase: str, step: int, message: str = "m", revision: str = "c1") -> dict:
        walk = {"revision": revision, "phase": phase, "step": step, "message": message}
        return {"canary": {"weight": 0, "analysis": walk}}

    def reasons(old: dict, new: dict) -> list[str]:
        out = Outcome(name="inv", previous_status=typed(old), status=typed(new))
        return [e.reason for e in events_for(out)]

    assert reasons(status("Verifying", 1), status("Progressing", 1)) == ["GoldenPassed"]
    assert reasons(status("Progressing", 1), status("Progressing", 2)) == ["AnalysisStepPassed"]
    assert reasons(status("Progressing", 1), status("Verifying", 2)) == ["AnalysisStepPassed"]
    assert reasons(status("Progressing", 2), status("Paused", 2)) == ["AnalysisPaused"]
    assert reasons(status("Progressing", 2), status("Succeeded", 2)) == ["AnalysisSucceeded"]
    assert reasons(status("Progressing", 2, "a"), status("Progressing", 2, "b")) == []
    assert reasons(status("Progressing", 2), status("Failed", 2)) == []
    assert reasons(status("Succeeded", 2), status("Verifying", 1, revision="c2")) == []
    (event,) = events_for(
        Outcome(
            name="inv",
            previous_status=typed(status("Verifying", 1)),
            status=typed(status("Progressing", 1, "golden documents passed (2)")),
        )
    )
    assert event.message == "golden documents passed (2)"

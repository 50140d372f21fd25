"""The Event rate limit: one Warning per DocParser and reason per interval; Normal events
(spec-driven transitions) always pass."""

from __future__ import annotations

from docparser_operator.events import Event, EventLimiter


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

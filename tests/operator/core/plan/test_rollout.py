"""The rollout planner (core/plan/rollout_planner.py) driven through whole transitions on a
simulated cluster.

The simulation plays the Deployment controller and the kubelet: a revision's pods appear when
its replicas grow, become Ready ``delay`` ticks later, and go unready-first when it shrinks.
Every tick checks the invariants on the state the planner's step leaves behind, so a single
moment without Ready capacity behind traffic fails the test, not only a wrong end state:

1. make-before-break: Ready pods behind traffic never drop below the size (``N``; ``N - 1``
   with ``maxSurge: 0``) once the DocParser was serving;
2. traffic only to Ready capacity: every weighted backend (and the endpoint's one revision)
   has Ready pods; the reported canary weight is what the Ready pods get;
3. the GPU budget: pods never exceed ``N + maxSurge``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from docparser_operator.core.plan.rollout_planner import (
    Desired,
    RevisionState,
    Rollout,
    effective_weight,
    plan,
    split,
)


@dataclass
class Rev:
    role: str
    pods: list[int] = field(default_factory=list)  # ages in ticks
    created: int = 0

    def ready(self, delay: int) -> int:
        return sum(1 for age in self.pods if age >= delay)


@dataclass
class Sim:
    desired: Desired
    delay: int = 3
    revs: dict[str, Rev] = field(default_factory=dict)
    weight: int = 0  # status.canary.weight of the last pass
    tick: int = 0
    created_pods: int = 0
    history: list[Rollout] = field(default_factory=list)
    serving_once: bool = False
    behind: int = 0  # Ready pods behind traffic after the last tick

    def observed(self) -> list[RevisionState]:
        return [
            RevisionState(r, v.role, len(v.pods), v.ready(self.delay), created=f"{v.created:06d}")  # type: ignore[arg-type]
            for r, v in self.revs.items()
        ]

    def step(self) -> Rollout:
        out = plan(self.desired, self.observed(), previous_weight=self.weight)
        for r in out.revisions:
            rev = self.revs.setdefault(r.revision, Rev(r.role, created=self.tick))
            rev.role = r.role
            while len(rev.pods) < r.replicas:
                rev.pods.append(0)
                self.created_pods += 1
            rev.pods.sort()  # youngest (unready) first: they go first
            while len(rev.pods) > r.replicas:
                rev.pods.pop(0)
        for name in [n for n, v in self.revs.items() if out.get(n) is None]:
            del self.revs[name]  # pruned
        self.weight = out.canary_weight
        self.check(out)
        for rev in self.revs.values():
            rev.pods = [age + 1 for age in rev.pods]
        self.tick += 1
        self.history.append(out)
        return out

    def ready(self, revision: str | None) -> int:
        rev = self.revs.get(revision or "")
        return rev.ready(self.delay) if rev else 0

    def check(self, out: Rollout) -> None:
        d = self.desired
        where = f"tick {self.tick}: {out}"
        assert sum(len(v.pods) for v in self.revs.values()) <= d.size + d.max_surge, where
        for r in out.revisions:
            assert r.ready == self.ready(r.revision), where  # the plan's view is the truth
        behind = sum(self.ready(r.revision) for r in out.revisions if r.serving)
        if d.router == "gateway":
            for r in out.revisions:
                if r.weight > 0:
                    assert self.ready(r.revision) > 0, f"weighted backend without pods, {where}"
            assert sum(r.weight for r in out.revisions) in (0, 100), where
        elif out.endpoint_revision is not None and self.serving_once:
            assert self.ready(out.endpoint_revision) > 0, where
        if out.canary_weight > 0:
            assert self.ready(d.canary) > 0, f"canary weight without Ready canary, {where}"
        floor = d.size if d.max_surge > 0 else d.size - 1
        if self.serving_once:  # an autoscaler may raise N: capacity follows, never falls
            assert behind >= max(1, min(floor, self.behind)), f"capacity {behind}, {where}"
        self.serving_once = self.serving_once or behind >= d.size
        self.behind = behind

    def run(self, ticks: int = 60) -> Rollout:
        for _ in range(ticks):
            out = self.step()
            if out.settled and all(
                len(v.pods) == (out.get(n).target if out.get(n) else 0)
                for n, v in self.revs.items()
            ):
                return out
        raise AssertionError(f"not settled after {ticks} ticks: {self.history[-1]}")

    def change(self, **fields: object) -> Rollout:
        self.desired = replace(self.desired, **fields)  # type: ignore[arg-type]
        return self.run()


def started(router: str = "gateway", size: int = 4, surge: int = 1) -> Sim:
    sim = Sim(Desired("s1", None, 0, size, surge, router))  # type: ignore[arg-type]
    out = sim.run()
    assert out.get("s1").ready == size and sim.serving_once
    return sim


ROUTERS = ["gateway", "service"]


@pytest.mark.parametrize("router", ROUTERS)
@pytest.mark.parametrize("surge", [0, 1, 2])
def test_canary_walk_promote_and_revert_never_drop_capacity(router: str, surge: int) -> None:
    sim = started(router, surge=surge)
    dark = sim.change(canary="c1", weight=0)
    assert dark.canary_weight == 0 and dark.get("c1").ready == 1
    assert sim.change(weight=25).canary_weight == 25
    full = sim.change(weight=100)
    assert full.canary_weight == 100 and full.get("s1").replicas == 0
    assert "s1" in full.keep or router  # the previous stable stays listed while scaled to 0
    before = sim.created_pods
    promoted = sim.change(stable="c1", canary=None, weight=0)
    assert sim.created_pods == before, "promotion of a Ready canary restarted pods"
    assert promoted.get("c1").role == "stable" and promoted.get("c1").ready == 4
    assert promoted.keep == ("s1",)
    reverted = sim.change(stable="s1")  # git revert: the kept revision comes back
    assert reverted.get("s1").ready == 4 and reverted.get("c1") is not None


@pytest.mark.parametrize("router", ROUTERS)
def test_revert_from_100_keeps_the_canary_until_stable_is_ready(router: str) -> None:
    sim = started(router)
    sim.change(canary="c1", weight=100)
    start = len(sim.history)
    out = sim.change(weight=25)
    assert out.get("s1").ready == 3 and out.get("c1").ready == 1
    shares = [h.canary_weight for h in sim.history[start:]]
    assert shares == sorted(shares, reverse=True), "the canary share fell and rose again"


@pytest.mark.parametrize("router", ROUTERS)
def test_canary_removed_mid_load_serves_until_stable_is_back(router: str) -> None:
    sim = started(router)
    sim.change(canary="c1", weight=50)
    out = sim.change(canary=None, weight=0)
    assert out.get("c1") is None or out.get("c1").replicas == 0
    assert out.get("s1").ready == 4


@pytest.mark.parametrize("router", ROUTERS)
def test_new_stable_revision_rolls_pod_by_pod(router: str) -> None:
    sim = started(router, surge=1)
    out = sim.change(stable="s2")  # a runtime image change: a new pod template
    assert out.get("s2").ready == 4 and out.keep == ("s1",)
    assert max(h.pods for h in sim.history) == 5


@pytest.mark.parametrize("router", ROUTERS)
@pytest.mark.parametrize("surge", [0, 1])
def test_stable_bump_while_a_dark_canary_holds_the_surge(router: str, surge: int) -> None:
    """The dark canary's pod uses the surge budget; a new stable revision (an image bump)
    must still roll: the dark canary, which carries nothing, yields its pod until stable is
    done, then comes back. Before: the new stable never got a pod (a rollout stuck forever)."""
    sim = started(router, size=2, surge=surge)
    assert sim.change(canary="c1", weight=0).get("c1").ready == 1
    out = sim.change(stable="s2")
    stable_pods = 2 if surge else 1  # with maxSurge 0 the dark canary takes a stable pod's place
    assert out.get("s2").ready == stable_pods and out.get("c1").ready == 1
    assert out.canary_weight == 0
    assert out.get("s1") is None or out.get("s1").replicas == 0
    assert all(h.canary_weight == 0 for h in sim.history)


def test_router_change_keeps_capacity() -> None:
    sim = started("service")
    sim.change(canary="c1", weight=25)
    out = sim.change(router="gateway")
    assert out.canary_weight == 25


def test_autoscaler_resize_during_canary_keeps_the_split() -> None:
    sim = started("gateway")
    sim.change(canary="c1", weight=25)
    out = sim.change(size=8)
    assert (out.get("s1").ready, out.get("c1").ready) == (6, 2)
    assert out.canary_weight == 25


def test_dark_canary_never_takes_traffic_even_while_stable_loads() -> None:
    sim = Sim(Desired("s1", "c1", 0, 2, 1, "gateway"))  # type: ignore[arg-type]
    sim.delay = 1
    sim.revs["c1"] = Rev("canary", [5])  # the canary is Ready before stable
    out = sim.run()
    assert all(h.canary_weight == 0 for h in sim.history) and out.get("s1").ready == 2


def test_service_router_reports_the_pod_ratio() -> None:
    sim = started("service", size=2)
    out = sim.change(canary="c1", weight=10)
    assert (out.get("s1").ready, out.get("c1").ready) == (1, 1)
    assert out.canary_weight == 50 and out.target_weight == 50 and out.requested_weight == 10


@pytest.mark.parametrize(
    ("size", "weight", "expected"),
    [
        (4, 0, (4, 1)),
        (4, 10, (3, 1)),
        (4, 25, (3, 1)),
        (4, 50, (2, 2)),
        (4, 100, (0, 4)),
        (1, 50, (1, 1)),
        (3, 99, (1, 3)),
    ],
)
def test_split(size: int, weight: int, expected: tuple[int, int]) -> None:
    assert split(size, weight, has_canary=True) == expected


def test_effective_weight_rules() -> None:
    common = {"stable_target": 3, "canary_target": 1, "size": 4}
    assert effective_weight(25, previous=0, stable_ready=4, canary_ready=0, **common) == 0
    assert effective_weight(25, previous=0, stable_ready=4, canary_ready=1, **common) == 25
    # stable short after a revert: the canary keeps what stable cannot carry
    assert effective_weight(25, previous=100, stable_ready=1, canary_ready=4, **common) == 75
    # a dark canary gets nothing while stable cannot serve either
    assert effective_weight(0, previous=0, stable_ready=0, canary_ready=1, **common) == 0

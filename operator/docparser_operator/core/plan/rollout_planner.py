"""The rollout planner: desired revisions + observed pods -> replicas and traffic (pure, no I/O).

Design (after Argo Rollouts' ReplicaSet per revision): every distinct pod template is a
*revision*, named by a hash of its content, with its own Deployment ``<name>-<revision>``.
"stable" and "canary" are roles a revision plays, decided by the spec and reported in status,
not object names. So promoting a Ready canary (copy its weights into ``spec.weights``) makes
the revision that already runs the stable one: no pod restarts. The previous stable revision
stays as a Deployment scaled to 0, so a ``git revert`` finds it.

Every pass moves each revision one safe step towards its target size and recomputes traffic:

1. Targets. The DocParser's size ``N`` (``replicas.desired`` written by the one autoscaler
   through the scale subresource, clamped to ``[min, max]``; ``min`` when unset) is split by
   the requested canary weight: the canary gets ``round(N * w / 100)`` pods (at least 1), the
   stable revision the rest (at least 1 below weight 100); a dark canary (weight 0) is one pod
   on top of ``N`` (in place of a stable pod with ``maxSurge: 0``). Every other revision's
   target is 0.
2. Make-before-break. Pods may be added while all revisions together stay within
   ``N + rollout.maxSurge`` (the explicit GPU cost of a rollout); stable grows first, and a
   dark canary (it carries nothing) yields its pods to a stable rollout that needs the room,
   coming back once stable is done. A revision that carries
   traffic loses only unready pods and Ready pods in surplus of ``N`` Ready pods behind
   traffic. With ``maxSurge: 0`` one Ready pod may go when nothing else is starting (and
   at least one Ready pod stays), so capacity moves pod by pod within ``N`` GPUs.
3. Traffic only to Ready capacity. The canary's effective weight is the requested one clipped
   to what Ready pods can carry: at most the canary's Ready share of ``N`` until it is full,
   at least what the stable side cannot carry until it is full. With ``router: service`` the
   split is the ratio of Ready pods behind the one endpoint Service, reported as such.
4. Drains. Pods on a cordoned node (``Desired.leaving``, core/plan/drain.py) are replaced first: the
   revision may grow by them on top of its target, within the same ``N + maxSurge`` budget
   (a rollout's stable revision first), and keeps them until they are gone.

The functions here take and return frozen dataclasses; ``reconcile`` renders and applies.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Role = Literal["stable", "canary"]


@dataclass(frozen=True)
class RevisionState:
    """One revision as observed: its Deployment's size and Ready pods."""

    revision: str
    role: Role  # the role it was last given (the Deployment's track label)
    replicas: int  # spec.replicas of its Deployment (0 when absent)
    ready: int
    exists: bool = True
    created: str = ""  # creationTimestamp
    retired: int | None = None  # DocParser generation at which it stopped being wanted


@dataclass(frozen=True)
class Desired:
    """What the spec asks for, reduced to what sizing and traffic depend on."""

    stable: str | None  # revision of spec.weights (+ runtime); None without weights and engine
    canary: str | None
    weight: int  # requested canary percent
    size: int  # N: total pods at rest
    max_surge: int
    router: Literal["service", "gateway"]
    leaving: Mapping[str, int] = field(default_factory=dict)  # revision -> pods on cordoned nodes


@dataclass(frozen=True)
class RevisionPlan:
    revision: str
    role: Role
    desired: bool  # one of the spec's revisions (rendered from spec), else only scaled
    target: int  # size at rest
    replicas: int  # size after this pass
    ready: int  # Ready pods expected after this pass (scale-downs remove unready pods first)
    weight: int  # route weight (percent of all traffic) after this pass
    serving: bool  # receives traffic after this pass
    drain: int = 0  # pods above target granted to replace pods on cordoned nodes

    @property
    def starting(self) -> int:
        return max(0, self.replicas - self.ready)


@dataclass(frozen=True)
class Rollout:
    """The outcome of one planning pass (everything ``reconcile`` renders and reports)."""

    revisions: tuple[RevisionPlan, ...]
    canary_weight: int  # effective percent routed to the canary role now
    target_weight: int  # what the canary will get once every target is Ready
    requested_weight: int
    endpoint_revision: str | None  # the endpoint Service's one revision; None: all revisions
    size: int
    max_surge: int
    keep: tuple[str, ...]  # previous revisions kept (scaled to 0) for a fast rollback

    def get(self, revision: str | None) -> RevisionPlan | None:
        return next((r for r in self.revisions if r.revision == revision), None)

    def role(self, role: Role) -> list[RevisionPlan]:
        return [r for r in self.revisions if r.role == role]

    @property
    def pods(self) -> int:
        return sum(r.replicas for r in self.revisions)

    @property
    def extra_pods(self) -> int:
        """Pods beyond the DocParser's size that this rollout uses right now."""
        return max(0, self.pods - self.size)

    @property
    def ready_serving(self) -> int:
        return sum(r.ready for r in self.revisions if r.serving)

    @property
    def settled(self) -> bool:
        """Every revision at its target and Ready, traffic at its target split."""
        return self.canary_weight == self.target_weight and all(
            r.replicas == r.target and r.ready == r.target for r in self.revisions
        )


def clamp_size(desired: int | None, lo: int, hi: int) -> int:
    return max(lo, min(hi, desired if desired is not None else lo))


def split(size: int, weight: int, *, has_canary: bool) -> tuple[int, int]:
    """(stable, canary) pods at rest for ``size`` pods and a canary ``weight`` percent."""
    if not has_canary or size <= 0:  # at zero (core/plan/idle.py) neither role has pods
        return max(0, size), 0
    if weight >= 100:
        return 0, size
    if weight <= 0:
        return size, 1  # a dark canary: one pod on top, within rollout.maxSurge
    canary = max(1, math.floor(size * weight / 100 + 0.5))
    stable = max(1, size - canary)
    return stable, canary


def _shares(total: int, ready: dict[str, int]) -> dict[str, int]:
    """``total`` percent over revisions in proportion to their Ready pods (largest remainder)."""
    pool = sum(ready.values())
    if pool == 0 or total == 0:
        return dict.fromkeys(ready, 0)
    exact = {r: total * n / pool for r, n in ready.items()}
    out = {r: math.floor(v) for r, v in exact.items()}
    for r in sorted(exact, key=lambda r: (out[r] - exact[r], r))[: total - sum(out.values())]:
        out[r] += 1
    return out


def effective_weight(
    requested: int,
    *,
    previous: int,
    stable_ready: int,
    stable_target: int,
    canary_ready: int,
    canary_target: int,
    size: int,
) -> int:
    """The canary's share that Ready pods can carry (module doc, rule 3).

    It rises towards ``requested`` no faster than the canary's Ready pods allow, and falls
    towards it no faster than the stable side's Ready pods allow; a canary at 0% that never
    had traffic gets none even while stable is short (a dark canary stays dark)."""
    if canary_ready == 0:
        return 0
    if stable_ready == 0:  # the canary is the only Ready capacity (unless it is dark)
        return 100 if max(previous, requested) > 0 else 0
    most = 100 if canary_ready >= canary_target else 100 * canary_ready // max(size, 1)
    least = 0 if stable_ready >= stable_target else 100 - 100 * stable_ready // max(size, 1)
    least = min(least, max(previous, requested))  # never pushes more than was routed
    if least > most:  # neither side can carry its share yet: split by Ready pods
        return round(100 * canary_ready / (canary_ready + stable_ready))
    return max(least, min(requested, most))


def plan(desired: Desired, observed: list[RevisionState], *, previous_weight: int = 0) -> Rollout:
    """One safe step from ``observed`` towards ``desired`` (module doc: rules 1-3).

    ``previous_weight`` is the canary share routed so far (status.canary.weight)."""
    states = {s.revision: s for s in observed}
    has_canary = desired.canary is not None
    t_stable, t_canary = split(desired.size, desired.weight, has_canary=has_canary)
    if desired.weight == 0 and has_canary and desired.max_surge == 0 and desired.size > 1:
        t_stable = desired.size - 1  # a dark canary within N GPUs takes one stable pod's place
    targets: dict[str, int] = {}
    roles: dict[str, Role] = {}
    for s in observed:
        targets[s.revision], roles[s.revision] = 0, s.role
    if desired.stable is not None:
        targets[desired.stable], roles[desired.stable] = t_stable, "stable"
    if desired.canary is not None:
        targets[desired.canary], roles[desired.canary] = t_canary, "canary"
    wanted = {r for r in (desired.stable, desired.canary) if r is not None}
    hold = {r: desired.leaving.get(r, 0) if r in wanted and targets[r] > 0 else 0 for r in targets}
    cur = {r: (states[r].replicas if r in states else 0) for r in targets}
    ready = {r: min(states[r].ready, cur[r]) if r in states else 0 for r in targets}
    canary, stable = desired.canary, desired.stable

    def weight_for(now: dict[str, int]) -> int:
        if canary is None:
            return 0
        stable_ready = sum(n for r, n in now.items() if roles[r] == "stable")
        return effective_weight(
            desired.weight,
            previous=previous_weight,
            stable_ready=stable_ready,
            stable_target=t_stable,
            canary_ready=now.get(canary, 0),
            canary_target=t_canary,
            size=desired.size,
        )

    def stable_short(now: dict[str, int]) -> bool:
        return sum(n for r, n in now.items() if r == stable) < t_stable

    # Who carries traffic before this pass; such a revision shrinks only by its surplus.
    weight_now = weight_for(ready)

    def carrying(r: str, now: dict[str, int], weight: int) -> bool:
        if now[r] == 0:
            return False
        if r == canary:
            return weight > 0
        if roles[r] == "canary":  # a replaced or removed canary: only while stable is short
            return stable_short(now)
        return True

    serving_ready = sum(n for r, n in ready.items() if carrying(r, ready, weight_now))
    in_flight = sum(max(0, cur[r] - ready[r]) for r in wanted if cur[r] <= targets[r] + hold[r])
    surplus = serving_ready - desired.size - sum(hold.values())  # leaving pods are no surplus
    if desired.max_surge == 0 and in_flight == 0 and serving_ready >= 2:
        surplus = max(surplus, 1)  # pod by pod within N GPUs, never below one Ready pod
    new = dict(cur)
    for r in sorted(targets, key=lambda r: (r in wanted, r)):  # old revisions shrink first
        excess = cur[r] - targets[r] - hold[r]
        if excess <= 0:
            continue
        if not carrying(r, ready, weight_now):
            new[r] = targets[r] + hold[r]
            continue
        unready = cur[r] - ready[r]
        drop = min(excess, unready + max(0, surplus))
        surplus -= max(0, drop - unready)
        new[r] = cur[r] - drop
    budget = desired.size + desired.max_surge - sum(new.values())
    if (
        stable is not None
        and canary is not None
        and new[stable] < targets[stable]
        and budget <= 0
        and not carrying(canary, ready, weight_now)
    ):  # a dark canary yields the surge to a stable rollout it would otherwise block forever
        give = min(new[canary], targets[stable] - new[stable] - budget)
        new[canary] -= give
        budget += give
    for grower in (stable, canary):
        if grower is None or new[grower] >= targets[grower] + hold[grower]:
            continue
        grow = max(0, min(targets[grower] + hold[grower] - new[grower], budget))
        new[grower] += grow
        budget -= grow
    after = {r: min(ready[r], new[r]) for r in targets}

    weight = weight_for(after)
    serving = {r for r in targets if carrying(r, after, weight)}
    has_pods = {r for r in targets if new[r] > 0 or after[r] > 0}
    stable_side = {r: after[r] for r in serving if r != canary}
    endpoint: str | None = None
    # At zero nothing carries traffic, so no split is pending (a waking canary routes again).
    target_weight = desired.weight if has_canary and desired.size > 0 else 0
    if desired.router == "service":
        # One Service selects pods by label equality: either every revision (the Ready pods'
        # ratio is the split) or exactly one (the stable side's largest).
        if has_canary and desired.weight > 0 and t_stable + t_canary > 0:
            target_weight = round(100 * t_canary / (t_stable + t_canary))
        if has_pods <= serving | {r for r in has_pods if roles[r] == "stable"}:
            pods = sum(after[r] for r in serving)
            weight = round(100 * after.get(canary, 0) / pods) if canary and pods else 0
            serving = {r for r in has_pods if after[r] > 0}
        else:
            endpoint = _primary(stable_side, stable)
            weight = 0
            serving = {endpoint} if endpoint and after.get(endpoint, 0) > 0 else set()
    elif any(roles[r] == "canary" for r in has_pods):
        endpoint = _primary(stable_side, stable)
    route = _shares(100 - weight, stable_side) if desired.router == "gateway" else {}
    if canary is not None and desired.router == "gateway":
        route[canary] = weight

    plans = tuple(
        RevisionPlan(
            revision=r,
            role=roles[r],
            desired=r in wanted,
            target=targets[r],
            replicas=new[r],
            ready=after[r],
            weight=route.get(r, 0),
            serving=r in serving or route.get(r, 0) > 0,
            drain=max(0, min(hold[r], new[r] - targets[r])),
        )
        for r in sorted(targets, key=lambda r: (r not in wanted, roles[r] != "stable", r))
    )
    return Rollout(
        revisions=plans,
        canary_weight=weight,
        target_weight=target_weight,
        requested_weight=desired.weight if has_canary else 0,
        endpoint_revision=endpoint,
        size=desired.size,
        max_surge=desired.max_surge,
        keep=_kept(observed, wanted),
    )


def _primary(stable_side: dict[str, int], preferred: str | None) -> str | None:
    """The serving stable-side revision with the most Ready pods (the spec's stable on a tie)."""
    if not stable_side:
        return preferred
    return max(stable_side, key=lambda r: (stable_side[r], r == preferred, r))


def _kept(observed: list[RevisionState], wanted: set[str]) -> tuple[str, ...]:
    """The previous stable revision that served last stays (at 0 pods) so that a rollback
    finds it: one still leaving, else the one retired at the latest generation."""
    previous = [s for s in observed if s.revision not in wanted and s.role == "stable"]
    if not previous:
        return ()
    last = max(
        previous,
        key=lambda s: (s.retired is None, s.retired or 0, s.replicas, s.created, s.revision),
    )
    return (last.revision,)

"""Per-track plan: which tracks exist, their replicas, autoscaling ranges and traffic weight.

Every renderer reads this one plan so Deployments, HPAs, Services and the HTTPRoute agree.

Replica split (both routers): a present canary gets ``round(n * weight / 100)`` of the pods,
at least 1 (weight 0 deploys it "dark": reachable only through ``<name>-canary`` so it can be
tested and become Ready before any traffic shifts); stable gets the rest and never drops below
1 unless the canary is Ready and takes 100%. With ``router: service`` this split *is* the
traffic split; with ``router: gateway`` it sizes capacity and the HTTPRoute splits traffic.
An autoscaled DocParser (replicas.min < replicas.max) splits min and max the same way and gets
one HPA per track whose own range is open; a track with a closed range has fixed replicas.

The effective canary weight is 0 when there is no canary or its pods are not Ready
(``canary_ready=False``): never route to a canary that cannot answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from docparser_operator.models import DocParser, Weights
from docparser_operator.naming import Track


@dataclass(frozen=True)
class TrackPlan:
    track: Track
    weights: Weights | None
    replicas: int  # fixed size; also the HPA floor when autoscaled
    max_replicas: int

    @property
    def autoscaled(self) -> bool:
        return self.max_replicas > self.replicas

    @property
    def version(self) -> str | None:
        return self.weights.version if self.weights else None


@dataclass(frozen=True)
class Plan:
    resource: DocParser
    tracks: tuple[TrackPlan, ...]
    canary_weight: int  # effective percent routed to the canary right now

    @property
    def name(self) -> str:
        return self.resource.metadata.name

    @property
    def namespace(self) -> str:
        return self.resource.metadata.namespace

    def track(self, track: Track) -> TrackPlan | None:
        return next((t for t in self.tracks if t.track == track), None)

    @property
    def endpoint_selects_canary(self) -> bool:
        """The endpoint Service spans both tracks only for router service with live weight."""
        return self.resource.spec.traffic.router == "service" and self.canary_weight > 0


def split_replicas(total: int, weight: int, *, canary_ready: bool) -> tuple[int, int]:
    """(stable, canary) pods for ``total`` pods and a canary ``weight`` percent."""
    canary = min(total, max(1, math.floor(total * weight / 100 + 0.5)))
    stable = total - canary
    if stable < 1 and not (weight == 100 and canary_ready):
        stable = 1
    return stable, canary


def build_plan(resource: DocParser, *, canary_ready: bool = True) -> Plan:
    spec = resource.spec
    lo, hi = spec.replicas.min, spec.replicas.max
    if spec.canary is None:
        stable = TrackPlan("stable", spec.weights, lo, hi)
        return Plan(resource, (stable,), 0)
    weight = spec.canary.weight
    s_lo, c_lo = split_replicas(lo, weight, canary_ready=canary_ready)
    s_hi, c_hi = split_replicas(hi, weight, canary_ready=canary_ready)
    tracks = (
        TrackPlan("stable", spec.weights, s_lo, max(s_hi, s_lo)),
        TrackPlan("canary", spec.canary.weights, c_lo, max(c_hi, c_lo)),
    )
    return Plan(resource, tracks, weight if canary_ready else 0)

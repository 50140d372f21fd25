"""What the renderers read (``Target``): the spec's revisions and the step planned for them.

A ``RoleRevision`` is one revision the spec asks for (the stable role from ``spec.weights``, the
canary role from ``spec.canary``), with the pod template it renders to and that template's
hash, the revision. Previous revisions (no longer in the spec) appear only in the rollout:
the reconciler scales them through their live object, never re-rendering them.

``target_at_rest`` is the plan of ``docparser-operator render``: every revision at its target
size, Ready (the canary optionally not), as a cluster would look once the rollout settled.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from docparser_operator.api.models import DocParser, DocParserSpec, Weights
from docparser_operator.api.naming import REVISION_CHARS, Track
from docparser_operator.core.plan import drain
from docparser_operator.core.plan import rollout_planner as rollout

# Where a revision's pods find their weights, decided once per pass (``weights_source``) and
# read by every renderer (the pod's volumes and init container, the cache's claims and Jobs):
# none (an engine without weights), the user's own pvc:// claim, the operator's shared cache
# claim (render/weights_cache.py), or a download into each pod's own emptyDir.
WeightsSource = Literal["none", "pvc", "cache", "pod"]


@dataclass(frozen=True)
class RoleRevision:
    """The revision the spec asks for in one role (stable or canary), with its weights, where
    they come from, and, once rendered (``render.roles_of``), its pod template and that
    template's hash: rendered and hashed once per pass, then handed to every reader."""

    role: Track  # the value of the docparser.io/track label on its children
    weights: Weights | None
    revision: str = ""  # filled once the template is rendered (render.roles_of)
    source: WeightsSource = "none"
    # The pod template without its revision label (the hash input); None until rendered.
    # Shared, never mutated: readers copy what they change (render/deployment.py).
    template: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def version(self) -> str | None:
        return self.weights.version if self.weights else None

    @property
    def cached(self) -> bool:
        """The weights live in a cache claim (render/weights_cache.py)."""
        return self.source == "cache"


@dataclass(frozen=True)
class Target:
    """What one pass aims at: the DocParser, its roles' revisions and the rollout step planned
    for them (``rollout.plan``'s answer): what the renderers read."""

    resource: DocParser
    roles: tuple[RoleRevision, ...]
    rollout: rollout.Rollout
    drain: drain.DrainPlan = drain.AT_REST  # the PDB holds evictions unless it relaxes

    @property
    def at_rest_size(self) -> int:
        """Pods of the spec's revisions at rest: what the PDB keeps Ready (render/pdb.py)."""
        return sum(r.target for r in self.rollout.revisions if r.desired)

    mirror: bool = True  # False once the canary analysis failed: the shadow stops copying
    awake: bool = True  # False while at (or waking from) zero: no autoscaler (core/plan/idle.py)
    # The live canary Service's ClusterIP (render/shadow.py aims the copies at it; "" before
    # the Service exists, or offline: its DNS name then).
    canary_address: str = ""
    # The live serving Service's ClusterIP (render/front.py sends held parses to it; "" before
    # the Service exists: its DNS name then, so the front needs no cluster DNS once it is known).
    serving_address: str = ""
    # The batch pool's size (spec.batch: core/plan/batch_pool.py); None: batch.replicas.min.
    batch_replicas: int | None = None
    # The live view holds ``<name>-shadow``: it is rendered even with no shadow in the spec, so
    # turning a shadow off tells the running pods ``enabled: false`` (render/shadow.py).
    shadow_config_live: bool = False

    @property
    def name(self) -> str:
        return self.resource.metadata.name

    @property
    def scales_to_zero(self) -> bool:
        """``replicas.min: 0``: the front runs, and takes the traffic while no pod is Ready."""
        return self.resource.spec.replicas.idle_policy is not None

    @property
    def to_front(self) -> bool:
        """Whether the endpoint Service and the HTTPRoute send to the front now: a DocParser
        that scales to zero with no Ready runtime pod behind traffic after this pass (at 0,
        waking, or every pod lost). The switch back waits for a Ready pod (make-before-break)."""
        return self.scales_to_zero and self.rollout.ready_serving == 0

    @property
    def namespace(self) -> str:
        return self.resource.metadata.namespace

    @property
    def canary_weight(self) -> int:
        return self.rollout.canary_weight

    def role(self, role: Track) -> RoleRevision | None:
        return next((t for t in self.roles if t.role == role), None)

    def replicas(self, tp: RoleRevision) -> int:
        step = self.rollout.get(tp.revision)
        return step.replicas if step is not None else 0


def weights_source(spec: DocParserSpec, weights: Weights | None) -> WeightsSource:
    """Where these weights come from (``WeightsSource``): the one place that decides it."""
    if weights is None:
        return "none"
    if weights.pvc is not None:
        return "pvc"
    return "cache" if spec.weights_cache.mode == "PersistentVolume" else "pod"


def spec_tracks(resource: DocParser) -> tuple[RoleRevision, ...]:
    """The spec's roles with their weights and where those come from (not rendered yet)."""
    spec = resource.spec

    def role(track: Track, weights: Weights | None) -> RoleRevision:
        return RoleRevision(track, weights, source=weights_source(spec, weights))

    stable = role("stable", spec.weights)
    if spec.canary is None:
        return (stable,)
    return (stable, role("canary", spec.canary_weights))


def revision_of(template: dict[str, Any]) -> str:
    """Content hash of a pod template: equal templates are one revision."""
    body = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()[:REVISION_CHARS]


def desired(
    resource: DocParser,
    tracks: tuple[RoleRevision, ...],
    *,
    weight: int | None = None,
    leaving: dict[str, int] | None = None,
    size: int | None = None,
) -> rollout.Desired:
    """``weight``: the canary analysis' effective weight, instead of spec.canary.weight;
    ``leaving``: pods on cordoned nodes per revision, to replace first (core/plan/drain.py);
    ``size``: the idle decision's (core/plan/idle.py), instead of the spec's."""
    spec = resource.spec
    by_role = {t.role: t.revision for t in tracks}
    if weight is None:
        weight = spec.canary.weight if spec.canary else 0
    return rollout.Desired(
        stable=by_role.get("stable"),
        canary=by_role.get("canary"),
        weight=weight if spec.canary else 0,
        size=spec.replicas.size if size is None else size,
        max_surge=spec.rollout.max_surge,
        router=spec.traffic.router,
        leaving=dict(leaving or {}),
    )


def target_at_rest(
    resource: DocParser,
    tracks: tuple[RoleRevision, ...],
    *,
    canary_ready: bool = True,
    idle: bool = False,
) -> Target:
    """The settled plan: every spec revision at its target size (canary Ready or not), or at
    zero (``idle``, for ``replicas.min: 0``: the front takes the traffic)."""
    want = desired(resource, tracks, size=0 if idle else None)
    t_stable, t_canary = rollout.split(want.size, want.weight, has_canary=want.canary is not None)
    observed = (
        [rollout.RevisionState(want.stable, "stable", t_stable, t_stable)] if want.stable else []
    )
    if want.canary is not None:
        ready = t_canary if canary_ready else 0
        observed.append(rollout.RevisionState(want.canary, "canary", t_canary, ready))
    previous = want.weight if canary_ready else 0
    step = rollout.plan(want, observed, previous_weight=previous)
    return Target(resource, tracks, step, awake=not idle)

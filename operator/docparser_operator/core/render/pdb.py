"""PodDisruptionBudget over all runtime pods of one DocParser: drains wait for replacements.

While the operator reads nodes (the chart grants it), ``minAvailable`` is the DocParser's size
at rest (the spec's revisions' targets, canary included): an eviction is allowed only while
more pods are Ready than that, so ``kubectl drain`` of the node holding a ``replicas: 1``
DocParser's only pod waits until the replacement the operator started elsewhere is Ready
(core/plan/drain.py), then proceeds. It must hold from the start: ``kubectl drain`` evicts
milliseconds after it cordons, before any controller can react to the cordon.

When a drain's deadline (``rollout.drainTimeoutSeconds``) has passed, ``minAvailable`` drops to
the Ready pods on nodes not cordoned (``DrainPlan.staying``), so the drained node's pods may all
go and no other: a drain never waits for ever. Not ``maxUnavailable: 1``: the disruption
controller counts against it every pod the Deployment expects, and the replacement that could
not be scheduled is one of them (4 expected, 3 Ready, ``maxUnavailable: 1`` -> 3 must stay: no
eviction, the drain blocked for ever; found on the 3-node cluster). An operator that cannot
read nodes renders ``maxUnavailable: 1`` (it could not tell a drain it must end from any other
eviction, and it starts no replacement to miscount).

``unhealthyPodEvictionPolicy: AlwaysAllow``: a pod that is not Ready (loading, crash-looping)
carries no traffic and may always be evicted, so a broken canary never pins a node; the PDB
protects only Ready capacity.
"""

from __future__ import annotations

from typing import Any

from docparser_operator.api import naming
from docparser_operator.api.labels import TRACK_SHARED, pod_selector
from docparser_operator.core.plan.target import Target
from docparser_operator.core.render.meta import object_meta


def render_pdb(plan: Target) -> dict[str, Any]:
    budget: dict[str, int]
    if plan.drain.guard:
        budget = {"minAvailable": plan.at_rest_size}
    elif plan.drain.expired:
        budget = {"minAvailable": plan.drain.staying}
    else:
        budget = {"maxUnavailable": 1}
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": object_meta(plan, naming.pdb(plan.name), TRACK_SHARED),
        "spec": {
            **budget,
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
            "selector": {"matchLabels": pod_selector(plan.name)},
        },
    }

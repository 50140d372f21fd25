"""PodDisruptionBudget over all runtime pods of one DocParser: drains wait for replacements.

While the operator reads nodes (the chart grants it), ``minAvailable`` is the DocParser's size
at rest (the spec's revisions' targets, canary included): an eviction is allowed only while
more pods are Ready than that, so ``kubectl drain`` of the node holding a ``replicas: 1``
DocParser's only pod waits until the replacement the operator started elsewhere is Ready
(core/drain.py), then proceeds. It must hold from the start: ``kubectl drain`` evicts
milliseconds after it cordons, before any controller can react to the cordon.

It relaxes to ``maxUnavailable: 1`` (one pod at a time, no waiting for a replacement) when a
drain's deadline (``rollout.drainTimeoutSeconds``) has passed, so a drain never waits for
ever, and when the operator cannot read nodes (it could not tell a drain it must end from any
other eviction).

``unhealthyPodEvictionPolicy: AlwaysAllow``: a pod that is not Ready (loading, crash-looping)
carries no traffic and may always be evicted, so a broken canary never pins a node; the PDB
protects only Ready capacity.
"""

from __future__ import annotations

from typing import Any

from docparser_operator.api import naming
from docparser_operator.api.labels import TRACK_SHARED, pod_selector
from docparser_operator.core.render.meta import object_meta
from docparser_operator.core.render.target import Target


def render_pdb(plan: Target) -> dict[str, Any]:
    budget: dict[str, int] = (
        {"minAvailable": plan.at_rest_size} if plan.drain.guard else {"maxUnavailable": 1}
    )
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

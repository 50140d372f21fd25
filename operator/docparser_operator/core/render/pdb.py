"""PodDisruptionBudget over all runtime pods of one DocParser.

``maxUnavailable: 1`` rather than ``minAvailable``: voluntary disruptions (node drains,
cluster upgrades) take at most one pod at a time, and a single-replica GPU service can still
be drained. ``minAvailable: 1`` on one replica would block every drain forever, which is worse
than the brief outage a single replica accepts anyway. ``unhealthyPodEvictionPolicy:
AlwaysAllow`` lets a drain evict pods that are not Ready (loading weights, crash-looping) so a
broken canary never pins a node.
"""

from __future__ import annotations

from typing import Any

from docparser_operator.api import naming
from docparser_operator.api.labels import TRACK_SHARED, pod_selector
from docparser_operator.core.render.meta import object_meta
from docparser_operator.core.render.target import Target


def render_pdb(plan: Target) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": object_meta(plan, naming.pdb(plan.name), TRACK_SHARED),
        "spec": {
            "maxUnavailable": 1,
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
            "selector": {"matchLabels": pod_selector(plan.name)},
        },
    }

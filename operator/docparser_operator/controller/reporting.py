"""Write a pass's status: the one place the status write happens.

Kept apart from reconcile.py (which decides and acts); the status *content* is built by
core/report.py (pure, never the API client). Written only when it differs from the live
status: the no-op resync writes nothing.
"""

from __future__ import annotations

from typing import Any

from docparser_operator.api.kinds import DOCPARSER
from docparser_operator.core.children import Key
from docparser_operator.core.outcome import Outcome
from docparser_operator.core.render import Target
from docparser_operator.core.report import pass_status
from docparser_operator.core.status import status_changed
from docparser_operator.core.weights_cache_status import CacheVerdict
from docparser_operator.kube.client import KubeClient


def write_status(
    client: KubeClient,
    resource: dict[str, Any],
    plan: Target | None,
    live: dict[Key, dict[str, Any]],
    pods: list[dict[str, Any]],
    out: Outcome,
    now: str,
    cache: CacheVerdict | None = None,
) -> dict[str, Any]:
    """Build the pass's status and patch it when it changed (a merge patch; ``None`` removes a
    track view that is gone)."""
    status = pass_status(resource, plan, live, pods, out, now, cache)
    previous = out.previous_status
    if status_changed(previous, status):
        patch = dict(status)
        for gone in ("stable", "canary", "rollout", "drains"):
            if gone in previous and gone not in status:
                patch[gone] = None  # merge-patch null removes the field
            elif isinstance(previous.get(gone), dict) and gone in status:
                # a field the view lost (stable.servedSince once another revision serves)
                owned = ("version", "revision", "servedSince")
                left = {k: None for k in owned if k in previous[gone] and k not in status[gone]}
                patch[gone] = {**status[gone], **left}
        meta = resource["metadata"]
        out.body = client.patch_status(DOCPARSER, meta["namespace"], meta["name"], patch)
        out.status_written = True
    return status

"""Write a pass's status: the one place the status write happens.

Kept apart from reconcile.py (which decides and acts); the status *content* is built by
core/status/report.py (pure, never the API client), its patch by core/status/status_patch.py.
Written only when the patch changes the live status: the no-op resync writes nothing.
"""

from __future__ import annotations

from typing import Any

from docparser_operator.api.kinds import DOCPARSER
from docparser_operator.api.models import ObjectMeta
from docparser_operator.api.status_models import DocParserStatus
from docparser_operator.core.plan.children import Key
from docparser_operator.core.render import Target
from docparser_operator.core.status.outcome import Outcome
from docparser_operator.core.status.report import pass_status
from docparser_operator.core.status.status_patch import status_write
from docparser_operator.core.status.weights_cache_status import CacheVerdict
from docparser_operator.kube.client import KubeClient


def write_status(
    client: KubeClient,
    owner: ObjectMeta,
    plan: Target | None,
    live: dict[Key, dict[str, Any]],
    pods: list[dict[str, Any]],
    out: Outcome,
    now: str,
    cache: CacheVerdict | None = None,
    live_status: dict[str, Any] | None = None,
) -> DocParserStatus:
    """Build the pass's status and patch it when that changes it (a merge patch that also
    removes what a feature turned off left: core/status/status_patch.py). The patch is
    against ``live_status``, the status exactly as the API server holds it (the resource's,
    not its typed reading: a field only the server has is nulled or kept as it is there)."""
    status = pass_status(owner, plan, live, pods, out, now, cache)
    patch = status_write(live_status, status.to_wire())
    if patch is not None:
        out.body = client.patch_status(DOCPARSER, owner.namespace, owner.name, patch)
        out.status_written = True
    return status

"""The internal credential of the shadow's mirror path: the Secret ``<name>-internal``.

Why a Secret the operator creates and never reads: the canary must accept a mirrored request
only from stable pods of the same DocParser, so they share a token an outside client cannot
know. The operator ``create``s the Secret once with random bytes (controller/credential.py)
and owns it (garbage-collected with the DocParser); every runtime pod mounts it. The token
goes from the operator's memory to the API server once and is never read back: the chart
grants ``create`` on Secrets, not get, list or watch (docs/operations.md, "Shadow canary").

This module renders the object without its data (pure); the token is added by the
controller at the moment of the create, so it never appears in a rendered manifest.
"""

from __future__ import annotations

from typing import Any

from docparser_operator.api import naming
from docparser_operator.api.labels import TRACK_SHARED
from docparser_operator.core.plan.target import Target
from docparser_operator.core.render.meta import object_meta


def render_internal_secret(plan: Target) -> dict[str, Any]:
    """The Secret without its token (controller/credential.py fills ``data`` and creates it)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_meta(plan, naming.internal_secret(plan.name), TRACK_SHARED),
        "type": "Opaque",
    }

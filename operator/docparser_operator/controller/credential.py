"""The internal credential of the shadow's mirror path: create ``<name>-internal`` once.

Why create-only: the operator never reads Secrets (the chart's promise). So it cannot look
whether the Secret exists; it creates it, and the API server's answer says: 201 (made now,
with 32 random bytes from the operating system's CSPRNG) or 409 (it exists: ours from an
earlier run, or one the user made with a token of their choosing, which is left alone).
Either way the DocParser (by uid) is remembered for the rest of this operator run, so a quiet
resync sends nothing: one create per DocParser per operator start. The token never leaves
this function except in the request body; the API server's echo of it is dropped unread.

A deleted Secret is recreated at the next operator start (or leader change); until then the
stable pods count their copies as dropped (reason ``credential``) and the canary refuses the
mirror path, which fails closed. Rotation is the same: delete the Secret, restart the
operator (docs/operations.md, "Shadow canary").
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass, field

from docparser_operator.api import naming
from docparser_operator.api.kinds import ref_for
from docparser_operator.core.plan.problem import Problem
from docparser_operator.core.render import Target
from docparser_operator.core.render.credential import render_internal_secret
from docparser_operator.kube.client import ApiError, KubeClient

TOKEN_BYTES = 32


@dataclass
class CredentialMemory:
    """The DocParsers (by uid) whose Secret this operator run has created or found."""

    ensured: set[str] = field(default_factory=set[str])


def ensure_internal_secret(
    client: KubeClient, plan: Target, uid: str, memory: CredentialMemory
) -> Problem | None:
    """Create the DocParser's internal token Secret unless this run already did (or saw it);
    a refusal is reported (Forbidden: the chart's ClusterRole grants ``create``)."""
    if uid in memory.ensured:
        return None
    secret = render_internal_secret(plan)
    token = secrets.token_urlsafe(TOKEN_BYTES).encode()
    secret["data"] = {naming.INTERNAL_TOKEN_KEY: base64.b64encode(token).decode()}
    path = ref_for("Secret").path(plan.namespace)
    try:
        client.request("POST", path, body=secret)  # the reply echoes the token: not kept
    except ApiError as exc:
        if exc.status == 409:  # already there (ours from an earlier run, or the user's)
            memory.ensured.add(uid)
            return None
        if exc.status == 403:
            return Problem(
                "Forbidden",
                f"Secret {naming.internal_secret(plan.name)}: the operator's service account "
                "may not create it (the shadow's internal token); grant the verbs the chart's "
                "ClusterRole lists",
            )
        raise
    memory.ensured.add(uid)
    return None

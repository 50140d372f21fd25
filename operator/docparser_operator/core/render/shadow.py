"""The shadow canary's rendering: the ConfigMap ``<name>-shadow`` and what every runtime pod
mounts for it (the shadow configuration, the internal token, the admin key).

Why a mounted ConfigMap, not pod settings: turning the shadow on or off, or replacing the
canary, must not restart stable's pods. Every runtime pod (both roles, every revision) mounts
the same ConfigMap, the internal token Secret and (with ``auth.adminKeySecretRef``) the
admin key, all at fixed paths and ``optional`` where the operator creates the object itself,
so the pod template never depends on the shadow; the kubelet refreshes a mounted ConfigMap
in place (within about a minute) and the runtime re-reads it.

The ConfigMap exists only where a shadow was ever configured (``wanted``): the spec has one,
or the live view holds the ConfigMap (a shadow turned off: it then says ``{"enabled":
false}`` to the running pods, whose files would otherwise keep the last config). A DocParser
that never had a shadow has none, one apply fewer per DocParser created: its pods mount the
volume ``optional``, so the kubelet starts them with an empty folder (and fills it once the
ConfigMap is made), and the runtime reads a missing file as shadow off
(runtime/docparser_runtime/server/shadow/config.py).

The configuration (the contract with the runtime, docs/operations.md "Shadow canary"): stable
pods whose revision is ``stableRevision`` copy ``percent`` of the parse requests they answered
to ``target``, the canary role's Service (render/service.py points it at the spec's canary
revision) by its ClusterIP once the Service exists (a pod then needs no cluster DNS to reach
it, and the address lasts as long as the Service; before that, and offline, its DNS name),
within ``maxPagesPerMinute`` pages each: the DocParser's budget divided among the
stable revision's pods, rounded up, so the whole never exceeds the spec's by more than one
page per pod and minute.
"""

from __future__ import annotations

import json
import math
from typing import Any

from docparser_operator.api import naming
from docparser_operator.api.labels import TRACK_SHARED
from docparser_operator.api.models import DocParserSpec
from docparser_operator.core.plan.target import Target
from docparser_operator.core.render.meta import object_meta

SHADOW_VOLUME = "shadow-config"
INTERNAL_VOLUME = "internal-token"
ADMIN_VOLUME = "admin-key"
SECRET_MODE = 0o440


def shadow_config(plan: Target) -> dict[str, Any]:
    """What ``config.json`` says for this plan (``{"enabled": false}``: nothing to mirror)."""
    spec = plan.resource.spec
    shadow = spec.canary.shadow if spec.canary is not None else None
    stable, canary = plan.role("stable"), plan.role("canary")
    if shadow is None or stable is None or canary is None or not plan.mirror:
        return {"enabled": False}
    pods = max(1, plan.replicas(stable))
    host = plan.canary_address or f"{naming.canary_service(plan.name)}.{plan.namespace}.svc"
    return {
        "enabled": True,
        "target": f"http://{host}:{naming.HTTP_PORT}",
        "percent": shadow.percent,
        "maxPagesPerMinute": math.ceil(shadow.max_pages_per_minute / pods),
        "stableRevision": stable.revision,
        "canaryRevision": canary.revision,
    }


def wanted(plan: Target) -> bool:
    """Whether the plan renders ``<name>-shadow``: a shadow in the spec, or one live (module
    doc). The pod template mounts it either way."""
    canary = plan.resource.spec.canary
    return (canary is not None and canary.shadow is not None) or plan.shadow_config_live


def render_shadow_config(plan: Target) -> dict[str, Any]:
    body = json.dumps(shadow_config(plan), sort_keys=True, separators=(",", ":"))
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(plan, naming.shadow_config(plan.name), TRACK_SHARED),
        "data": {naming.SHADOW_CONFIG_KEY: body},
    }


def env(spec: DocParserSpec) -> dict[str, str]:
    """The runtime settings naming the mounted files (their defaults, said explicitly so a
    pod template reads on its own)."""
    out = {
        "DOCPARSER_SHADOW_CONFIG_FILE": f"{naming.SHADOW_CONFIG_DIR}/{naming.SHADOW_CONFIG_KEY}",
        "DOCPARSER_INTERNAL_TOKEN_FILE": f"{naming.INTERNAL_TOKEN_DIR}/{naming.INTERNAL_TOKEN_KEY}",
    }
    if spec.auth is not None and spec.auth.admin_key_secret_ref is not None:
        out["DOCPARSER_ADMIN_KEY_FILE"] = f"{naming.ADMIN_KEY_DIR}/{naming.ADMIN_KEY_FILE}"
    return out


def mounts(spec: DocParserSpec) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"name": SHADOW_VOLUME, "mountPath": naming.SHADOW_CONFIG_DIR, "readOnly": True},
        {"name": INTERNAL_VOLUME, "mountPath": naming.INTERNAL_TOKEN_DIR, "readOnly": True},
    ]
    if spec.auth is not None and spec.auth.admin_key_secret_ref is not None:
        out.append({"name": ADMIN_VOLUME, "mountPath": naming.ADMIN_KEY_DIR, "readOnly": True})
    return out


def volumes(spec: DocParserSpec, name: str) -> list[dict[str, Any]]:
    """The same for every revision of the DocParser: ``optional`` where the operator creates
    the object (a pod started before it exists gets it once the kubelet syncs). The admin
    key is the user's Secret, so a missing one keeps the pod from starting, as for API keys."""
    internal = naming.INTERNAL_TOKEN_KEY
    out: list[dict[str, Any]] = [
        {
            "name": SHADOW_VOLUME,
            "configMap": {"name": naming.shadow_config(name), "optional": True},
        },
        {
            "name": INTERNAL_VOLUME,
            "secret": {
                "secretName": naming.internal_secret(name),
                "items": [{"key": internal, "path": internal}],
                "defaultMode": SECRET_MODE,
                "optional": True,
            },
        },
    ]
    admin = spec.auth.admin_key_secret_ref if spec.auth is not None else None
    if admin is not None:
        out.append(
            {
                "name": ADMIN_VOLUME,
                "secret": {
                    "secretName": admin.name,
                    "items": [{"key": admin.key, "path": naming.ADMIN_KEY_FILE}],
                    "defaultMode": SECRET_MODE,
                },
            }
        )
    return out

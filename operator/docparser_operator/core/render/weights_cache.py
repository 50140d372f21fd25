"""The weights cache (``spec.weightsCache.mode: PersistentVolume``): one claim per sha256.

Why: with an emptyDir every pod start (scale-up, reschedule, restart, rollout and rollback)
downloads ~7 GB and hashes it twice, one pod at a time. Here each weights version is fetched
and verified once, by a Job, into a PersistentVolumeClaim named after its sha256
(``naming.weights_cache``); every pod of every revision that uses that sha256 mounts the claim
read-only, waits in its init container until the Job's atomic rename has put the verified
copy in place, and ``serve`` re-verifies it there (a cache is never trusted blindly). The
cache follows the revisions: a claim stays while a revision using it exists (the spec's
stable and canary, a revision still draining, and the previous stable kept at 0 pods for a
rollback), so at most four versions are stored, and the reconciler deletes the rest.

Claims and Jobs are created once and never re-applied: a claim's class and access mode
cannot change and a Job's pod template is immutable (a changed ``weightsCache`` applies to
the next version). A ``pvc://`` source is already a volume: it is mounted read-only and
verified in place in either mode, never copied, so it gets no cache.
"""

from __future__ import annotations

from typing import Any

from docparser_operator.api import labels, naming
from docparser_operator.api.models import Weights
from docparser_operator.core.plan import sizing
from docparser_operator.core.plan.target import Target
from docparser_operator.core.render.meta import object_meta
from docparser_operator.core.render.weights_init import fill_pod_spec

COMPONENT = "weights-cache"
SHA_ANNOTATION = "docparser.io/weights-sha256"
FILL_BACKOFF_LIMIT = 3
FILL_DEADLINE_S = 4 * 3600  # a slow object store: the Job's whole life, retries included


def cached_weights(plan: Target) -> list[Weights]:
    """The spec's weights that need a cache claim, one per sha256, stable first."""
    out: dict[str, Weights] = {}
    for tp in plan.roles:
        if tp.cached and tp.weights is not None:
            out.setdefault(tp.weights.sha256, tp.weights)
    return list(out.values())


def _meta(plan: Target, weights: Weights) -> dict[str, Any]:
    meta = object_meta(
        plan,
        naming.weights_cache(plan.name, weights.sha256),
        labels.TRACK_SHARED,
        version=weights.version,
        annotations={SHA_ANNOTATION: weights.sha256},
    )
    meta["labels"][labels.LABEL_COMPONENT] = COMPONENT
    return meta


def render_claim(plan: Target, weights: Weights) -> dict[str, Any]:
    cache = plan.resource.spec.weights_cache
    spec: dict[str, Any] = {
        "accessModes": [cache.access_mode],
        "resources": {"requests": {"storage": sizing.weights_volume_limit(plan.resource.spec)}},
    }
    if cache.storage_class_name:
        spec["storageClassName"] = cache.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(plan, weights),
        "spec": spec,
    }


def render_fill_job(plan: Target, weights: Weights) -> dict[str, Any]:
    """The Job that fetches and verifies one version into its claim (``fetch-weights``
    resumes a partial copy and is a no-op on a verified one, so a retry costs little)."""
    meta = _meta(plan, weights)
    pod_labels = {
        labels.LABEL_MANAGED_BY: labels.MANAGED_BY,
        labels.LABEL_INSTANCE: plan.name,
        labels.LABEL_COMPONENT: COMPONENT,
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": FILL_BACKOFF_LIMIT,
            "activeDeadlineSeconds": FILL_DEADLINE_S,
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": fill_pod_spec(plan.resource.spec, weights, meta["name"]),
            },
        },
    }


def render_weights_cache(plan: Target) -> list[dict[str, Any]]:
    children: list[dict[str, Any]] = []
    for weights in cached_weights(plan):
        children += [render_claim(plan, weights), render_fill_job(plan, weights)]
    return children

"""The ``WeightsCached`` condition: where the spec's weights are in the cache (pure).

One verdict per pass from the live fill Jobs (render/weights_cache.py) and their pods:
``Cached`` when every cached version's Job completed, ``Filling`` while one runs,
``FillFailed`` (also a Degraded problem) when one gave up, naming the fetch error the pod
left in its termination message (a sha256 mismatch, a denied bucket). ``Disabled`` says the
pods fetch their own copies (``weightsCache.mode: EmptyDir``), ``NotNeeded`` that the
weights are a ``pvc://`` claim mounted in place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from docparser_operator.api import naming
from docparser_operator.api.models import DocParserSpec, Weights
from docparser_operator.core.plan.problem import Problem

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


@dataclass(frozen=True)
class CacheVerdict:
    cached: bool
    reason: str  # Cached | Filling | FillFailed | Disabled | NotNeeded
    message: str
    problem: Problem | None = None


def _condition(job: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    return next(
        (
            c
            for c in (job.get("status") or {}).get("conditions") or []
            if c.get("type") == ctype and c.get("status") == "True"
        ),
        None,
    )


def _pod_error(pods: Sequence[Mapping[str, Any]], job_name: str) -> str:
    """The last termination message the Job's pods left (fetch-weights' own error line)."""
    for pod in reversed(pods):
        if (pod["metadata"].get("labels") or {}).get(JOB_NAME_LABEL) != job_name:
            continue
        for ctr in (pod.get("status") or {}).get("containerStatuses") or []:
            message = ((ctr.get("state") or {}).get("terminated") or {}).get("message")
            if message:
                return str(message).strip().splitlines()[-1]
    return ""


def weights_cache_verdict(
    spec: DocParserSpec,
    name: str,
    cached: Sequence[Weights],
    jobs: Mapping[str, Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
) -> CacheVerdict:
    """``cached``: the spec's weights kept in the cache; ``jobs``: live fill Jobs by name."""
    if spec.weights is None:
        return CacheVerdict(False, "NotNeeded", "no weights to cache (the engine embeds its model)")
    if spec.weights_cache.mode == "EmptyDir":
        return CacheVerdict(
            False, "Disabled", "weightsCache.mode is EmptyDir: every pod fetches its own copy"
        )
    if not cached:
        return CacheVerdict(True, "NotNeeded", "pvc:// weights are mounted read-only in place")
    filled, filling, failed = [], [], []
    for weights in cached:
        job_name = naming.weights_cache(name, weights.sha256)
        job = jobs.get(job_name)
        if job is not None and _condition(job, "Complete"):
            filled.append(f"{weights.version} in claim {job_name}")
        elif job is not None and (failure := _condition(job, "Failed")):
            why = _pod_error(pods, job_name) or str(failure.get("message") or "")
            failed.append(f"{weights.version}: fill Job {job_name} failed ({why})")
        else:
            filling.append(f"{weights.version}: fill Job {job_name} running")
    if failed:
        message = "; ".join(failed + filling)
        return CacheVerdict(
            False, "FillFailed", message, Problem("WeightsCacheFillFailed", message)
        )
    if filling:
        return CacheVerdict(False, "Filling", "; ".join(filling + filled))
    return CacheVerdict(True, "Cached", "; ".join(filled))

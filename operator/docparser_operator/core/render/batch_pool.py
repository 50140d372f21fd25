"""The batch pool (``spec.batch``): a Deployment ``<name>-batch`` of the stable revision that
takes batch lines only.

- Its pods are the stable revision's pod template with another app name
  (``docparser-batch``), so no selector of the runtime pods (the endpoint and revision
  Services, the HTTPRoute's backends, the PDB, ``status.selector`` for the HPA) ever counts
  them: no interactive request reaches them, and the autoscaler and the PDB see only the
  serving pods. They carry the stable revision label (``DOCPARSER_REVISION`` reads it: each
  output line names the revision that ran it) but the Deployment does not, so the rollout
  planner never takes the pool for a serving revision. A new stable revision changes the
  pool's template: its Deployment replaces the pods, each finishing its claimed lines.
- The runtime knows its role from its settings: ``DOCPARSER_JOB_WORKERS=0`` (it claims no
  ``/v1/jobs`` job: those are interactive work) and ``DOCPARSER_BATCH_WORKERS`` =
  ``runtime.maxBatchSize`` (its lines fill the continuous batch's slots; a stable pod that
  backfills runs the runtime's default of one line, below its interactive work). With
  ``backfill: false`` the stable pods get ``DOCPARSER_BATCH_WORKERS=0`` (``backfill_env``).
- Placement: the pod's node selector with the pool's added, its tolerations with the pool's
  (spot taints), and the pool's priorityClassName when given (a low one, so that interactive
  pods preempt batch pods on a shared node, never the reverse).
- Drain: a batch line is a whole document, longer than a request, so the pool's drain
  (``DOCPARSER_DRAIN_TIMEOUT_S``) is ``POOL_DRAIN_FACTOR`` times a serving pod's, at most an
  hour, and the grace period covers it (deployment.termination_grace_seconds' terms). The
  runtime hands back what did not finish by then at once (batches/worker.py), before the
  grace period ends; a pod killed without a drain (a spot node gone) loses its lease
  (``DOCPARSER_JOB_LEASE_S``, 15 s) and its lines requeue then.
"""

from __future__ import annotations

from typing import Any

from docparser_operator.api import labels, naming
from docparser_operator.api.models import DocParserSpec
from docparser_operator.core.plan.target import Target
from docparser_operator.core.render.deployment import (
    DOWNLOAD_ALLOWANCE_S,
    PRESTOP_SLEEP_S,
    RUNTIME_DRAIN_GRACE_S,
    drain_seconds,
    pod_template,
)
from docparser_operator.core.render.meta import object_meta

POOL_DRAIN_FACTOR = 4  # a document of up to 4 x maxBatchSize pages finishes its line
MAX_POOL_DRAIN_S = 3600
GRACE_MARGIN_S = 15


def pool_drain_seconds(spec: DocParserSpec) -> int:
    return min(MAX_POOL_DRAIN_S, POOL_DRAIN_FACTOR * drain_seconds(spec))


def pool_grace_seconds(spec: DocParserSpec) -> int:
    return PRESTOP_SLEEP_S + RUNTIME_DRAIN_GRACE_S + pool_drain_seconds(spec) + GRACE_MARGIN_S


def backfill_env(spec: DocParserSpec) -> list[dict[str, str]]:
    """What the stable pods add for the pool: no batch line with ``backfill: false`` (nothing
    without ``spec.batch``, so DocParsers without it render as before)."""
    if spec.batch is None or spec.batch.backfill:
        return []
    return [{"name": "DOCPARSER_BATCH_WORKERS", "value": "0"}]


def _env(spec: DocParserSpec, env: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ours = {
        "DOCPARSER_JOB_WORKERS": "0",
        "DOCPARSER_BATCH_WORKERS": str(spec.runtime.max_batch_size),
        "DOCPARSER_DRAIN_TIMEOUT_S": str(pool_drain_seconds(spec)),
    }
    backfill = backfill_env(spec)
    kept = [e for e in env if e not in backfill]
    replaced = [
        {"name": e["name"], "value": ours[e["name"]]} if e["name"] in ours else e for e in kept
    ]
    present = {e["name"] for e in replaced}
    return replaced + [{"name": k, "value": v} for k, v in ours.items() if k not in present]


def _place(spec: DocParserSpec, pod: dict[str, Any], name: str) -> None:
    batch = spec.batch
    assert batch is not None
    selector = {**(pod.get("nodeSelector") or {}), **batch.node_selector}
    if selector:
        pod["nodeSelector"] = selector
    tolerations = list(pod.get("tolerations") or [])
    tolerations += [dict(t) for t in batch.tolerations if dict(t) not in tolerations]
    if tolerations:
        pod["tolerations"] = tolerations
    if batch.priority_class_name:
        pod["priorityClassName"] = batch.priority_class_name
    serving = labels.pod_selector(name)
    for spread in pod.get("topologySpreadConstraints") or []:
        match = (spread.get("labelSelector") or {}).get("matchLabels")
        if match == serving:  # the default spread, over the pool's own pods
            spread["labelSelector"] = {"matchLabels": labels.batch_selector(name)}


def render_batch_pool(plan: Target) -> dict[str, Any]:
    """The pool's Deployment at ``plan.batch_replicas`` pods (``replicas.min`` unless a pass
    decided on a reading)."""
    spec = plan.resource.spec
    stable = plan.role("stable")
    assert spec.batch is not None and stable is not None
    template = pod_template(plan.resource, stable)
    template["metadata"]["labels"].update(
        labels.batch_pod_labels(plan.name, stable.revision, stable.version)
    )
    pod = template["spec"]
    pod["terminationGracePeriodSeconds"] = pool_grace_seconds(spec)
    container = pod["containers"][0]
    container["env"] = _env(spec, container["env"])
    _place(spec, pod, plan.name)
    meta = object_meta(plan, naming.batch_pool(plan.name), "stable", version=stable.version)
    meta["labels"][labels.LABEL_COMPONENT] = labels.BATCH_COMPONENT
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": spec.batch.replicas.min
            if plan.batch_replicas is None
            else plan.batch_replicas,
            "selector": {"matchLabels": labels.batch_selector(plan.name)},
            # No surge: a GPU node rarely has one spare. Each replaced pod drains its lines.
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "25%"},
            },
            "revisionHistoryLimit": 1,
            "progressDeadlineSeconds": spec.runtime.startup_timeout_seconds + DOWNLOAD_ALLOWANCE_S,
            "template": template,
        },
    }

"""The front of a DocParser that scales to zero (``replicas.min: 0``): Deployment ``<name>-front``.

One CPU pod of the runtime image in front mode (``DOCPARSER_ROLE=front``: no engine, no model)
that serves the same client API with the same API keys, quotas, result cache and Redis prefix
as the GPU pods: while no GPU pod is Ready the endpoint Service and the HTTPRoute send to it
(render/service.py, render/httproute.py). It queues jobs in the DocParser's Redis (the GPU
pods' workers take them once up), answers job status from Redis, and holds a synchronous
request up to ``scaleToZero.holdSeconds`` before handing it to ``<name>-serving`` (every GPU
pod) once one is Ready, or answering 503 with ``Retry-After``. The front reaches that Service
by its ClusterIP once it has one (its DNS name in the first pass, before it exists): a cluster
without DNS for pods (the local cluster) can wake the DocParser and then never hand over a held
parse. A Service's ClusterIP never changes, so this rolls the front once, right after creation.
Its ``/metrics`` (held requests, queued jobs, requests) is what wakes the DocParser
(core/plan/idle.py).

Why one front per DocParser, not one shared front: auth, quotas, the result cache and the
Redis prefix are per DocParser, so a shared front would have to hold every DocParser's API
keys and Redis credentials (Secrets of other namespaces: cross-namespace reads for the front
or the operator) and one DocParser's burst would queue behind another's. One small pod each
keeps the isolation the GPU pods have, costs about 0.1 CPU and 1 GiB, and needs no access to
the API server at all (``automountServiceAccountToken: false``): the front learns that a
backend is Ready from ``<name>-serving``'s ``/readyz``, and the operator reads the front's
``/metrics`` over HTTP, never with API credentials.

The front follows the stable revision's request settings (tier, tokens, model version and
weights digest: the result cache's key and the 4xx checks equal the pods'), so a new stable
revision rolls the front too: a rolling update of one CPU pod (``maxUnavailable: 0``), whose
drain outlasts the hold time, so a held request is answered, never dropped.
"""

from __future__ import annotations

from typing import Any

from docparser_operator.api import naming
from docparser_operator.api.labels import front_pod_labels, front_selector
from docparser_operator.api.replicas import ScaleToZero
from docparser_operator.core.plan.target import Target
from docparser_operator.core.render.deployment import (
    API_KEYS_DIR,
    PRESTOP_SLEEP_S,
    probe,
    runtime_env,
)
from docparser_operator.core.render.meta import object_meta
from docparser_operator.core.render.security import container_security, pod_security

# What the front shares with the stable pods' environment: the request defaults and limits
# (a request the pods refuse with a 4xx the front refuses too), the result cache's key (model
# version and weights digest), Redis and its prefix, the API keys.
SHARED_ENV = frozenset(
    {
        "DOCPARSER_DEFAULT_MAX_NEW_TOKENS",
        "DOCPARSER_MAX_NEW_TOKENS_LIMIT",
        "DOCPARSER_DEFAULT_TIER",
        "DOCPARSER_MAX_TIER",
        "DOCPARSER_MODEL_VERSION",
        "DOCPARSER_WEIGHTS_SHA256",
        "DOCPARSER_API_KEYS_FILE",
        "DOCPARSER_REDIS_URL",
        "DOCPARSER_REDIS_PREFIX",
        "HOME",
    }
)
FRONT_CPU = "250m"
FRONT_MEMORY = "1Gi"  # a few held uploads (50 MiB each at most) and the server
DRAIN_MARGIN_S = 30


def _env(plan: Target, policy: ScaleToZero) -> list[dict[str, Any]]:
    stable = plan.role("stable")
    assert stable is not None  # every spec has a stable role (plan/target.py)
    spec = plan.resource.spec
    shared = [
        e for e in runtime_env(spec, stable, plan.resource.metadata) if e["name"] in SHARED_ENV
    ]
    backend = (
        f"http://{plan.serving_address}:{naming.HTTP_PORT}"
        if plan.serving_address
        else naming.service_url(naming.serving_service(plan.name), plan.namespace)
    )
    own = {
        "DOCPARSER_ROLE": "front",
        "DOCPARSER_FRONT_BACKEND_URL": backend,
        "DOCPARSER_FRONT_HOLD_SECONDS": str(policy.hold_seconds),
        "DOCPARSER_FRONT_RETRY_AFTER_SECONDS": str(policy.retry_after_seconds),
        "DOCPARSER_DEVICE": "cpu",
        # A held request outlives a rolling update of the front: its drain waits for it.
        "DOCPARSER_DRAIN_GRACE_S": "5",
        "DOCPARSER_DRAIN_TIMEOUT_S": str(policy.hold_seconds + DRAIN_MARGIN_S),
    }
    user = [e.model_dump() for e in spec.pod.env]
    return [{"name": k, "value": v} for k, v in own.items()] + shared + user


def render_front(plan: Target) -> dict[str, Any]:
    policy = plan.resource.spec.replicas.idle_policy
    assert policy is not None  # rendered only for replicas.min 0
    spec = plan.resource.spec
    mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}]
    if spec.auth and spec.auth.api_key_secret_ref:
        mounts.append({"name": "api-keys", "mountPath": API_KEYS_DIR, "readOnly": True})
        secret = {"secretName": spec.auth.api_key_secret_ref.name, "defaultMode": 0o440}
        volumes.append({"name": "api-keys", "secret": secret})
    container: dict[str, Any] = {
        "name": naming.RUNTIME_CONTAINER,
        "image": spec.runtime.image,
        "imagePullPolicy": spec.runtime.image_pull_policy,
        "args": [
            *("serve", "--engine", spec.engine, "--host", "0.0.0.0"),
            *("--port", str(naming.HTTP_PORT)),
        ],
        "env": _env(plan, policy),
        **({"envFrom": [dict(e) for e in spec.pod.env_from]} if spec.pod.env_from else {}),
        "ports": [
            {"name": naming.HTTP_PORT_NAME, "containerPort": naming.HTTP_PORT, "protocol": "TCP"}
        ],
        "resources": {
            "requests": {"cpu": FRONT_CPU, "memory": FRONT_MEMORY},
            "limits": {"memory": FRONT_MEMORY},
        },
        "readinessProbe": probe("/readyz", period=5, failures=3, timeout=3),
        "livenessProbe": probe("/livez", period=10, failures=6, timeout=5),
        "lifecycle": {"preStop": {"sleep": {"seconds": PRESTOP_SLEEP_S}}},
        "securityContext": container_security(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": mounts,
    }
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,  # the front never calls the API server
        "securityContext": pod_security(),
        "terminationGracePeriodSeconds": PRESTOP_SLEEP_S + policy.hold_seconds + 2 * DRAIN_MARGIN_S,
        "containers": [container],
        "volumes": volumes,
    }
    if spec.pod.service_account_name:
        pod_spec["serviceAccountName"] = spec.pod.service_account_name
    if spec.pod.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": ref.name} for ref in spec.pod.image_pull_secrets]
    labels = {**spec.pod.labels, **front_pod_labels(plan.name)}
    annotations = {
        **spec.pod.annotations,
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(naming.HTTP_PORT),
        "prometheus.io/path": "/metrics",
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_meta(plan, naming.front(plan.name), "shared"),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": front_selector(plan.name)},
            # make-before-break for the one CPU pod: the new front is Ready before the old goes
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "revisionHistoryLimit": 1,
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": pod_spec,
            },
        },
    }

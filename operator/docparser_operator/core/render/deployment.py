"""Deployment of one revision: the GPU runtime pod, its weights init container and probes.

A revision's pod template never changes (any change is a new revision, see
plan/rollout_planner.py), so the Deployment's own rolling update never runs: the operator
moves capacity between revisions by their replicas. Choices a GPU OCR service needs (and generic
charts get wrong):
- replicas always set by the operator (the one HPA scales the DocParser, not a Deployment).
- The init container runs ``docparser-runtime fetch-weights`` into an emptyDir and exits
  non-zero on a sha256 mismatch, so unverified weights are never served. A pvc://CLAIM/PATH
  source is mounted read-only and copied (verified) from there.
- The startup probe budget is runtime.startupTimeoutSeconds (30 min by default): loading
  large weights is slow and a short deadline kills pods in a restart loop. The download
  happens before it, in the init container, and is bounded by progressDeadlineSeconds.
- preStop tells the runtime it is leaving (SIGUSR1 through tini: it claims no new job, a job
  taken now would run on a pod going away) and sleeps while endpoints drop the pod, serving
  requests meanwhile; then the runtime drains in-flight requests. terminationGracePeriodSeconds
  covers both (longest decode: maxNewTokens at a slow rate).
- Non-root, no capabilities, read-only root filesystem; /tmp is an emptyDir.
- Containers set ``args`` only, never ``command``: a command would replace the image's
  ENTRYPOINT ``tini -- docparser-runtime`` (Dockerfile.runtime). Without tini the server is
  PID 1, where the kernel drops signals that have no handler yet (a SIGTERM during startup
  does nothing) and orphaned processes are never reaped.
"""

from __future__ import annotations

import math
from typing import Any

from docparser_operator.api import naming
from docparser_operator.api.labels import LABEL_REVISION, pod_labels, pod_selector
from docparser_operator.api.models import DocParser, DocParserSpec, ObjectMeta
from docparser_operator.core.plan import sizing
from docparser_operator.core.plan.target import RoleRevision, Target
from docparser_operator.core.render import shadow
from docparser_operator.core.render.meta import object_meta
from docparser_operator.core.render.security import container_security, pod_security
from docparser_operator.core.render.weights_init import fetch_container, pod_cpu, wait_container

API_KEYS_DIR = "/var/run/secrets/docparser/api-keys"
PRESTOP_SLEEP_S = 10
# PID 1 is tini (the image's ENTRYPOINT), which forwards the signal to the server
# (runtime server/drain.py LEAVING_SIGNAL); the sleep runs whether or not it arrived.
PRESTOP_COMMAND = ("/bin/sh", "-c", f"kill -USR1 1 2>/dev/null; sleep {PRESTOP_SLEEP_S}")
RUNTIME_DRAIN_GRACE_S = 5  # runtime keeps serving with /readyz 503 after SIGTERM
# The startup probe runs only until it first passes, so a short period costs a request every
# 2 s while a pod starts and nothing after; with 10 s a pod that served at 3 s became Ready at
# 10 s, and every wake from zero, scale-up, rollout step and drain replacement paid the gap.
STARTUP_PERIOD_S = 2
MIN_DECODE_TOKENS_PER_S = 20  # a slow GPU decoding one long page; bounds the drain time
DOWNLOAD_ALLOWANCE_S = 3600  # extra progress deadline for the init container's download
GPU_RESOURCE = "nvidia.com/gpu"
# What the runtime image runs before a container's args (its ENTRYPOINT, Dockerfile.runtime).
RUNTIME_ENTRYPOINT = ("/usr/bin/tini", "--", "docparser-runtime")


def drain_seconds(spec: DocParserSpec) -> int:
    """Time the runtime gets to finish in-flight work after SIGTERM."""
    if spec.engine == "rapidocr":
        return 120
    return min(3600, max(60, math.ceil(spec.runtime.max_new_tokens / MIN_DECODE_TOKENS_PER_S) + 30))


def termination_grace_seconds(spec: DocParserSpec) -> int:
    return PRESTOP_SLEEP_S + RUNTIME_DRAIN_GRACE_S + drain_seconds(spec) + 15


def runtime_env(spec: DocParserSpec, tp: RoleRevision, meta: ObjectMeta) -> list[dict[str, Any]]:
    env = {
        "DOCPARSER_MAX_BATCH_SIZE": str(spec.runtime.max_batch_size),
        "DOCPARSER_DEFAULT_MAX_NEW_TOKENS": str(spec.runtime.max_new_tokens),
        "DOCPARSER_MAX_NEW_TOKENS_LIMIT": str(spec.runtime.max_new_tokens),
        "DOCPARSER_DEFAULT_TIER": str(spec.tier),
        "DOCPARSER_MAX_TIER": str(spec.max_tier),
        "DOCPARSER_MODEL_VERSION": tp.version or "embedded",
        "DOCPARSER_DEVICE": "cuda" if spec.gpus else "cpu",
        "DOCPARSER_DRAIN_GRACE_S": str(RUNTIME_DRAIN_GRACE_S),
        "DOCPARSER_DRAIN_TIMEOUT_S": str(drain_seconds(spec)),
        # Writable homes on a read-only root; never reach a model hub from a pod.
        "HOME": "/tmp",
        "HF_HOME": "/tmp/hf-home",
        "HF_HUB_OFFLINE": "1",
    }
    if tp.weights is not None and tp.weights.sha256:
        # serve re-checks the fetched files against the digest the DocParser pins.
        env["DOCPARSER_WEIGHTS_SHA256"] = tp.weights.sha256
    if spec.auth and spec.auth.api_key_secret_ref:
        env["DOCPARSER_API_KEYS_FILE"] = API_KEYS_DIR
    env.update(shadow.env(spec))
    rendered: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in env.items()]
    # The pod's own revision, read from its label (the template stays the same text for
    # every revision): jobs a revision accepts run on that revision only.
    label = f"metadata.labels['{LABEL_REVISION}']"
    rendered.append({"name": "DOCPARSER_REVISION", "valueFrom": {"fieldRef": {"fieldPath": label}}})
    redis = spec.runtime.redis_url_secret_ref
    if redis is not None:
        # Jobs and the result cache in Redis: any replica answers for any job.
        ref = {"name": redis.name, "key": redis.key}
        rendered.append({"name": "DOCPARSER_REDIS_URL", "valueFrom": {"secretKeyRef": ref}})
        # Every key of this DocParser (both tracks) under its own prefix: DocParsers that
        # share one Redis never run or read each other's jobs or cached results.
        prefix = naming.redis_prefix(meta.namespace, meta.name)
        rendered.append({"name": "DOCPARSER_REDIS_PREFIX", "value": prefix})
    if spec.batch is not None and not spec.batch.backfill:  # only the batch pool runs lines
        rendered.append({"name": "DOCPARSER_BATCH_WORKERS", "value": "0"})
    return rendered


def probe(path: str, *, period: int, failures: int, timeout: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": naming.HTTP_PORT_NAME},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": timeout,
    }


def _resources(spec: DocParserSpec, *, weights_in_pod: bool) -> dict[str, Any]:
    memory = sizing.host_memory_request(spec)
    requests = {
        "cpu": pod_cpu(spec),
        "memory": memory,
        "ephemeral-storage": sizing.ephemeral_storage_request(spec, weights_in_pod=weights_in_pod),
    }
    limits = {"memory": memory}
    if spec.gpus:
        requests[GPU_RESOURCE] = str(spec.gpus)
        limits[GPU_RESOURCE] = str(spec.gpus)
    return {"requests": requests, "limits": limits}


def _runtime_container(spec: DocParserSpec, tp: RoleRevision, meta: ObjectMeta) -> dict[str, Any]:
    args = ["serve", "--engine", spec.engine, "--host", "0.0.0.0", "--port", str(naming.HTTP_PORT)]
    mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]
    if tp.weights is not None:
        model_path = naming.model_path(tp.weights.version)
        args += ["--model-path", model_path]
        if tp.weights.pvc is not None:
            # The source claim itself, read-only, at the model path: serve verifies in place.
            _, path = tp.weights.pvc
            mounts.append(
                {"name": "weights", "mountPath": model_path, "subPath": path, "readOnly": True}
            )
        else:
            mounts.append({"name": "weights", "mountPath": naming.WEIGHTS_MOUNT, "readOnly": True})
    if spec.auth and spec.auth.api_key_secret_ref:
        mounts.append({"name": "api-keys", "mountPath": API_KEYS_DIR, "readOnly": True})
    mounts += shadow.mounts(spec)
    startup_failures = math.ceil(spec.runtime.startup_timeout_seconds / STARTUP_PERIOD_S)
    return {
        "name": naming.RUNTIME_CONTAINER,
        "image": spec.runtime.image,
        "imagePullPolicy": spec.runtime.image_pull_policy,
        "args": args,
        "env": runtime_env(spec, tp, meta) + [e.model_dump() for e in spec.pod.env],
        **({"envFrom": [dict(e) for e in spec.pod.env_from]} if spec.pod.env_from else {}),
        "ports": [
            {"name": naming.HTTP_PORT_NAME, "containerPort": naming.HTTP_PORT, "protocol": "TCP"}
        ],
        "resources": _resources(spec, weights_in_pod=tp.source == "pod"),
        "startupProbe": probe(
            "/readyz", period=STARTUP_PERIOD_S, failures=startup_failures, timeout=STARTUP_PERIOD_S
        ),
        "readinessProbe": probe("/readyz", period=5, failures=3, timeout=3),
        "livenessProbe": probe("/livez", period=10, failures=6, timeout=5),
        "lifecycle": {"preStop": {"exec": {"command": list(PRESTOP_COMMAND)}}},
        "securityContext": container_security(),
        # The last log lines become the termination message when the process wrote none, so
        # the operator can say why (a sha256 mismatch, a model that cannot load).
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": mounts,
    }


def _claim(name: str) -> dict[str, Any]:
    return {"claimName": name, "readOnly": True}


def _volumes(spec: DocParserSpec, tp: RoleRevision, name: str) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = [
        {"name": "tmp", "emptyDir": {"sizeLimit": sizing.TMP_VOLUME_LIMIT}}
    ]
    weights = tp.weights
    if weights is not None and weights.pvc is not None:
        volumes.append({"name": "weights", "persistentVolumeClaim": _claim(weights.pvc[0])})
    elif weights is not None and tp.cached:
        claim = naming.weights_cache(name, weights.sha256)
        volumes.append({"name": "weights", "persistentVolumeClaim": _claim(claim)})
    elif weights is not None:
        volumes.append(
            {"name": "weights", "emptyDir": {"sizeLimit": sizing.weights_volume_limit(spec)}}
        )
    if spec.auth and spec.auth.api_key_secret_ref:
        volumes.append(
            {
                "name": "api-keys",
                "secret": {"secretName": spec.auth.api_key_secret_ref.name, "defaultMode": 0o440},
            }
        )
    return volumes + shadow.volumes(spec, name)


def _pod_annotations(spec: DocParserSpec, tp: RoleRevision) -> dict[str, str]:
    annotations = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(naming.HTTP_PORT),
        "prometheus.io/path": "/metrics",
    }
    if tp.weights is not None:
        annotations["docparser.io/weights-sha256"] = tp.weights.sha256
    estimate = sizing.estimate_for_spec(spec)
    if estimate.total:
        annotations["docparser.io/gpu-memory-estimate"] = sizing.format_gib(estimate.total)
    return annotations


def pod_template(resource: DocParser, tp: RoleRevision) -> dict[str, Any]:
    """The pod template of one track's revision, without its revision label (the hash input)."""
    spec = _track_spec(resource, tp)
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "securityContext": pod_security(),
        "terminationGracePeriodSeconds": termination_grace_seconds(spec),
        "containers": [_runtime_container(spec, tp, resource.metadata)],
        "volumes": _volumes(spec, tp, resource.metadata.name),
    }
    if tp.weights is not None and tp.cached:
        pod_spec["initContainers"] = [wait_container(spec, tp.weights)]
    elif tp.weights is not None and tp.source == "pod":
        pod_spec["initContainers"] = [fetch_container(spec, tp.weights)]
    if spec.resources.node_selector:
        pod_spec["nodeSelector"] = dict(spec.resources.node_selector)
    pod_spec.update(_placement(spec, resource.metadata.name))
    labels = {**spec.pod.labels, **pod_labels(resource.metadata.name, "", tp.version)}
    del labels[LABEL_REVISION]
    return {
        "metadata": {
            "labels": labels,
            "annotations": {**spec.pod.annotations, **_pod_annotations(spec, tp)},
        },
        "spec": pod_spec,
    }


# Pods of a node that stopped reporting are replaced this long after the node controller taints
# it (itself 40-50 s after the last heartbeat), instead of DefaultTolerationSeconds' 300 s: a
# GPU pod needs minutes to load, so every second before its replacement is scheduled is
# capacity missing for as long. Not shorter: a kubelet or network blip under ~70 s then costs
# no reload. spec.pod.tolerations with the same key replaces these (docs/operations.md).
NODE_FAILURE_TOLERATION_SECONDS = 30
NODE_FAILURE_TOLERATIONS: tuple[dict[str, object], ...] = tuple(
    {
        "key": key,
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": NODE_FAILURE_TOLERATION_SECONDS,
    }
    for key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
)


def _tolerated(tolerations: list[dict[str, Any]], key: str) -> bool:
    """Whether the user's tolerations already say how long to stay on a ``key`` taint (the
    same key, or an empty key with ``Exists``: every taint). The taint manager takes the
    shortest ``tolerationSeconds`` of all that match, so ours would override theirs."""
    return any(
        t.get("key") == key or (not t.get("key") and t.get("operator") == "Exists")
        for t in tolerations
    )


# The default spread: distinct nodes first, then distinct zones (kube-scheduler scores both).
SPREAD_KEYS = ("kubernetes.io/hostname", "topology.kubernetes.io/zone")


def _placement(spec: DocParserSpec, name: str) -> dict[str, Any]:
    """Tolerations, affinity, spreading, priority, runtime class and identity (spec.pod).

    Without constraints of their own the pods spread across nodes and zones (ScheduleAnyway: a
    preference, so a single GPU node, or nodes without zone labels, still take them all), so
    one node's or one zone's loss is not the whole service."""
    pod = spec.pod
    out: dict[str, Any] = {}
    tolerations: list[dict[str, Any]] = [
        {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
    ]
    tolerations = (tolerations if spec.gpus else []) + [
        dict(t) for t in pod.tolerations if dict(t) not in tolerations
    ]
    tolerations += [
        dict(t) for t in NODE_FAILURE_TOLERATIONS if not _tolerated(pod.tolerations, str(t["key"]))
    ]
    if tolerations:
        out["tolerations"] = tolerations
    if pod.affinity:
        out["affinity"] = dict(pod.affinity)
    spread = pod.topology_spread_constraints
    out["topologySpreadConstraints"] = (
        [dict(c) for c in spread]
        if spread is not None
        else [
            {
                "maxSkew": 1,
                "topologyKey": key,
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": pod_selector(name)},
            }
            for key in SPREAD_KEYS
        ]
    )
    if not out["topologySpreadConstraints"]:
        del out["topologySpreadConstraints"]  # [] turns the default off
    for key, value in (
        ("priorityClassName", pod.priority_class_name),
        ("runtimeClassName", pod.runtime_class_name),
        ("serviceAccountName", pod.service_account_name),
    ):
        if value:
            out[key] = value
    if pod.image_pull_secrets:
        out["imagePullSecrets"] = [{"name": ref.name} for ref in pod.image_pull_secrets]
    return out


def _track_spec(resource: DocParser, tp: RoleRevision) -> DocParserSpec:
    """The canary renders from the spec with its runtime override; stable from the spec."""
    return resource.spec.for_canary() if tp.role == "canary" else resource.spec


def render_deployment(plan: Target, tp: RoleRevision) -> dict[str, Any]:
    spec = _track_spec(plan.resource, tp)
    name = naming.revision_name(plan.name, tp.revision)
    # The template rendered (and hashed) once this pass (render.roles_of); a copy of the two
    # levels that gain the revision label, the rest shared (prepare deep-copies the child).
    rendered = tp.template if tp.template is not None else pod_template(plan.resource, tp)
    labels_ = {**rendered["metadata"]["labels"], **pod_labels(plan.name, tp.revision, tp.version)}
    template = {**rendered, "metadata": {**rendered["metadata"], "labels": labels_}}
    meta = object_meta(plan, name, tp.role, version=tp.version)
    meta["labels"][LABEL_REVISION] = tp.revision
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": plan.replicas(tp),
            "selector": {"matchLabels": pod_selector(plan.name, tp.revision)},
            # Never used in practice (the template of a revision is fixed); kept GPU-safe.
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
            },
            "revisionHistoryLimit": 1,
            "progressDeadlineSeconds": spec.runtime.startup_timeout_seconds + DOWNLOAD_ALLOWANCE_S,
            "template": template,
        },
    }

"""The containers that bring the weights: the fetch init container (download and verify the
sha256 into the pod, or into a cache claim as the fill Job's pod) and the wait init container
(hold a pod until the fill Job has verified the cache). Shared by the Deployment and the
weights cache's Job, so both fetch the same way."""

from __future__ import annotations

from typing import Any

from docparser_operator.api import naming
from docparser_operator.api.models import DocParserSpec, Weights
from docparser_operator.core.plan import sizing
from docparser_operator.core.render.security import container_security, pod_security

INIT_CPU_MILLIS = 500  # the weights fetcher: download and sha256, one core is plenty
WAIT_WEIGHTS_TIMEOUT_S = 4 * 3600  # a pod waiting on the cache fill Job (its own deadline)


def pod_cpu(spec: DocParserSpec) -> str:
    return spec.resources.cpu or ("2" if spec.gpus else "1")


def init_cpu(spec: DocParserSpec) -> str:
    """Half a core for fetching and hashing, never more than the pod's own request: a pod's
    scheduling size is the larger of its init and regular containers, so a bigger init request
    would make a small CPU pod unschedulable where its spec fits."""
    pod = pod_cpu(spec)
    return pod if sizing.parse_cpu_millis(pod) < INIT_CPU_MILLIS else f"{INIT_CPU_MILLIS}m"


def fetch_container(spec: DocParserSpec, weights: Weights) -> dict[str, Any]:
    """Download and verify ``weights`` into the weights volume (the pod's emptyDir, or the
    cache claim in the fill Job); exits non-zero on a sha256 mismatch."""
    mounts: list[dict[str, Any]] = [
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "weights", "mountPath": naming.WEIGHTS_MOUNT},
    ]
    source = weights.uri
    return {
        "name": naming.FETCH_CONTAINER,
        "image": spec.runtime.image,
        "imagePullPolicy": spec.runtime.image_pull_policy,
        "args": [
            "fetch-weights",
            "--source",
            source,
            "--dest",
            naming.model_path(weights.version),
            "--sha256",
            weights.sha256,
        ],
        "env": [{"name": "HOME", "value": "/tmp"}],
        # Object-store credentials reach the init container only, never the server.
        **(
            {"envFrom": [{"secretRef": {"name": weights.credentials_secret_ref.name}}]}
            if weights.credentials_secret_ref is not None
            else {}
        ),
        "resources": {
            "requests": {"cpu": init_cpu(spec), "memory": "1Gi"},
            "limits": {"memory": "2Gi"},
        },
        "securityContext": container_security(),
        # The last log lines become the termination message when the process wrote none, so
        # the operator can say why (a sha256 mismatch, a model that cannot load).
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": mounts,
    }


def wait_container(spec: DocParserSpec, weights: Weights) -> dict[str, Any]:
    """Hold the pod until the fill Job has put the verified copy into the cache claim (its
    rename is atomic: the manifest appears last). Bounded by the fill Job's own deadline."""
    return {
        "name": naming.WAIT_CONTAINER,
        "image": spec.runtime.image,
        "imagePullPolicy": spec.runtime.image_pull_policy,
        "args": [
            "wait-weights",
            "--dir",
            naming.model_path(weights.version),
            "--timeout",
            str(WAIT_WEIGHTS_TIMEOUT_S),
        ],
        "resources": {
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"memory": "256Mi"},
        },
        "securityContext": container_security(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": "weights", "mountPath": naming.WEIGHTS_MOUNT, "readOnly": True}],
    }


def fill_pod_spec(spec: DocParserSpec, weights: Weights, claim: str) -> dict[str, Any]:
    """The pod of a weights cache fill Job: the fetch container writing into the claim, as
    the runtime's user, with the runtime pods' identity (IRSA / Workload Identity for s3://
    and gs://) and pull secrets; no GPU, so no GPU toleration or node selector."""
    pod = spec.pod
    out: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "securityContext": pod_security(),
        "containers": [fetch_container(spec, weights)],
        "volumes": [
            {"name": "tmp", "emptyDir": {"sizeLimit": sizing.TMP_VOLUME_LIMIT}},
            {"name": "weights", "persistentVolumeClaim": {"claimName": claim}},
        ],
    }
    if pod.service_account_name:
        out["serviceAccountName"] = pod.service_account_name
    if pod.image_pull_secrets:
        out["imagePullSecrets"] = [{"name": ref.name} for ref in pod.image_pull_secrets]
    if pod.tolerations:
        out["tolerations"] = [dict(t) for t in pod.tolerations]
    return out

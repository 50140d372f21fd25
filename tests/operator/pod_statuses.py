"""The pod statuses a kubelet writes for each misconfiguration the operator names (Degraded
reasons from core/status/diagnose.py), played through a pod's status subresource where no
kubelet runs. A helper, not a test module: test_diagnose.py (core/status/) and
test_gitops_verdicts.py (controller/) both patch them onto pods, and test modules never import
each other across folders."""

from __future__ import annotations

from typing import Any

from docparser_operator.api.naming import FETCH_CONTAINER, RUNTIME_CONTAINER

NOW = "2026-01-01T00:00:00Z"


def _ctr(name: str, state: dict[str, Any], last: dict[str, Any] | None = None) -> dict[str, Any]:
    out = {"name": name, "image": "x", "imageID": "", "ready": False, "restartCount": 1}
    return {**out, "state": state, **({"lastState": last} if last else {})}


FETCH_DONE = _ctr(FETCH_CONTAINER, {"terminated": {"exitCode": 0, "reason": "Completed"}})
POD_STATUSES = {
    "Unschedulable": {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                "lastTransitionTime": NOW,
            }
        ],
    },
    "CredentialsSecretMissing": {
        "phase": "Pending",
        "initContainerStatuses": [
            _ctr(
                FETCH_CONTAINER,
                {
                    "waiting": {
                        "reason": "CreateContainerConfigError",
                        "message": 'secret "s3-creds" not found',
                    }
                },
            )
        ],
    },
    "WeightsChecksumMismatch": {
        "phase": "Pending",
        "initContainerStatuses": [
            _ctr(
                FETCH_CONTAINER,
                {"waiting": {"reason": "CrashLoopBackOff"}},
                {"terminated": {"exitCode": 1, "message": "sha256 mismatch: expected aa, got bb"}},
            )
        ],
    },
    "FailedToLoad": {
        "phase": "Running",
        "initContainerStatuses": [FETCH_DONE],
        "containerStatuses": [
            _ctr(
                RUNTIME_CONTAINER,
                {"waiting": {"reason": "CrashLoopBackOff"}},
                {"terminated": {"exitCode": 1, "message": "serve: engine failed to load: CUDA"}},
            )
        ],
    },
}

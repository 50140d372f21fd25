"""The security context every docparser pod and container runs under (the runtime pods and
the weights cache fill Job alike): non-root as the image's user, no privilege escalation, no
capabilities, a read-only root filesystem, the runtime's default seccomp profile."""

from __future__ import annotations

from typing import Any

RUNTIME_UID = 10001


def pod_security() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUNTIME_UID,
        "runAsGroup": RUNTIME_UID,
        "fsGroup": RUNTIME_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUNTIME_UID,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }

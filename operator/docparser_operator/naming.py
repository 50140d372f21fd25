"""Names of every child object, shared by the renderers and the reconciler.

One place decides them so pruning, status lookups and renderers never disagree. All names
derive from the DocParser name (a DNS-1035 label of at most 56 characters, enforced by the
CRD), so the longest child name ``<name>-canary`` stays a valid Service name.
"""

from __future__ import annotations

from typing import Literal

Track = Literal["stable", "canary"]
TRACKS: tuple[Track, ...] = ("stable", "canary")

FIELD_MANAGER = "docparser-operator"
API_GROUP = "docparser.io"
API_VERSION = "docparser.io/v1alpha1"
KIND = "DocParser"
PLURAL = "docparsers"

HTTP_PORT = 8000
HTTP_PORT_NAME = "http"
WEIGHTS_MOUNT = "/models"


def endpoint_service(name: str) -> str:
    """The stable endpoint clients use: ``<name>`` (http://<name>.<ns>.svc:8000)."""
    return name


def track_service(name: str, track: Track) -> str:
    """Per-track Service (``<name>-stable`` / ``<name>-canary``), the HTTPRoute backends."""
    return f"{name}-{track}"


def deployment(name: str, track: Track) -> str:
    return f"{name}-{track}"


def hpa(name: str, track: Track) -> str:
    """One HPA per track Deployment, same name as the Deployment it scales."""
    return deployment(name, track)


def pdb(name: str) -> str:
    """One PodDisruptionBudget over all runtime pods of the DocParser."""
    return name


def httproute(name: str) -> str:
    return name


def endpoint_url(name: str, namespace: str) -> str:
    """What status.endpoint reports."""
    return f"http://{endpoint_service(name)}.{namespace}.svc:{HTTP_PORT}"


def model_path(version: str) -> str:
    """Where a track's weights land inside the pod."""
    return f"{WEIGHTS_MOUNT}/{version}"

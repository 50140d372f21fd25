"""Names of every child object, shared by the renderers and the reconciler.

One place decides them so pruning, status lookups and renderers never disagree. All names
derive from the DocParser name (a DNS-1035 label of at most 56 characters, enforced by the
CRD), so the longest child names ``<name>-canary`` and ``<name>-<6-hex revision>`` stay valid
Service names.
"""

from __future__ import annotations

from typing import Literal

Track = Literal["stable", "canary"]  # the roles a revision plays
TRACKS: tuple[Track, ...] = ("stable", "canary")
REVISION_CHARS = 6

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


def canary_service(name: str) -> str:
    """The canary role's Service (``<name>-canary``): reach a dark canary directly."""
    return f"{name}-canary"


def revision_name(name: str, revision: str) -> str:
    """Deployment (and, with router gateway, backend Service) of one revision.

    A revision is 6 hex characters, so ``<name>-<revision>`` fits a 63-character label."""
    return f"{name}-{revision}"


def hpa(name: str) -> str:
    """The one HPA of a DocParser; it scales the DocParser itself (the scale subresource)."""
    return name


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

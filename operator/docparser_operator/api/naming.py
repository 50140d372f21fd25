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

FIELD_MANAGER = "docparser-operator"  # the operator's server-side applies (children, status)
CLI_FIELD_MANAGER = "docparser-cli"  # the person's spec edits through promote / abort / resume
API_GROUP = "docparser.io"
API_VERSION = "docparser.io/v1alpha1"
KIND = "DocParser"
PLURAL = "docparsers"

# Runtime settings the operator renders from the spec; spec.pod.env must not set them (the
# spec field is the one place to change each; a duplicate env name is also an apply error).
OPERATOR_ENV = frozenset(
    {
        "DOCPARSER_ENGINE",
        "DOCPARSER_HOST",
        "DOCPARSER_PORT",
        "DOCPARSER_MODEL_PATH",
        "DOCPARSER_MAX_BATCH_SIZE",
        "DOCPARSER_DEFAULT_MAX_NEW_TOKENS",
        "DOCPARSER_MAX_NEW_TOKENS_LIMIT",
        "DOCPARSER_DEFAULT_TIER",
        "DOCPARSER_MAX_TIER",
        "DOCPARSER_MODEL_VERSION",
        "DOCPARSER_DEVICE",
        "DOCPARSER_DRAIN_GRACE_S",
        "DOCPARSER_DRAIN_TIMEOUT_S",
        "DOCPARSER_WEIGHTS_SHA256",
        "DOCPARSER_API_KEYS_FILE",
        "DOCPARSER_REDIS_URL",
        "DOCPARSER_REDIS_PREFIX",
        "DOCPARSER_REVISION",
        "DOCPARSER_SHADOW_CONFIG_FILE",
        "DOCPARSER_INTERNAL_TOKEN_FILE",
        "DOCPARSER_ADMIN_KEY_FILE",
        "DOCPARSER_ROLE",
        "DOCPARSER_FRONT_BACKEND_URL",
        "DOCPARSER_FRONT_HOLD_SECONDS",
        "DOCPARSER_FRONT_RETRY_AFTER_SECONDS",
        "HOME",
        "HF_HOME",
        "HF_HUB_OFFLINE",
    }
)
# Pod labels the operator owns (selectors and roles): spec.pod.labels must not set them.
RESERVED_LABEL_PREFIX = "docparser.io/"
RESERVED_LABELS = frozenset(
    {
        "app.kubernetes.io/name",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/managed-by",
        "app.kubernetes.io/component",
    }
)

# Container names: the renderers name them, status and diagnosis find them by these names.
RUNTIME_CONTAINER = "runtime"
FETCH_CONTAINER = "fetch-weights"  # init: fetches and verifies the weights into the pod
WAIT_CONTAINER = "wait-weights"  # init, with the weights cache: waits for the fill Job

HTTP_PORT = 8000
HTTP_PORT_NAME = "http"
WEIGHTS_MOUNT = "/models"
# Shadow canary (docs/operations.md): where every runtime pod finds the shadow configuration,
# the internal credential of the mirror path and the admin key (the runtime's defaults).
SHADOW_CONFIG_DIR = "/etc/docparser/shadow"
SHADOW_CONFIG_KEY = "config.json"
INTERNAL_TOKEN_DIR = "/var/run/secrets/docparser/internal"
INTERNAL_TOKEN_KEY = "token"
ADMIN_KEY_DIR = "/var/run/secrets/docparser/admin"
ADMIN_KEY_FILE = "admin-key"


def endpoint_service(name: str) -> str:
    """The stable endpoint clients use: ``<name>`` (http://<name>.<ns>.svc:8000)."""
    return name


def canary_service(name: str) -> str:
    """The canary role's Service (``<name>-canary``): reach a dark canary directly."""
    return f"{name}-canary"


def shadow_config(name: str) -> str:
    """The ConfigMap every runtime pod mounts: whether and where stable's pods mirror."""
    return f"{name}-shadow"


def internal_secret(name: str) -> str:
    """The Secret holding the token of the mirror path (created once, never read by us)."""
    return f"{name}-internal"


def front(name: str) -> str:
    """The front of a DocParser that scales to zero (``replicas.min: 0``): its Deployment
    and Service ``<name>-front``, a CPU pod of the runtime image that takes requests at 0."""
    return f"{name}-front"


def batch_pool(name: str) -> str:
    """``<name>-batch``: the Deployment of the batch pool (``spec.batch``), the stable
    revision's pods that take batch lines only."""
    return f"{name}-batch"


def serving_service(name: str) -> str:
    """``<name>-serving``: every runtime (GPU) pod of the DocParser, never the front: where the
    front hands held requests over (DOCPARSER_FRONT_BACKEND_URL). Its name is one character
    longer than ``<name>-canary``, hence the 55-character name rule with ``replicas.min: 0``."""
    return f"{name}-serving"


def service_url(service: str, namespace: str) -> str:
    return f"http://{service}.{namespace}.svc:{HTTP_PORT}"


def weights_cache(name: str, sha256: str) -> str:
    """The cache claim and fill Job of one weights version: ``<name>-weights-<sha256[:12]>``.

    The DocParser part is cut to keep 63 characters (a Job's name is a label value on its
    pods); two DocParsers alike in their first 42 characters would meet as a ChildConflict."""
    suffix = f"-weights-{sha256[:12]}"
    return name[: 63 - len(suffix)] + suffix


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


def network_policy(name: str) -> str:
    """Ingress rules of all runtime pods of the DocParser (with ``traffic.allowFrom``)."""
    return name


def httproute(name: str) -> str:
    return name


def redis_prefix(namespace: str, name: str) -> str:
    """Prefix of every Redis key of one DocParser (jobs, idempotency keys, cached results)."""
    return f"docparser:{namespace}:{name}:"


def endpoint_url(name: str, namespace: str) -> str:
    """What status.endpoint reports."""
    return service_url(endpoint_service(name), namespace)


def model_path(version: str) -> str:
    """Where a track's weights land inside the pod."""
    return f"{WEIGHTS_MOUNT}/{version}"

"""Every API kind the operator touches, in one table: where it lives, and what we do with it.

Why one table: the API client's paths, the children a pass reads and owns, the watch-backed
indexes, the deletions that trigger the owner's pass, the startup permission check and the
chart's ClusterRole all follow from the same facts. When they were five lists, adding a kind
took five edits and missing one failed silently (a child never read back, a forbidden watch
that hangs kopf). The chart's ClusterRole is YAML, so a test holds it to ``verbs`` here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from docparser_operator.api import naming

# How a kind's changes reach the operator: every change ("changes": a Deployment's rollout, a
# fill Job's end, an HTTPRoute's verdict), only its deletion ("deletion": put a removed child
# back now, not at the next resync; its other changes are ours, or drift the resync fixes),
# runtime "pods" (their own handler, status now), or not watched at all.
Watch = Literal["changes", "deletion", "pods", "none"]
CHILD_VERBS = ("get", "list", "watch", "create", "patch", "delete")


@dataclass(frozen=True)
class ResourceRef:
    """Where a kind lives in the API (group/version prefix, plural, scope) and our use of it."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool = True
    child: bool = False  # rendered, applied and owned by a DocParser (read back every pass)
    indexed: bool = False  # read from a watch-backed kopf index (kube/observer.py)
    watch: Watch = "none"
    verbs: tuple[str, ...] = ()  # what the chart's ClusterRole must grant on it
    # A child read by name (a get, trusted for a while: kube/observer.py), not from a watch,
    # for a kind the operator must not list cluster-wide (ConfigMaps): DocParser name -> name.
    named: Callable[[str], str] | None = None
    # Of a child read by name: whether this content (None: no such object) is inert, so a
    # drift in it changes nothing the operator cares about and it need not be read again at
    # rest (kube/observer.py).
    inert: Callable[[dict[str, Any] | None], bool] | None = None

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def path(self, namespace: str | None = None, name: str | None = None, sub: str = "") -> str:
        prefix = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        parts = [prefix]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name:
            parts.append(name)
        if sub:
            parts.append(sub)
        return "/".join(parts)


def _shadow_off(config_map: dict[str, Any] | None) -> bool:
    """A shadow ConfigMap that mirrors nothing, or none at all (a DocParser that never had a
    shadow): the runtime reads a missing or edited one as off too, so at rest it is never
    worth a request to check it."""
    if config_map is None:
        return True
    try:
        config = json.loads((config_map.get("data") or {}).get(naming.SHADOW_CONFIG_KEY, ""))
    except ValueError:
        return False
    return isinstance(config, dict) and config.get("enabled") is False


def _child(api_version: str, kind: str, plural: str, watch: Watch) -> ResourceRef:
    return ResourceRef(
        api_version, kind, plural, child=True, indexed=True, watch=watch, verbs=CHILD_VERBS
    )


KINDS: tuple[ResourceRef, ...] = (
    ResourceRef(
        "docparser.io/v1alpha1", "DocParser", "docparsers", verbs=("get", "list", "watch", "patch")
    ),
    _child("apps/v1", "Deployment", "deployments", "changes"),
    _child("v1", "Service", "services", "deletion"),
    _child("autoscaling/v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", "deletion"),
    _child("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", "deletion"),
    _child("gateway.networking.k8s.io/v1", "HTTPRoute", "httproutes", "changes"),  # verdicts
    _child("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", "deletion"),
    _child("v1", "PersistentVolumeClaim", "persistentvolumeclaims", "deletion"),
    _child("batch/v1", "Job", "jobs", "changes"),
    ResourceRef("v1", "Pod", "pods", indexed=True, watch="pods", verbs=("get", "list", "watch")),
    # Which pods our Deployments made (the ownerReferences uid chain, core/plan/children.py): only
    # theirs have their /metrics read. Indexed (metadata only), never written.
    ResourceRef(
        "apps/v1", "ReplicaSet", "replicasets", indexed=True, verbs=("get", "list", "watch")
    ),
    ResourceRef("v1", "Event", "events", verbs=("create", "patch")),
    ResourceRef("v1", "Namespace", "namespaces", namespaced=False, verbs=("get", "list", "watch")),
    # cordon state of the nodes our pods run on (kube/nodes.py polls the cordoned ones)
    ResourceRef("v1", "Node", "nodes", namespaced=False, verbs=("get", "list", "watch")),
    # The shadow's <name>-shadow, read by name (never listed or watched: other ConfigMaps are
    # not ours to read), and golden.configMapRef (get only).
    ResourceRef(
        "v1", "ConfigMap", "configmaps", child=True, verbs=("get", "create", "patch"),
        named=naming.shadow_config, inert=_shadow_off,
    ),
    # Never read by the operator: it creates <name>-internal once (controller/credential.py).
    ResourceRef("v1", "Secret", "secrets", verbs=("create",)),
    ResourceRef("v1", "ServiceAccount", "serviceaccounts"),
)  # fmt: skip
KNOWN_KINDS: dict[str, ResourceRef] = {r.kind: r for r in KINDS}
DOCPARSER = KNOWN_KINDS["DocParser"]
CHILD_KINDS: tuple[str, ...] = tuple(r.kind for r in KINDS if r.child)
LISTED_CHILD_KINDS: tuple[str, ...] = tuple(r.kind for r in KINDS if r.child and not r.named)
NAMED_CHILDREN: tuple[ResourceRef, ...] = tuple(r for r in KINDS if r.child and r.named)
INDEXED: tuple[ResourceRef, ...] = tuple(r for r in KINDS if r.indexed)


def ref_for(obj_or_kind: dict[str, Any] | str) -> ResourceRef:
    """The ResourceRef of an object (by its kind) or of a kind name."""
    kind = obj_or_kind if isinstance(obj_or_kind, str) else obj_or_kind["kind"]
    try:
        return KNOWN_KINDS[kind]
    except KeyError:
        raise ValueError(f"the operator does not know where kind {kind!r} lives") from None

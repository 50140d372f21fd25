"""Shared helpers of the operator scenario tests: manifests, user actions, convergence checks.

Everything here talks to the `cluster` fixture's API only, so the same helpers serve the
emulator and real API servers.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import pydantic
from docparser_operator.api.kinds import DOCPARSER, KNOWN_KINDS
from docparser_operator.api.models import DocParser, ObjectMeta
from docparser_operator.cli.main import render_resource
from docparser_operator.core.decide import Decision, decide, invalid
from docparser_operator.core.plan.children import Observed
from docparser_operator.core.render import roles_of
from kube_cluster import Cluster

DEPLOY = KNOWN_KINDS["Deployment"]
SERVICE = KNOWN_KINDS["Service"]
HPA = KNOWN_KINDS["HorizontalPodAutoscaler"]
PDB = KNOWN_KINDS["PodDisruptionBudget"]
ROUTE = KNOWN_KINDS["HTTPRoute"]
SHA_A = "a" * 64
SHA_B = "b" * 64
SHA_C = "c" * 64


def docparser(name: str, **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "engine": "deepseek-ocr2",
        "weights": {"uri": "s3://models/deepseek-ocr-2", "version": "2026-01-27", "sha256": SHA_A},
        "tier": 2,
        "replicas": {"min": 1, "max": 1},
        "resources": {"gpu": 1, "gpuMemory": "80Gi"},
        "runtime": {"image": "ghcr.io/example/docparser-runtime:0.1.0"},
        "traffic": {"router": "service"},
    }
    base.update(spec)
    return {
        "apiVersion": "docparser.io/v1alpha1",
        "kind": "DocParser",
        "metadata": {"name": name},
        "spec": base,
    }


def owner(resource: dict[str, Any]) -> ObjectMeta:
    """The parsed metadata of a DocParser manifest (what ``prepare`` stamps ownership from)."""
    return DocParser.from_resource(resource).metadata


def decide_on(resource: dict[str, Any], observed: Observed, **kwargs: Any) -> Decision:
    """``decide`` as a pass calls it: the manifest parsed once, its revisions rendered once
    (one that does not parse: the pass's SpecInvalid decision, core/decide.invalid)."""
    try:
        model = DocParser.from_resource(resource)
    except pydantic.ValidationError as exc:
        return invalid(exc)
    return decide(model, roles_of(model), observed, **kwargs)


def create(cluster: Cluster, obj: dict[str, Any]) -> dict[str, Any]:
    """Create as a user would: DocParsers by server-side apply (a GitOps tool's manager, so a
    later apply without a field removes it), other objects with a plain POST."""
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = cluster.namespace
    if obj["kind"] == "DocParser":
        return cluster.client.apply(obj, manager="gitops")
    return cluster.client.create(obj)


def set_spec(cluster: Cluster, name: str, spec: dict[str, Any]) -> None:
    """Replace the whole spec, as `kubectl apply` of an edited manifest (or a git revert) does."""
    cluster.client.apply(
        {
            "apiVersion": "docparser.io/v1alpha1",
            "kind": "DocParser",
            "metadata": {"name": name, "namespace": cluster.namespace},
            "spec": spec,
        },
        manager="gitops",
    )


def condition(cluster: Cluster, name: str, ctype: str) -> dict[str, Any]:
    obj = cluster.get(DOCPARSER, name) or {}
    conds = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == ctype), {})


GATEWAY = {"router": "gateway", "gatewayRef": {"name": "web", "namespace": "infra"}}
CANARY_WEIGHTS = {
    "uri": "s3://models/deepseek-ocr-2-next",
    "version": "2026-03-01",
    "sha256": SHA_B,
}
EVENT = KNOWN_KINDS["Event"]


def spec_of(cluster: Cluster, name: str) -> dict[str, Any]:
    return copy.deepcopy(cluster.get(DOCPARSER, name)["spec"])


def covers(live: Any, want: Any) -> bool:
    """``live`` holds every value of ``want`` (the server may add defaults)."""
    if isinstance(want, dict):
        return isinstance(live, dict) and all(covers(live.get(k), v) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(live, list) and len(live) == len(want) and all(map(covers, live, want))
    return live == want or (
        isinstance(live, str) and not isinstance(want, bool) and live == str(want)
    )


def revision_in(resource: dict[str, Any], role: str = "stable") -> str | None:
    """The revision (pod template hash) a DocParser manifest asks for in ``role`` (None for
    a spec the operator cannot serve)."""
    try:
        tracks = roles_of(DocParser.from_resource(resource))
    except pydantic.ValidationError:
        return None
    return next((t.revision for t in tracks if t.role == role), None)


def revision(cluster: Cluster, name: str, role: str = "stable") -> str | None:
    """The revision the live spec asks for in ``role``."""
    dp = cluster.get(DOCPARSER, name)
    return revision_in(dp, role) if dp is not None else None


def dep_name(cluster: Cluster, name: str, role: str = "stable") -> str:
    """Name of the Deployment of the spec's revision for ``role`` (``<name>-<revision>``)."""
    rev = revision(cluster, name, role)
    assert rev is not None, f"the spec of {name} has no {role} revision"
    return f"{name}-{rev}"


def role_deployment(cluster: Cluster, name: str, role: str = "stable") -> dict[str, Any] | None:
    rev = revision(cluster, name, role)
    return cluster.get(DEPLOY, f"{name}-{rev}") if rev else None


def converged(cluster: Cluster, name: str) -> bool:
    """Every child the renderer wants for the live spec (settled) is live with those values,
    and the children labelled for this instance are exactly those, plus previous revisions'
    Deployments kept at 0 replicas for a rollback."""
    dp = cluster.get(DOCPARSER, name)
    if dp is None or (dp.get("status") or {}).get("observedGeneration") != dp["metadata"].get(
        "generation", 1
    ):
        return False
    canary = role_deployment(cluster, name, "canary")
    ready = bool(canary and (canary.get("status") or {}).get("readyReplicas"))
    wanted = render_resource(dp, canary_ready=ready)
    for child in wanted:
        live = cluster.get(KNOWN_KINDS[child["kind"]], child["metadata"]["name"])
        body = "spec" if "spec" in child else "data"  # the shadow's ConfigMap has data
        if live is None or not covers(live[body], child[body]):
            return False
    selector = f"app.kubernetes.io/instance={name},app.kubernetes.io/managed-by=docparser-operator"
    live_keys = {
        (kind, o["metadata"]["name"])
        for kind in (
            "Deployment",
            "Service",
            "HorizontalPodAutoscaler",
            "PodDisruptionBudget",
            "HTTPRoute",
            "NetworkPolicy",
        )
        for o in cluster.list(KNOWN_KINDS[kind], selector)
        if any(
            r.get("uid") == dp["metadata"]["uid"]
            for r in o["metadata"].get("ownerReferences") or []
        )
        and not (kind == "Deployment" and o["spec"].get("replicas") == 0)
    }
    # The listed kinds (the shadow's ConfigMap is checked above: it is never listed).
    wanted_keys = {(c["kind"], c["metadata"]["name"]) for c in wanted if c["kind"] != "ConfigMap"}
    wanted_keys -= {
        ("Deployment", c["metadata"]["name"])
        for c in wanted
        if c["kind"] == "Deployment" and c["spec"]["replicas"] == 0
    }
    return live_keys == wanted_keys


def route_weights(cluster: Cluster, name: str) -> dict[str, int]:
    """HTTPRoute backend weights by role: the spec's stable and canary revisions, and
    ``previous`` for any other revision still weighted."""
    route = cluster.get(ROUTE, name) or {"spec": {"rules": [{"backendRefs": []}]}}
    roles = {f"{name}-{revision(cluster, name, r)}": r for r in ("stable", "canary")}
    out: dict[str, int] = {}
    for backend in route["spec"]["rules"][0]["backendRefs"]:
        role = roles.get(backend["name"], "previous")
        out[role] = out.get(role, 0) + backend.get("weight", 1)
    return out


def event_reasons(cluster: Cluster, name: str) -> set[str]:
    return {
        e["reason"]
        for e in cluster.list(EVENT)
        if e.get("involvedObject", {}).get("name") == name
        and e.get("source", {}).get("component") == "docparser-operator"
    }


def quiet(cluster: Cluster, seconds: float = 1.5, timeout: float = 20) -> None:
    """Wait until the cluster's controllers settled and nobody but the test has written for
    ``seconds`` (the operator reacts to what the controllers did, so settle first)."""
    cluster.settle(timeout=timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        mark = cluster.mark()
        time.sleep(seconds)
        if not cluster.writes_since(mark):
            return
    raise AssertionError(f"the operator never stopped writing: {cluster.writes_since(mark)}")


def scale_to(cluster: Cluster, name: str, replicas: int) -> None:
    """Set the DocParser's size as an autoscaler does: through the scale subresource on a
    real API server; the emulator has none, so the field it maps to, as another manager."""
    if cluster.backend == "emulator":
        path = DOCPARSER.path(cluster.namespace, name)
        body: dict[str, Any] = {"spec": {"replicas": {"desired": replicas}}}
    else:
        path = DOCPARSER.path(cluster.namespace, name, "scale")
        body = {"spec": {"replicas": replicas}}
    cluster.client.request("PATCH", path, body=body, content_type="application/merge-patch+json")

"""Pure renderers: a typed DocParser -> desired child objects (no cluster access).

``render_all`` is what ``docparser-operator render`` calls (the plan at rest; cli/main.py
parses the raw resource, core never does); the reconciler
renders ``render_target`` of the step its rollout planner chose. The order is stable (the weights
cache claims and fill Jobs; the shadow ConfigMap where a shadow was ever configured; per spec
revision: Deployment, revision Service; then the canary Service, the endpoint Service, the
front's Deployment and Services with ``replicas.min: 0``, the HPA, the PDB, the HTTPRoute, the
NetworkPolicy and the batch pool of ``spec.batch``) so golden files and apply batches never
reorder. The shadow's internal token Secret is not rendered here:
the controller creates it once with random bytes (controller/credential.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from docparser_operator.api.models import DocParser
from docparser_operator.core.plan.target import (
    RoleRevision,
    Target,
    revision_of,
    spec_tracks,
    target_at_rest,
)
from docparser_operator.core.render.batch_pool import render_batch_pool
from docparser_operator.core.render.deployment import pod_template, render_deployment
from docparser_operator.core.render.front import render_front
from docparser_operator.core.render.hpa import render_hpa
from docparser_operator.core.render.httproute import backend_weights, render_httproute
from docparser_operator.core.render.networkpolicy import render_network_policy
from docparser_operator.core.render.pdb import render_pdb
from docparser_operator.core.render.service import (
    render_canary_service,
    render_endpoint_service,
    render_front_service,
    render_revision_service,
    render_serving_service,
)
from docparser_operator.core.render.shadow import render_shadow_config
from docparser_operator.core.render.shadow import wanted as shadow_config_wanted
from docparser_operator.core.render.weights_cache import render_weights_cache

__all__ = ["RoleRevision", "Target", "render_all", "render_target", "roles_of"]


def roles_of(resource: DocParser) -> tuple[RoleRevision, ...]:
    """The spec's tracks with their pod templates and revisions (each template's hash): the
    one rendering of the templates in a pass; every later reader takes them from here."""
    out = []
    for tp in spec_tracks(resource):
        template = pod_template(resource, tp)
        out.append(replace(tp, revision=revision_of(template), template=template))
    return tuple(out)


def render_target(plan: Target) -> list[dict[str, Any]]:
    gateway = plan.resource.spec.traffic.router == "gateway"
    children: list[dict[str, Any]] = render_weights_cache(plan)
    if shadow_config_wanted(plan):  # before the pods that mount it
        children.append(render_shadow_config(plan))
    for tp in plan.roles:
        children.append(render_deployment(plan, tp))
    if gateway:
        for revision in backend_weights(plan):
            children.append(render_revision_service(plan, revision))
    canary = plan.role("canary")
    if canary is not None:
        children.append(render_canary_service(plan, canary.revision))
    children.append(render_endpoint_service(plan))
    if plan.scales_to_zero:
        children += [render_front(plan), render_front_service(plan), render_serving_service(plan)]
    if plan.resource.spec.autoscaled and plan.awake:  # an HPA has no pod to read at zero
        children.append(render_hpa(plan))
    children.append(render_pdb(plan))
    if gateway:
        children.append(render_httproute(plan))
    if plan.resource.spec.traffic.allow_from is not None:
        children.append(render_network_policy(plan))
    if plan.resource.spec.batch is not None:  # last: DocParsers without it render as before
        children.append(render_batch_pool(plan))
    return children


def render_all(
    model: DocParser, *, canary_ready: bool = True, idle: bool = False
) -> list[dict[str, Any]]:
    """Every child of ``model`` once settled; ``canary_ready=False``: before the canary's
    pods are Ready (all traffic on stable); ``idle``: at zero (``replicas.min: 0``)."""
    if idle and model.spec.replicas.idle_policy is None:
        raise ValueError("only a DocParser with replicas.min 0 goes idle")
    plan = target_at_rest(model, roles_of(model), canary_ready=canary_ready, idle=idle)
    return render_target(plan)

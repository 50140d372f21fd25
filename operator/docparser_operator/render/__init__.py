"""Pure renderers: DocParser resource dict -> desired child objects (no cluster access).

``render_all`` is what both the reconciler and ``docparser-operator render`` call; its order
is stable (per track: Deployment, Service, HPA; then the endpoint Service, the PDB and the
HTTPRoute) so golden files and server-side apply batches never reorder.
"""

from __future__ import annotations

from docparser_operator.models import DocParser
from docparser_operator.render.deployment import render_deployment
from docparser_operator.render.hpa import render_hpa
from docparser_operator.render.httproute import render_httproute
from docparser_operator.render.pdb import render_pdb
from docparser_operator.render.plan import Plan, build_plan
from docparser_operator.render.service import render_endpoint_service, render_track_service

__all__ = ["build_plan", "plan_for", "render_all", "render_plan"]


def plan_for(resource: dict, *, canary_ready: bool = True) -> Plan:
    """Validate ``resource`` (pydantic.ValidationError on a bad spec) and plan its tracks."""
    return build_plan(DocParser.from_resource(resource), canary_ready=canary_ready)


def render_plan(plan: Plan) -> list[dict]:
    children: list[dict] = []
    for tp in plan.tracks:
        children.append(render_deployment(plan, tp))
        children.append(render_track_service(plan, tp))
        if tp.autoscaled:
            children.append(render_hpa(plan, tp))
    children.append(render_endpoint_service(plan))
    children.append(render_pdb(plan))
    if plan.resource.spec.traffic.router == "gateway":
        children.append(render_httproute(plan))
    return children


def render_all(resource: dict, *, canary_ready: bool = True) -> list[dict]:
    """Every desired child of ``resource``; ``canary_ready=False`` routes 100% to stable."""
    return render_plan(plan_for(resource, canary_ready=canary_ready))

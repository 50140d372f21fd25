"""The per-pass steps of the features that read more than the API: where the canary analysis
continues from, and scale to zero's reading and decision.

Kept beside controller/reconcile.py, which calls them with what it parsed and rendered once
per pass (the typed DocParser, its revisions with their pod templates, the open schedule
window), so none of them parses the resource or renders a template again; controller/
wakeups.py calls ``idle_step`` between passes with the same inputs. For a spec that does not
parse, the schedule's window is read from the raw resource here (``resource_schedule``).
"""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pydantic

from docparser_operator.analysis import walk as analysis_module
from docparser_operator.api import naming
from docparser_operator.api.kinds import ref_for
from docparser_operator.api.models import DocParser
from docparser_operator.api.replicas import Replicas
from docparser_operator.core.plan.children import (
    Observed,
    ReadablePods,
    owned_by,
    readable_pods,
    revision_states,
)
from docparser_operator.core.plan.idle import IdleMemory, IdleStep, decide_idle, epoch
from docparser_operator.core.plan.schedule import ScheduleStep, schedule_step
from docparser_operator.core.render import RoleRevision, roles_of
from docparser_operator.kube.client import KubeClient
from docparser_operator.providers import analysis_run, golden
from docparser_operator.providers import sources as analysis_sources
from docparser_operator.providers.activity import ActivitySource
from docparser_operator.providers.base import SourceUnavailable
from docparser_operator.providers.pods import Skipped


def analysis_begin(
    model: DocParser, roles: tuple[RoleRevision, ...] | None = None
) -> analysis_module.AnalysisState | None:
    """The canary analysis' state to plan with, continued from the parsed status (None without
    an analysis). ``roles``: the pass's revisions (rendered once); rendered here only when the
    DocParser has an analysis and the caller has none (a reading between passes)."""
    canary = model.spec.canary
    if canary is None or canary.analysis is None:
        return None
    rendered = roles if roles is not None else roles_of(model)
    revisions: dict[str, str] = {t.role: t.revision for t in rendered}
    return analysis_run.begin(model, revisions)


def idle_step(
    model: DocParser,
    walk: analysis_module.AnalysisState | None,
    schedule: ScheduleStep | None,
    observed: Observed,
    memory: IdleMemory,
    activity: ActivitySource | None,
    *,
    now: str,
    poll_s: float,
    skipped: Skipped | None = None,
) -> IdleStep | None:
    """Scale to zero's decision for this pass (None unless ``replicas.min: 0``): read the
    front's and the pods' /metrics when a reading is due (those of the DocParser's own
    ReplicaSets only), then decide (core/plan/idle.py). ``model``: the parsed DocParser, raised by
    the open schedule window or not (a floor above 0 keeps it awake either way: raised, it has
    no idle policy; as stored, ``schedule`` says so); ``walk``: the analysis this pass
    continues. Also what a reading between passes decides (controller/wakeups.py)."""
    uid = model.metadata.uid or ""
    if schedule is not None and schedule.floor > model.spec.replicas.min:
        return None  # an open window's floor keeps it awake: not one that sleeps meanwhile
    if model.spec.replicas.idle_policy is None:
        memory.seen.pop(uid, None)
        return None
    seen = memory.of(uid)
    at = epoch(now)
    if seen.due(at, poll_s):
        source = activity or analysis_sources.activity()
        readable = readable_of(observed, uid, skipped)
        try:
            seen.record(source.read(readable.front, readable.pods), at)
        except SourceUnavailable as exc:
            seen.failed(str(exc), at)
    front = observed.children.get(("Deployment", naming.front(model.metadata.name))) or {}
    front_ok = owned_by(front, uid) and bool((front.get("status") or {}).get("readyReplicas"))
    return decide_idle(
        model.spec,
        model.status.scale_to_zero if model.status is not None else None,
        seen,
        ready=sum(s.ready for s in revision_states(observed, uid)),
        front_ready=front_ok,
        analysis_running=walk is not None and walk.phase in ("Verifying", "Progressing"),
        now=now,
        poll_s=poll_s,
    )


def readable_of(observed: Observed, uid: str, skipped: Skipped | None) -> ReadablePods:
    """The pods a reading may dial (core/plan/children.readable_pods); the labelled pods it may
    not are counted as ``not_owned`` and never dialled."""
    readable = readable_pods(observed, uid)
    if readable.not_owned and skipped is not None:
        skipped("not_owned", readable.not_owned)
    return readable


def golden_documents(client: KubeClient, namespace: str, name: str) -> golden.Documents:
    """The golden set of ``spec.canary.analysis.golden.configMapRef``: the one API read the
    analysis needs, done here so the analysis package never holds the API client."""
    config_map = client.get(ref_for("ConfigMap"), namespace, name)
    if config_map is None:
        raise golden.GoldenUnavailable(f"ConfigMap {name} not found")
    return golden.documents_of(config_map)


def raised(resource: dict[str, Any], step: ScheduleStep | None) -> dict[str, Any]:
    """``resource`` as a pass reads it (``raised_model`` for the raw resource, as the render
    command and tests hold it): ``spec.replicas.min``/``max`` raised to the open windows' (a
    copy; the DocParser itself is never written). Unchanged without a window."""
    if step is None:
        return resource
    replicas = (resource.get("spec") or {}).get("replicas") or {}
    if replicas.get("min", 1) == step.floor and replicas.get("max", 1) == step.ceiling:
        return resource
    out = copy.deepcopy(resource)
    out["spec"]["replicas"] = {**replicas, "min": step.floor, "max": step.ceiling}
    return out


def resource_schedule(resource: dict[str, Any], now: datetime.datetime) -> ScheduleStep | None:
    """``schedule_step`` of a DocParser as read from the API, for a pass whose spec does not
    parse (its window still shows in status); None when its replicas do not validate either
    (the pass reports SpecInvalid from the whole spec, core/decide.py). Here, not in core:
    below the controller only the typed DocParser is read."""
    spec = resource.get("spec") or {}
    if not isinstance(spec, dict) or not spec.get("replicas"):
        return None
    try:
        replicas = Replicas.model_validate(spec["replicas"])
    except pydantic.ValidationError:
        return None
    return schedule_step(replicas, now)

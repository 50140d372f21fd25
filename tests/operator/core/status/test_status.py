"""Unit tests of core/status/conditions.py: model states from pods, conditions, kstatus shape,
transitions."""

from __future__ import annotations

from pathlib import Path
from typing import get_args, get_origin

import pytest
from docparser_operator.api.status_models import (
    SECTIONS,
    AnalysisStatus,
    DocParserStatus,
    DrainStatus,
    ScaleToZeroStatus,
    ShadowStatus,
)
from docparser_operator.api.wire import WireModel
from docparser_operator.core.status.conditions import (
    DOWNLOADING,
    FAILED,
    LOADED,
    LOADING,
    PENDING,
    Problem,
    RoleView,
    TrackObservation,
    build_status,
    deployment_facts,
    pod_model_state,
    track_state,
)
from docparser_operator.core.status.status_patch import merged, status_changed, status_write
from kube_cluster import pod_status

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def pod(state: str, name: str = "p") -> dict:
    return {"metadata": {"name": name}, "status": pod_status(state)}


def deployment(
    *, want: int = 1, ready: int = 0, generation: int = 1, observed: int = 1, extra=None
) -> dict:
    status = {
        "observedGeneration": observed,
        "replicas": want,
        "updatedReplicas": want,
        "readyReplicas": ready,
    }
    status.update(extra or {})
    return {"metadata": {"generation": generation}, "spec": {"replicas": want}, "status": status}


@pytest.mark.parametrize(
    ("state", "expected"),
    [("ready", LOADED), ("loading", LOADING), ("downloading", DOWNLOADING), ("failed", FAILED)],
)
def test_pod_model_state(state: str, expected: str) -> None:
    assert pod_model_state(pod(state))[0] == expected


def test_crash_looping_runtime_is_failed_to_load() -> None:
    p = pod("loading")
    p["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
    state, message = pod_model_state(p)
    assert state == FAILED and "CrashLoopBackOff" in message


def test_pod_without_statuses_is_pending() -> None:
    assert (
        pod_model_state({"metadata": {"name": "x"}, "status": {"phase": "Pending"}})[0] == PENDING
    )


def _view(obs: TrackObservation | None, revision: str) -> RoleView | None:
    if obs is None:
        return None
    return RoleView(revision, obs.version, deployment_facts(obs.deployment).ready, obs)


def status(
    stable: TrackObservation | None,
    canary: TrackObservation | None = None,
    *,
    problems=(),
    previous=None,
    now=T0,
    weight=0,
    generation=2,
    rolling=None,
    min_ready=1,
    **sections,
) -> dict:
    """build_status with what reconcile derives from its rollout step: by default a role
    whose pods are not all loaded is still rolling out, and Ready pods behind traffic are
    stable's plus the canary's once it has a weight."""
    views = {"stable": _view(stable, "aaaaaa"), "canary": _view(canary, "bbbbbb")}
    if rolling is None:
        rolling = [
            f"{role}: {track_state(v.observation).message}"
            for role, v in views.items()
            if v is not None and track_state(v.observation).state != LOADED
        ]
    serving = (views["stable"].ready if views["stable"] else 0) + (
        views["canary"].ready if views["canary"] and weight else 0
    )
    return build_status(
        name="inv",
        namespace="ocr",
        generation=generation,
        stable=views["stable"],
        canary=views["canary"],
        routed_weight=weight,
        requested_weight=weight,
        ready_serving=serving,
        min_ready=min_ready,
        rolling=rolling,
        problems=list(problems),
        previous=DocParserStatus.model_validate(previous) if previous is not None else None,
        now=now,
        selector="app.kubernetes.io/instance=inv,app.kubernetes.io/name=docparser",
        **typed_sections(sections),
    ).to_wire()


def typed_sections(sections: dict) -> dict:
    """The sections as build_status takes them: status.drains as its model's entries."""
    if sections.get("analysis") is not None:
        sections = {**sections, "analysis": AnalysisStatus.model_validate(sections["analysis"])}
    if sections.get("scale_to_zero") is not None:
        typed = ScaleToZeroStatus.model_validate(sections["scale_to_zero"])
        sections = {**sections, "scale_to_zero": typed}
    if sections.get("drains") is not None:
        sections = {
            **sections,
            "drains": [DrainStatus.model_validate(d) for d in sections["drains"]],
        }
    return sections


def conditions(st: dict) -> dict[str, dict]:
    return {c["type"]: c for c in st["conditions"]}


def test_ready_track_is_ready_and_not_progressing() -> None:
    st = status(TrackObservation("v1", deployment(want=2, ready=2), [pod("ready"), pod("ready")]))
    c = conditions(st)
    assert (c["Ready"]["status"], c["Ready"]["reason"]) == ("True", LOADED)
    assert (c["Progressing"]["status"], c["Progressing"]["reason"]) == ("False", "Complete")
    assert c["Degraded"]["status"] == "False" and c["Stalled"]["status"] == "False"
    assert c["Reconciling"]["status"] == "False"
    assert all(x["observedGeneration"] == 2 and x["lastTransitionTime"] == T0 for x in c.values())
    assert st["observedGeneration"] == 2
    assert st["endpoint"] == "http://inv.ocr.svc:8000"
    served = {"servedSince": T0}  # it serves now: its pods' restarts are tolerated from here
    assert st["stable"] == {"version": "v1", "revision": "aaaaaa", "readyReplicas": 2, **served}
    assert st["replicas"] == 2 and "canary" not in st


def test_downloading_weights_is_progressing_with_model_reason() -> None:
    st = status(TrackObservation("v1", deployment(ready=0), [pod("downloading")]))
    c = conditions(st)
    assert (c["Ready"]["status"], c["Ready"]["reason"]) == ("False", DOWNLOADING)
    assert (c["Progressing"]["status"], c["Progressing"]["reason"]) == ("True", DOWNLOADING)
    assert c["Reconciling"]["status"] == "True"  # kstatus: InProgress


def test_failed_weights_is_degraded_and_stalled() -> None:
    st = status(TrackObservation("v1", deployment(ready=0), [pod("failed")]))
    c = conditions(st)
    assert (c["Degraded"]["status"], c["Degraded"]["reason"]) == ("True", FAILED)
    assert c["Stalled"]["status"] == "True"  # kstatus: Failed
    assert c["Progressing"]["status"] == "False" and c["Ready"]["reason"] == FAILED


def test_progress_deadline_is_failed() -> None:
    dep = deployment(
        ready=0,
        extra={
            "conditions": [
                {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}
            ]
        },
    )
    c = conditions(status(TrackObservation("v1", dep, [pod("loading")])))
    assert c["Degraded"]["reason"] == FAILED and c["Progressing"]["status"] == "False"


def test_autoscaler_adding_pods_is_neither_progressing_nor_unready() -> None:
    """An HPA scale-up of a serving revision is not a rollout: Ready stays True while the
    new pods load, Progressing stays False (alerts and `kubectl wait` keep quiet)."""
    dep = deployment(want=3, ready=2)
    st = status(
        TrackObservation("v1", dep, [pod("ready"), pod("ready"), pod("loading")]), rolling=[]
    )
    c = conditions(st)
    assert c["Ready"]["status"] == "True" and c["Progressing"]["status"] == "False"


def test_ready_needs_min_ready_pods_behind_traffic() -> None:
    dep = deployment(want=2, ready=1)
    st = status(TrackObservation("v1", dep, [pod("ready"), pod("loading")]), min_ready=2)
    assert conditions(st)["Ready"]["status"] == "False"
    assert "1/2 ready pods" in conditions(st)["Ready"]["message"]


def test_dark_canary_loading_does_not_flip_ready() -> None:
    stable = TrackObservation("v1", deployment(ready=1), [pod("ready")])
    canary = TrackObservation("v2", deployment(ready=0), [pod("loading")])
    st = status(stable, canary, weight=0)
    assert st["canary"] == {
        "version": "v2",
        "revision": "bbbbbb",
        "weight": 0,
        "requestedWeight": 0,
        "readyReplicas": 0,
    }
    c = conditions(st)
    assert c["Ready"]["status"] == "True"
    assert (c["Progressing"]["status"], c["Progressing"]["reason"]) == ("True", LOADING)
    st = status(stable, TrackObservation("v2", deployment(ready=1), [pod("ready")]), weight=10)
    assert st["canary"]["weight"] == 10 and conditions(st)["Ready"]["status"] == "True"
    assert st["replicas"] == 2


def test_spec_problem_is_degraded_and_not_ready() -> None:
    st = status(None, problems=[Problem("SpecInvalid", "invalid spec: weights: Field required")])
    c = conditions(st)
    assert (c["Degraded"]["status"], c["Degraded"]["reason"]) == ("True", "SpecInvalid")
    assert (c["Ready"]["status"], c["Ready"]["reason"]) == ("False", "SpecInvalid")
    assert c["Progressing"]["status"] == "False"


def test_transition_time_changes_only_when_status_flips() -> None:
    loading = status(TrackObservation("v1", deployment(ready=0), [pod("loading")]), now=T0)
    still = status(
        TrackObservation("v1", deployment(ready=0), [pod("loading")]), previous=loading, now=T1
    )
    assert not status_changed(loading, still)
    ready = status(
        TrackObservation("v1", deployment(ready=1), [pod("ready")]), previous=still, now=T1
    )
    c = conditions(ready)
    assert c["Ready"]["lastTransitionTime"] == T1  # flipped
    assert c["Degraded"]["lastTransitionTime"] == T0  # stayed False
    assert status_changed(still, ready)


def test_removed_canary_counts_as_a_change() -> None:
    stable = TrackObservation("v1", deployment(ready=1), [pod("ready")])
    with_canary = status(
        stable, TrackObservation("v2", deployment(ready=1), [pod("ready")]), weight=5
    )
    without = status(stable, previous=with_canary)
    assert status_changed(with_canary, without)


def test_track_without_weights_version_omits_it() -> None:
    """rapidocr has no weights: no version, and never a null the CRD schema would reject."""
    st = status(TrackObservation(None, deployment(ready=1), [pod("ready")]))
    assert st["stable"] == {"revision": "aaaaaa", "readyReplicas": 1, "servedSince": T0}


# Each feature's section as that feature writes it (status.canary.analysis paused with its
# checks, the shadow's configuration and figures, scale to zero awake, a node drain).
ANALYSIS = {
    "revision": "bbbbbb",
    "step": 2,
    "steps": 2,
    "weight": 50,
    "phase": "Paused",
    "failures": 0,
    "pausedGeneration": 2,
    "windowStart": T0,
    "message": "step 2 holds until the spec changes",
    "checks": [{"name": "errorRateIncrease", "value": 0.0, "threshold": 0.01, "ok": True}],
}
SHADOW = {
    "enabled": True,
    "percent": 20,
    "podPagesPerMinute": 30,
    "since": T0,
    "pagesCompared": 40.0,
    "cer": 0.01,
    "dropped": [{"reason": "busy", "requests": 2.0}],
}
AWAKE = {"state": "Awake", "since": T0, "reason": "2 job(s) running"}
DRAIN = [{"node": "n1", "since": T0, "deadline": T1, "pods": 1, "phase": "Replacing"}]
STABLE = TrackObservation("v1", deployment(ready=1), [pod("ready")])
CANARY = TrackObservation("v2", deployment(ready=1), [pod("ready")])
# feature: (the pass's arguments while it is on, after it is off, the section it owns)
FEATURES = {
    "scaleToZero": ({"scale_to_zero": AWAKE}, {}, ("scaleToZero",)),
    "shadow": (
        {"canary": CANARY, "shadow": ShadowStatus.model_validate(SHADOW)},
        {"canary": CANARY},
        ("canary", "shadow"),
    ),
    "analysis": (
        {"canary": CANARY, "weight": 50, "analysis": ANALYSIS},
        {"canary": CANARY, "weight": 50},
        ("canary", "analysis"),
    ),
    "canary": ({"canary": CANARY, "weight": 5}, {}, ("canary",)),
    "drains": ({"drains": DRAIN}, {}, ("drains",)),
}


def _at(doc: dict, path: tuple[str, ...]) -> object:
    for key in path:
        if not isinstance(doc, dict) or key not in doc:
            return KeyError
        doc = doc[key]
    return doc


@pytest.mark.parametrize("feature", list(FEATURES))
def test_a_feature_turned_off_takes_its_section_and_then_writes_nothing(feature: str) -> None:
    """Issue 37: turning a feature off removes its section in the next write (a nested
    merge-patch null for a nested one, its parent kept), and the pass after that, at rest,
    has nothing to write (before, each resync re-sent the same status, forever)."""
    on_args, off_args, path = FEATURES[feature]
    live = merged({}, status_write({}, status(STABLE, **on_args)))
    assert _at(live, path) is not KeyError, live
    off = status(STABLE, previous=live, now=T1, **off_args)
    patch = status_write(live, off)
    assert patch is not None and _at(patch, path) is None, patch
    if len(path) > 1:  # the parent stays, written as a whole with the null inside
        assert isinstance(_at(patch, path[:-1]), dict) and _at(off, path[:-1]) is not KeyError
    live = merged(live, patch)
    assert _at(live, path) is KeyError, live
    assert live == off  # the live status is exactly what the pass computed
    again = status(STABLE, previous=live, now="2026-01-01T01:00:00Z", **off_args)
    assert status_write(live, again) is None
    assert not status_changed(live, again)


def test_a_field_a_section_no_longer_writes_goes_too() -> None:
    """A section is its feature's whole: a field it lost (the analysis' window start once it
    paused, the stable revision's servedSince) is nulled inside it, once."""
    live = merged({}, status_write({}, status(STABLE, CANARY, weight=50, analysis=ANALYSIS)))
    paused = {k: v for k, v in ANALYSIS.items() if k != "windowStart"}
    off = status(STABLE, CANARY, previous=live, weight=50, analysis=paused)
    patch = status_write(live, off)
    assert patch is not None and patch["canary"]["analysis"]["windowStart"] is None
    live = merged(live, patch)
    assert (
        live == off
        and status_write(live, status(STABLE, CANARY, previous=live, weight=50, analysis=paused))
        is None
    )


def test_a_field_outside_every_section_is_left_alone() -> None:
    """Only the sections' fields go with a pass that does not write them: a field the pass
    never writes (none should exist) is neither removed nor a reason to write."""
    st = status(STABLE)
    assert status_write({**st, "other": 1}, st) is None


def _object(annotation: object) -> type[WireModel] | None:
    """The WireModel an (optional) field holds as an object (not in a list), if any."""
    if isinstance(annotation, type) and issubclass(annotation, WireModel):
        return annotation
    if get_origin(annotation) is list:
        return None
    return next((m for a in get_args(annotation) if (m := _object(a)) is not None), None)


def _listed(annotation: object) -> bool:
    return get_origin(annotation) is list or any(_listed(a) for a in get_args(annotation))


def _objects(model: type[WireModel], at: tuple[str, ...]) -> dict[tuple[str, ...], object]:
    """Every field of ``model`` (camelCase paths), and those of the objects it nests."""
    out: dict[tuple[str, ...], object] = {}
    for name, info in model.model_fields.items():
        path = (*at, info.alias or name)
        out[path] = info.annotation
        inner = _object(info.annotation)
        if inner is not None:
            out.update(_objects(inner, path))
    return out


def test_the_sections_table_names_every_optional_part_of_status() -> None:
    """SECTIONS is the only list of what goes with a feature: each path is an object of the
    status model, every nested object of the model is a section, and every top-level field
    outside the table is written by every pass (even for an invalid spec)."""
    fields = _objects(DocParserStatus, ())
    paths = {s.path for s in SECTIONS}
    assert paths <= set(fields), paths - set(fields)
    nested = {p for p, a in fields.items() if _object(a) is not None}
    nested |= {p for p, a in fields.items() if len(p) == 1 and _listed(a)}
    assert nested - {("conditions",)} == paths
    bare = status(None, problems=[Problem("SpecInvalid", "invalid spec")])
    assert {p[0] for p in fields if len(p) == 1} - {p[0] for p in paths} == set(bare)
    crd = (Path(__file__).resolve().parents[4] / "docs" / "crd.md").read_text()
    for section in SECTIONS:  # the status section of docs/crd.md names each section's owner
        row = f"| `{'.'.join(section.path)}` | {section.owner} | {section.turned_on_by} |"
        assert row in crd, section

"""The Argo CD health check we ship (charts/docparser-operator/files/argocd-health.lua),
run in a real Lua interpreter (lupa) against statuses that ``status.build_status``
produces: ready -> Healthy, rolling out -> Progressing, failed -> Degraded, and a status
older than the spec -> Progressing. This is the "never Progressing forever" promise."""

from __future__ import annotations

from pathlib import Path

import pytest
from docparser_operator.core.status import Problem, TrackObservation
from test_status import deployment, pod, status

lupa = pytest.importorskip("lupa", reason="pip install lupa (requirements-test.txt)")

SCRIPT = (
    Path(__file__).resolve().parents[2] / "charts/docparser-operator/files/argocd-health.lua"
).read_text()


def health(obj: dict) -> tuple[str, str]:
    """Evaluate the script the way Argo CD does: ``obj`` is a global, the chunk returns hs."""
    runtime = lupa.LuaRuntime(unpack_returned_tuples=True)

    def to_lua(value):
        if isinstance(value, dict):
            return runtime.table_from({k: to_lua(v) for k, v in value.items()})
        if isinstance(value, list):
            return runtime.table_from([to_lua(v) for v in value])
        return value

    runtime.globals().obj = to_lua(obj)
    hs = runtime.execute(SCRIPT)
    return hs["status"], hs["message"]


def docparser(generation: int, **track) -> dict:
    st = status(TrackObservation("v1", **track) if track else None, generation=generation)
    return {"metadata": {"name": "inv", "generation": generation}, "status": st}


def test_ready_is_healthy():
    obj = docparser(3, deployment=deployment(want=2, ready=2), pods=[pod("ready"), pod("ready")])
    assert health(obj)[0] == "Healthy"


def test_loading_is_progressing():
    obj = docparser(3, deployment=deployment(want=1, ready=0), pods=[pod("loading")])
    verdict, msg = health(obj)
    assert verdict == "Progressing" and msg


def test_failed_weights_are_degraded_not_progressing_forever():
    obj = docparser(3, deployment=deployment(want=1, ready=0), pods=[pod("failed")])
    verdict, msg = health(obj)
    assert verdict == "Degraded"
    assert msg


def test_spec_problem_is_degraded():
    st = status(
        TrackObservation("v1", deployment(want=1, ready=1), [pod("ready")]),
        generation=4,
        problems=[Problem("InsufficientGPUMemory", "40Gi cannot hold the worst case")],
    )
    verdict, msg = health({"metadata": {"generation": 4}, "status": st})
    assert verdict == "Degraded" and "40Gi" in msg


def test_status_older_than_the_spec_is_progressing():
    obj = docparser(3, deployment=deployment(want=2, ready=2), pods=[pod("ready"), pod("ready")])
    obj["metadata"]["generation"] = 4
    assert health(obj)[0] == "Progressing"


def test_no_status_yet_is_progressing():
    assert health({"metadata": {"generation": 1}})[0] == "Progressing"

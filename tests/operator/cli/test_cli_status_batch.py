"""`docparser-operator status` shows the batch pool as what it is (issue 35): its Deployment
runs the stable revision, so its track label reads "stable", but it serves no interactive
traffic; the revisions list calls it "batch" and status.batch's progress gets its own lines."""

from __future__ import annotations

from typing import Any

from docparser_operator.api import labels
from docparser_operator.cli.rollout import render_status


def _deployment(name: str, revision: str, *, batch: bool, ready: int, replicas: int) -> Any:
    meta_labels = {labels.LABEL_TRACK: "stable", labels.LABEL_REVISION: revision}
    if batch:
        meta_labels[labels.LABEL_COMPONENT] = labels.BATCH_COMPONENT
    return {
        "metadata": {"name": name, "labels": meta_labels},
        "spec": {"replicas": replicas},
        "status": {"readyReplicas": ready},
    }


def _dp(spec: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "inv", "namespace": "ocr"}, "spec": spec, "status": status}


def test_the_pool_is_listed_as_batch_and_its_progress_is_shown() -> None:
    deployments = [
        _deployment("inv-a1", "a1", batch=False, ready=2, replicas=2),
        _deployment("inv-batch", "a1", batch=True, ready=3, replicas=4),
    ]
    status = {
        "batch": {
            "replicas": 4,
            "readyReplicas": 3,
            "batchesInProgress": 2,
            "pagesQueued": 5400,
            "pagesDone": 1200,
            "pagesPerMinute": 310.0,
            "etaMinutes": 18,
        }
    }
    text = render_status(_dp({"batch": {"replicas": {"max": 8}}}, status), deployments, [])
    assert "batch   pool 3/4 ready (min 0, max 8)  batches in progress 2" in text
    assert "pages queued 5400, done 1200, 310/min, ETA 18 min" in text
    roles = [line.split()[1] for line in text.splitlines() if line.startswith("  a1 ")]
    assert roles == ["stable", "batch"]


def test_an_idle_pool_shows_one_line_and_no_pool_shows_none() -> None:
    text = render_status(_dp({"batch": {}}, {"batch": {"replicas": 0}}), [], [])
    assert "batch   pool 0/0 ready (min 0, max -)  batches in progress 0" in text
    assert "pages queued" not in text
    assert "batch " not in render_status(_dp({}, {}), [], [])

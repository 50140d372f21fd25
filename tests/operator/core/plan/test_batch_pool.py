"""The batch pool (spec.batch), pure: the reading of the pods' batch gauges, the pool's size
over a backlog -> empty cycle (up at once, down after the cooldown only), status.batch rounded
so that a pool at rest writes nothing, and what the pool renders: pods no serving selector
counts, the stable revision, batch work only, spot placement, and a drain that covers a line."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from docparser_operator.analysis.batch_reading import BatchReading, combine, parse
from docparser_operator.api import labels, naming
from docparser_operator.api.batch_spec import BatchSpec
from docparser_operator.cli.main import render_resource
from docparser_operator.core.plan.batch_pool import (
    PoolSeen,
    decide_pool,
    need,
    pool_status,
    two_digits,
)
from docparser_operator.core.render.batch_pool import PRESTOP_SLEEP_S
from docparser_operator.core.status.status_patch import status_write
from golden import EXAMPLES_DIR

EXAMPLE = EXAMPLES_DIR / "deepseek-batch-pool.yaml"
POOL = BatchSpec.model_validate({"replicas": {"min": 0, "max": 8}, "pagesPerReplica": 100})


def gauges(queued: int, in_progress: int = 1, total: float = 0.0, done: int = 0) -> str:
    return (
        "# TYPE docparser_batch_in_progress gauge\n"
        f"docparser_batch_in_progress {in_progress}\n"
        "# TYPE docparser_batch_pages_queued gauge\n"
        f"docparser_batch_pages_queued {queued}\n"
        "# TYPE docparser_batch_pages_done gauge\n"
        f"docparser_batch_pages_done {done}\n"
        "# TYPE docparser_batch_pages_recorded gauge\n"
        f"docparser_batch_pages_recorded {total}\n"
    )


def reading(queued: int, in_progress: int = 1, total: float = 0.0) -> BatchReading:
    got = parse(gauges(queued, in_progress, total))
    assert got is not None
    return got


def test_a_reading_takes_the_largest_of_each_pod_never_the_sum() -> None:
    assert parse("# TYPE docparser_jobs_queued gauge\ndocparser_jobs_queued 3\n") is None
    lagging, fresh = reading(50, total=10.0), reading(40, in_progress=2, total=30.0)
    both = combine([lagging, fresh])
    assert both == BatchReading(2, 0, 0, 50, 0, 30.0, pods=2)
    assert combine([]) is None
    with pytest.raises(ValueError):
        parse("docparser_batch_pages_queued not-a-number\n")


@pytest.mark.parametrize(
    ("queued", "in_progress", "pods"),
    [(0, 0, 0), (0, 1, 1), (1, 1, 1), (100, 1, 1), (101, 1, 2), (5000, 3, 8)],
)
def test_the_size_is_the_backlog_in_pages_within_the_bounds(
    queued: int, in_progress: int, pods: int
) -> None:
    assert need(POOL, reading(queued, in_progress)) == pods


def test_up_at_once_down_only_after_the_cooldown_to_the_largest_asked_meanwhile() -> None:
    seen = PoolSeen()
    seen.record(reading(750), 0.0)
    assert decide_pool(POOL, seen, 0, now=0.0, cooldown_s=60)[0] == 8
    seen.record(reading(250), 10.0)  # fewer pages: 3 pods asked, the pool keeps 8 for now
    assert decide_pool(POOL, seen, 8, now=10.0, cooldown_s=60)[0] == 8
    seen.record(reading(150), 40.0)
    assert decide_pool(POOL, seen, 8, now=40.0, cooldown_s=60)[0] == 8
    seen.record(reading(90), 75.0)  # 65 s of less: the largest those readings asked for
    size, why = decide_pool(POOL, seen, 8, now=75.0, cooldown_s=60)
    assert size == 3 and "for 60s" in why
    seen.record(reading(900), 80.0)  # a new batch: up at once
    assert decide_pool(POOL, seen, 3, now=80.0, cooldown_s=60)[0] == 8
    seen.record(reading(0, in_progress=0), 90.0)
    assert decide_pool(POOL, seen, 8, now=90.0, cooldown_s=60)[0] == 8
    seen.record(reading(500), 100.0)  # a dip: the cooldown starts again after it
    seen.record(reading(0, in_progress=0), 110.0)
    assert decide_pool(POOL, seen, 8, now=110.0, cooldown_s=60)[0] == 8
    seen.record(reading(0, in_progress=0), 171.0)
    assert decide_pool(POOL, seen, 8, now=171.0, cooldown_s=60)[0] == 0


def test_an_unreadable_backlog_keeps_the_size_within_the_bounds() -> None:
    seen = PoolSeen()
    seen.failed("no pod answers", 0.0)
    assert decide_pool(POOL, seen, 5, now=0.0)[0] == 5
    assert decide_pool(POOL, seen, None, now=0.0)[0] == 0  # not created yet: the minimum
    narrower = BatchSpec.model_validate({"replicas": {"min": 1, "max": 2}})
    assert decide_pool(narrower, seen, 5, now=0.0)[0] == 2


def test_status_is_rounded_has_a_rate_and_eta_and_writes_nothing_at_rest() -> None:
    assert [two_digits(v) for v in (0, 7, 123, 12345, 0.1234)] == [0, 7, 120, 12000, 0.12]
    seen = PoolSeen()
    seen.record(reading(12345, total=1000.0), 0.0)
    first = pool_status(8, 2, seen, None, scaled_at="2026-03-02T01:00:00Z")
    assert first.to_wire() == {
        "replicas": 8,
        "readyReplicas": 2,
        "batchesInProgress": 1,
        "pagesQueued": 12000,
        "pagesDone": 0,
        "pagesPerMinute": 0.0,
        "lastScaleTime": "2026-03-02T01:00:00Z",
    }
    seen.record(reading(12000, total=1300.0), 60.0)  # 300 pages in a minute
    second = pool_status(8, 8, seen, first, scaled_at=None)
    assert second.pages_per_minute == 300.0 and second.eta_minutes == 40
    assert second.last_scale_time == "2026-03-02T01:00:00Z"
    # a few pages later the rounded figures are the same: no write
    seen.record(reading(11990, total=1310.0), 62.0)
    again = pool_status(8, 8, seen, second, scaled_at=None)
    assert status_write({"batch": second.to_wire()}, {"batch": again.to_wire()}) is None
    # at rest: nothing queued, no rate; two passes write nothing
    rest = PoolSeen()
    rest.record(reading(0, in_progress=0, total=5000.0), 0.0)
    idle = pool_status(0, 0, rest, second, scaled_at=None)
    assert "etaMinutes" not in idle.to_wire() and idle.pages_per_minute == 0.0
    rest.record(reading(0, in_progress=0, total=5000.0), 5.0)
    after = pool_status(0, 0, rest, idle, scaled_at=None)
    assert status_write({"batch": idle.to_wire()}, {"batch": after.to_wire()}) is None
    # the section goes with spec.batch: a merge-patch null
    gone = status_write({"batch": idle.to_wire(), "replicas": 2}, {"replicas": 2})
    assert gone == {"replicas": 2, "batch": None}


def test_an_unreadable_pass_keeps_the_figures_in_status() -> None:
    seen = PoolSeen()
    seen.record(reading(300), 0.0)
    before = pool_status(3, 3, seen, None, scaled_at=None)
    seen.failed("no pod answers", 5.0)
    assert pool_status(3, 3, seen, before, scaled_at=None) == before


def rendered(**batch: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    resource = yaml.safe_load(EXAMPLE.read_text())
    resource["spec"]["batch"].update(batch)
    children = render_resource(resource)
    pool = next(c for c in children if c["metadata"]["name"] == naming.batch_pool("archive"))
    return pool, [c for c in children if c is not pool]


def _selects(selector: dict[str, str], pod_labels: dict[str, str]) -> bool:
    return all(pod_labels.get(k) == v for k, v in selector.items())


def test_no_serving_selector_counts_the_pool_and_it_runs_the_stable_revision() -> None:
    pool, others = rendered()
    pod = pool["spec"]["template"]["metadata"]["labels"]
    stable = next(c for c in others if c["kind"] == "Deployment")
    assert pod[labels.LABEL_REVISION] == stable["metadata"]["labels"][labels.LABEL_REVISION]
    assert labels.LABEL_REVISION not in pool["metadata"]["labels"]  # not a rollout revision
    assert _selects(pool["spec"]["selector"]["matchLabels"], pod)
    for child in others:
        spec = child.get("spec") or {}
        selector = spec.get("selector")
        if child["kind"] == "Service":
            assert not _selects(selector, pod), child["metadata"]["name"]
        elif child["kind"] in ("Deployment", "PodDisruptionBudget"):
            assert not _selects(selector["matchLabels"], pod), child["metadata"]["name"]
    assert not _selects(labels.pod_selector("archive"), pod)  # status.selector (the HPA)


def env_of(deployment: dict[str, Any]) -> dict[str, str]:
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container["env"]}


def test_the_pool_takes_batch_work_only_and_backfill_decides_the_stable_pods() -> None:
    pool, others = rendered()
    stable = next(c for c in others if c["kind"] == "Deployment")
    env = env_of(pool)
    assert env["DOCPARSER_JOB_WORKERS"] == "0"  # no /v1/jobs job: interactive work
    assert env["DOCPARSER_BATCH_WORKERS"] == "8"  # the continuous batch's slots
    assert "DOCPARSER_REDIS_URL" in {
        e["name"] for e in pool["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env_of(stable)["DOCPARSER_BATCH_WORKERS"] == "0"  # backfill: false
    _, backfilling = rendered(backfill=True)
    stable_on = next(c for c in backfilling if c["kind"] == "Deployment")
    assert "DOCPARSER_BATCH_WORKERS" not in env_of(stable_on)
    # the stable revision differs only by that setting: backfill changes the stable pods
    assert stable_on["metadata"]["name"] != stable["metadata"]["name"]


def test_spot_placement_and_a_drain_that_covers_a_line_before_the_grace_period() -> None:
    pool, others = rendered()
    pod = pool["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "spot"}
    assert {"key": "spot", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    assert pod["priorityClassName"] == "batch-low"
    for spread in pod["topologySpreadConstraints"]:
        assert spread["labelSelector"]["matchLabels"] == labels.batch_selector("archive")
    env = env_of(pool)
    stable = next(c for c in others if c["kind"] == "Deployment")
    drain = int(env["DOCPARSER_DRAIN_TIMEOUT_S"])
    assert drain > int(env_of(stable)["DOCPARSER_DRAIN_TIMEOUT_S"])  # a line is a document
    # the runtime hands back what is left at its drain deadline, before the kubelet's SIGKILL
    deadline = PRESTOP_SLEEP_S + int(env["DOCPARSER_DRAIN_GRACE_S"]) + drain
    assert pod["terminationGracePeriodSeconds"] > deadline
    assert pool["spec"]["replicas"] == 0  # at rest: replicas.min
    assert pool["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0


def test_without_spec_batch_nothing_of_the_pool_renders() -> None:
    resource = yaml.safe_load(EXAMPLE.read_text())
    without = copy.deepcopy(resource)
    del without["spec"]["batch"]
    names = {c["metadata"]["name"] for c in render_resource(without)}
    assert naming.batch_pool("archive") not in names
    stable = next(c for c in render_resource(without) if c["kind"] == "Deployment")
    assert "DOCPARSER_BATCH_WORKERS" not in env_of(stable)


def test_a_pass_without_a_reading_keeps_the_live_pool_within_the_bounds() -> None:
    from docparser_operator.core.plan.batch_pool import kept_size
    from docparser_operator.core.plan.children import Observed

    uid = "0b7d3c5e-0000-4000-8000-00000000003a"
    live = {
        "metadata": {
            "name": "archive-batch",
            "ownerReferences": [{"uid": uid, "controller": True}],
        },
        "spec": {"replicas": 12},
    }
    observed = Observed(children={("Deployment", "archive-batch"): live}, pods=[])
    assert kept_size(None, observed, "archive", uid, None) == 0
    assert kept_size(POOL, observed, "archive", uid, None) == 8  # within max
    assert kept_size(POOL, observed, "archive", uid, 2) == 2  # this pass's decision
    assert kept_size(POOL, Observed(children={}, pods=[]), "archive", uid, None) == 0
    # someone else's Deployment of that name is not the pool
    assert kept_size(POOL, observed, "archive", "another-uid", None) == 0


def test_an_event_when_the_pool_changes_size_only() -> None:
    from docparser_operator.api.status_models import DocParserStatus
    from docparser_operator.core.plan.batch_pool import batch_events

    typed = DocParserStatus.model_validate
    at_rest = typed({"batch": {"replicas": 0, "pagesQueued": 0, "batchesInProgress": 0}})
    busy = typed({"batch": {"replicas": 3, "pagesQueued": 25, "batchesInProgress": 1}})
    assert batch_events(at_rest, busy) == [
        (
            "BatchPoolScaled",
            "batch pool scaled from 0 to 3 pod(s): 25 page(s) queued in 1 batch(es)",
        )
    ]
    assert busy.batch is not None
    fewer = busy.model_copy(update={"batch": busy.batch.model_copy(update={"pages_queued": 20})})
    assert batch_events(busy, fewer) == []
    none = DocParserStatus()
    assert batch_events(none, busy) == [] and batch_events(busy, none) == []


def test_the_network_policy_covers_the_pool_pods_but_takes_none_as_a_source() -> None:
    resource = yaml.safe_load(EXAMPLE.read_text())
    resource["spec"]["traffic"]["allowFrom"] = [{"namespaceSelector": {"matchLabels": {"a": "b"}}}]
    children = render_resource(resource)
    policy = next(c for c in children if c["kind"] == "NetworkPolicy")
    pool = next(c for c in children if c["metadata"]["name"] == naming.batch_pool("archive"))
    pod = pool["spec"]["template"]["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]
    assert _selects(selector["matchLabels"], pod)
    (names,) = selector["matchExpressions"]
    assert pod[labels.LABEL_NAME] in names["values"] and labels.APP_NAME in names["values"]
    sources = [
        p.get("podSelector", {}).get("matchLabels") for p in policy["spec"]["ingress"][0]["from"]
    ]
    assert all(s is None or not _selects(s, pod) for s in sources)

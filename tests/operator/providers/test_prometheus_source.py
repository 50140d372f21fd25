"""The canary analysis' Prometheus source against a real Prometheus (Debian's package).

Two real runtime processes stand in for a revision's pods each: stable answers, the canary
answers 500s. A real ``prometheus`` scrapes both every second, with the labels a
``kubernetes_sd`` labelmap gives a pod (``namespace``, ``docparser_io_revision``). The
operator's PromQL then reads each track's window, and one analysis pass judges it.
"""

from __future__ import annotations

import datetime
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from docparser_operator.analysis.counters import OUTCOMES
from docparser_operator.api.analysis_spec import PrometheusSource
from docparser_operator.api.models import DocParser
from docparser_operator.providers import analysis_run, prometheus, sources
from docparser_operator.providers.fetch import Fetcher
from docparser_operator.providers.urls import AllowList
from dp_helpers import CANARY_WEIGHTS, docparser
from live_server import LiveServer, start_all
from redis_server import free_port

PROMETHEUS = shutil.which("prometheus")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not found (Debian package)"),
]
NAMESPACE, STABLE, CANARY = "ocr", "rev-stable", "rev-canary"
SENT = 40  # parse requests per track in the window


def _parse(server: LiveServer, n: int) -> None:
    with httpx.Client(timeout=10) as client:
        for _ in range(n):
            client.post(
                f"{server.url}/v1/document/parse",
                files={"file": ("p.png", _png(), "image/png")},
            )


def _png() -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (64, 32), "white").save(buf, format="PNG")
    return buf.getvalue()


def _query(url: str, promql: str) -> list[dict]:
    reply = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5).json()
    assert reply["status"] == "success", reply
    return reply["data"]["result"]


def _wait(what: str, probe, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(0.25)
    raise AssertionError(f"{what} not within {timeout}s")


@pytest.fixture(scope="module")
def scraped() -> Iterator[tuple[str, LiveServer, LiveServer]]:
    """(Prometheus URL, stable, canary): both tracks scraped every second, each already
    answered one request (its request series exists before the window, as on a live pod)."""
    no_cache = {"DOCPARSER_CACHE_MAX_BYTES": 0}  # every request parses: pages and latency move
    stable = LiveServer(gated_delay_s=0.0, env=no_cache)
    canary = LiveServer(gated_delay_s=0.0, env=no_cache, engine_args=("--fail",))
    workdir = Path(tempfile.mkdtemp(prefix="docparser-prometheus-"))
    proc: subprocess.Popen | None = None
    try:
        start_all(stable, canary)
        _parse(stable, 1)
        _parse(canary, 1)
        targets = [
            {
                "targets": [f"{server.host}:{server.port}"],
                "labels": {"namespace": NAMESPACE, "docparser_io_revision": revision},
            }
            for server, revision in ((stable, STABLE), (canary, CANARY))
        ]
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "docparser", "static_configs": targets}],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        assert PROMETHEUS is not None
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(workdir / "prometheus.log").open("w"),
        )
        url = f"http://127.0.0.1:{port}"

        def both_up() -> bool:
            try:
                rows = _query(url, 'up{job="docparser"} == 1')
            except (httpx.HTTPError, ValueError, AssertionError):
                return False
            return len(rows) == 2

        _wait("Prometheus scraping both tracks", both_up)
        time.sleep(2.5)  # two more scrapes: the series have a history before the window
        yield url, stable, canary
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(20)
        for server in (stable, canary):
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _settled(url: str, revision: str, total: int) -> bool:
    sel = prometheus.selector(PrometheusSource(url=url), NAMESPACE, revision, route="/v1/.*")
    rows = _query(url, f"sum(docparser_requests_total{sel})")
    return bool(rows) and float(rows[0]["value"][1]) >= total


def test_promql_reads_each_tracks_window_and_one_pass_fails_a_canary_answering_500s(
    scraped: tuple[str, LiveServer, LiveServer],
) -> None:
    url, stable, canary = scraped
    began = time.monotonic()
    _parse(stable, SENT)
    _parse(canary, SENT)
    _wait(
        "the window's requests scraped",
        lambda: all(_settled(url, r, SENT + 1) for r in (STABLE, CANARY)),
    )
    time.sleep(1.5)  # one more scrape after the last request: increase() sees the end
    seconds = round(time.monotonic() - began) + 2
    source = PrometheusSource(url=url)
    allowed = sources.guarded([url], ())  # an admin's DOCPARSER_OPERATOR_PROMETHEUS_URLS
    fetcher = Fetcher(AllowList.of([url], sources.PROMETHEUS_SETTING))
    s = prometheus.window_counters(source, NAMESPACE, STABLE, seconds, fetcher)
    c = prometheus.window_counters(source, NAMESPACE, CANARY, seconds, fetcher)
    # increase() extrapolates to the window's edges: near the counts, not exactly them.
    assert SENT * 0.8 <= s.requests <= SENT * 1.5, s
    assert SENT * 0.8 <= c.requests <= SENT * 1.5, c
    assert s.errors == 0 and c.error_rate > 0.95, (s, c)
    assert SENT * 0.8 <= s.pages <= SENT * 1.5, s
    assert dict(s.outcomes) == dict.fromkeys(OUTCOMES, 0.0), s
    assert s.latency and s.latency[-1][0] == float("inf") and s.quantile(0.99) > 0, s

    # One analysis pass through the executor, with the real Prometheus as its source.
    resource = docparser("walk", replicas={"min": 2, "max": 2})
    resource["spec"]["canary"] = {
        "weights": CANARY_WEIGHTS,
        "analysis": {
            "steps": [{"weight": 25}, {"weight": 50}],
            "intervalSeconds": seconds,
            "minRequests": 10,
            "failureLimit": 2,
            "prometheus": {"url": url},
        },
    }
    resource["metadata"].update(namespace=NAMESPACE, generation=1)
    model = DocParser.from_resource(resource)
    revisions = {"stable": STABLE, "canary": CANARY}
    memory = analysis_run.AnalysisMemory()
    state = analysis_run.begin(model, revisions)
    assert state is not None
    now = datetime.datetime.now(datetime.UTC)
    start = (now - datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    state = analysis_run.finish(
        memory, allowed, model, state, revisions, [], serving=True, now=start
    )
    assert state.window_start == start and memory.windows == {}  # nothing kept in memory
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    judged = analysis_run.finish(
        memory, allowed, model, state, revisions, [], serving=True, now=stamp
    )
    checks = {ch.name: ch for ch in judged.checks}
    assert not checks["errorRate"].ok and checks["errorRate"].canary > 0.95, judged
    assert (judged.failures, judged.phase, judged.weight) == (1, "Progressing", 25), judged


def test_an_unreachable_prometheus_is_said_and_judges_nothing() -> None:
    resource = docparser("walk", replicas={"min": 2, "max": 2})
    port = free_port()  # nothing listens there
    resource["spec"]["canary"] = {
        "weights": CANARY_WEIGHTS,
        "analysis": {"intervalSeconds": 5, "prometheus": {"url": f"http://127.0.0.1:{port}"}},
    }
    resource["metadata"].update(namespace=NAMESPACE, generation=1)
    model = DocParser.from_resource(resource)
    revisions = {"stable": STABLE, "canary": CANARY}
    state = analysis_run.begin(model, revisions)
    assert state is not None
    memory = analysis_run.AnalysisMemory()
    allowed = sources.guarded([f"http://127.0.0.1:{port}"], ())
    started = analysis_run.finish(
        memory, allowed, model, state, revisions, [], serving=True, now="2026-12-01T10:00:00Z"
    )
    after = analysis_run.finish(
        memory, allowed, model, started, revisions, [], serving=True, now="2026-12-01T10:00:06Z"
    )
    assert after.message.startswith("cannot query Prometheus"), after.message
    assert (after.failures, after.checks, after.step) == (0, (), 0)

"""The live capacity report's PromQL against a real Prometheus (Debian's package).

Three emulated runtime pods (known traffic, the runtime's own metrics code) are scraped every
second with the labels a ``kubernetes_sd`` labelmap gives a pod: two are revisions of the
DocParser in ``ocr`` (3 and 1 pages/s, 0.5 s a page), one a pod of another namespace that
must not count. After a minute the operator's source reads the window, a pass with
``spec.capacity.prometheus`` writes its report, and ``docparser-runtime advise
--from-metrics`` on the same Prometheus gives the same figures.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from capacity_pods import GIB, EmulatedPod
from docparser_operator.api.analysis_spec import PrometheusSource
from docparser_operator.api.models import DocParser
from docparser_operator.controller.capacity import capacity_step
from docparser_operator.core.plan.children import Observed
from docparser_operator.core.render import roles_of
from docparser_operator.core.status.capacity_window import CapacityMemory
from docparser_operator.providers import capacity as capacity_source
from docparser_runtime.sizing import live_advise
from dp_helpers import docparser

PROMETHEUS = shutil.which("prometheus")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not found (Debian package)"),
]
WINDOW_S = 60


class _Server(ThreadingHTTPServer):
    daemon_threads = True


def _serve(pod: EmulatedPod) -> tuple[_Server, str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pod.text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = _Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"127.0.0.1:{server.server_address[1]}"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _count(url: str, promql: str) -> float:
    try:
        reply = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return 0.0
    rows = (reply.get("data") or {}).get("result") or []
    return float(rows[0]["value"][1]) if rows else 0.0


@pytest.fixture(scope="module")
def prometheus() -> Iterator[tuple[str, list[str]]]:
    """(Prometheus URL, the DocParser's revisions), a minute of traffic scraped."""
    resource = docparser("inv", tier="auto", resources={"gpu": 1})
    revisions = [t.revision for t in roles_of(DocParser.from_resource(resource))]
    pods = [
        (EmulatedPod(rate=3.0, service_s=0.5), "ocr", revisions[0]),
        (EmulatedPod(rate=1.0, service_s=0.5), "ocr", "abcdef0123"),  # an older revision
        (EmulatedPod(rate=50.0, service_s=9.0), "other", revisions[0]),  # not ours
    ]
    servers = [(_serve(pod), ns, rev) for pod, ns, rev in pods]
    workdir = Path(tempfile.mkdtemp(prefix="docparser-capacity-prometheus-"))
    targets = [
        {"targets": [addr], "labels": {"namespace": ns, "docparser_io_revision": rev}}
        for (_server, addr), ns, rev in servers
    ]
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "docparser", "static_configs": targets}],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    url = f"http://127.0.0.1:{_free_port()}"
    assert PROMETHEUS is not None
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address={url.removeprefix('http://')}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(workdir / "prometheus.log").open("w"),
    )
    try:
        deadline = time.monotonic() + 60
        while _count(url, 'count(up{job="docparser"} == 1)') < 3:
            assert time.monotonic() < deadline, (workdir / "prometheus.log").read_text()[-2000:]
            time.sleep(0.5)
        time.sleep(WINDOW_S + 3)  # a whole window of traffic
        yield url, [revisions[0], "abcdef0123"]
    finally:
        proc.terminate()
        proc.wait(20)
        for (server, _addr), _ns, _rev in servers:
            server.shutdown()
            server.server_close()
        shutil.rmtree(workdir, ignore_errors=True)


def test_the_window_from_promql(prometheus: tuple[str, list[str]]) -> None:
    url, revisions = prometheus
    source = capacity_source.guarded([url])
    got = source.query(PrometheusSource(url=url), "ocr", revisions, WINDOW_S)
    c = got.counters
    # increase() extrapolates to the window's edges: near 4 pages/s, not exactly it
    assert 0.8 * 4 * WINDOW_S <= c.pages <= 1.2 * 4 * WINDOW_S, got
    assert 3.2 <= got.peak_pages_per_s <= 4.8, got
    timed = sum(n for _, n in c.service_pages)
    assert sum(s for _, s in c.service_seconds) / timed == pytest.approx(0.5, rel=0.01), got
    assert dict(c.auto_pages).keys() == {0, 2, 6}, got
    assert (c.slots, c.memory_peak, c.memory_limit, got.pods) == (2, 3 * GIB, 4 * GIB, 2), got
    refused = capacity_source.guarded([]).refusal(PrometheusSource(url=url), "ocr")
    assert refused is not None and refused.startswith("spec.capacity.prometheus.url"), refused


def test_a_pass_reports_it_and_the_runtime_reads_the_same(
    prometheus: tuple[str, list[str]],
) -> None:
    url, revisions = prometheus
    resource = docparser(
        "inv",
        tier="auto",
        resources={"gpu": 1},
        capacity={"window": f"{WINDOW_S}s", "prometheus": {"url": url}},
    )
    resource["metadata"].update(namespace="ocr", uid="u-1")
    leaving = {"metadata": {"labels": {"docparser.io/revision": revisions[1]}}}
    observed = Observed({("Deployment", f"inv-{revisions[1]}"): leaving}, [])
    model = DocParser.from_resource(resource)
    step, problems = capacity_step(
        model,
        observed,
        CapacityMemory(),
        capacity_source.guarded([url]),
        now="2026-03-02T10:00:00Z",
        poll_s=60,
    )
    assert problems == [] and step is not None and step.report is not None
    ours = step.report.to_wire()
    assert ours["source"] == "prometheus" and ours["pods"] == 2, ours
    assert 3.2 <= ours["pagesPerSecond"] <= 4.8, ours
    assert ours["secondsPerPage"] == 0.5 and ours["recommended"]["replicas"] >= 1, ours
    selector = capacity_source.selector(PrometheusSource(url=url), "ocr", revisions)
    theirs = live_advise.from_prometheus(
        url, live_advise.LiveOptions(), window=f"{WINDOW_S}s", selector=selector
    )
    for key in ("pods", "secondsPerPage", "slots", "memoryPeak", "memoryLimit", "recommended"):
        assert theirs[key] == ours[key], (key, theirs, ours)
    assert theirs["pagesPerSecond"] == pytest.approx(ours["pagesPerSecond"], rel=0.1)
    _, refused = capacity_step(
        model,
        Observed({}, []),
        CapacityMemory(),
        capacity_source.guarded([]),
        now="2026-03-02T10:00:00Z",
        poll_s=60,
    )
    assert [p.reason for p in refused] == ["SourceNotAllowed"], refused

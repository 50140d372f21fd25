"""``docparser-runtime advise --from-metrics`` gives the operator's figures, and prints the
table ``kubectl docparser capacity`` prints.

The same emulated pod (known traffic, the runtime's own metrics code) is read by the operator's
pipeline (reading, interval, figures, report) and by the runtime's (``live_advise``); the two
reports are equal but for when and where they were taken. The runtime reads a real HTTP
server's ``/metrics`` through its CLI, and a Prometheus stand-in answering the PromQL both
sides send (the same queries, the operator's selector or the person's).
"""

from __future__ import annotations

import io
import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import redirect_stdout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from capacity_pods import EmulatedPod
from docparser_operator.analysis.capacity_reading import parse
from docparser_operator.api.analysis_spec import PrometheusSource
from docparser_operator.api.models import DocParser
from docparser_operator.cli import capacity as kubectl_capacity
from docparser_operator.core.status.capacity_status import report
from docparser_operator.core.status.capacity_window import CapacitySeen, figures
from docparser_operator.providers import capacity as sources
from docparser_runtime import cli
from docparser_runtime.sizing import live_advise
from dp_helpers import docparser
from pod_endpoint import loopback_subnet

WHEN = ("since", "window", "source")


class Clock:
    def __init__(self) -> None:
        self.t = 2_000_000.0

    def __call__(self) -> float:
        return self.t


def _without(report: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in report.items() if k not in WHEN}


@pytest.mark.parametrize(
    ("spec", "options"),
    [
        ({"tier": "auto", "resources": {"gpu": 1}}, live_advise.LiveOptions()),
        (
            {"tier": 6, "resources": {"gpu": 1, "gpuMemory": "40Gi"}},
            live_advise.LiveOptions(tier=6, gpu_memory="40Gi"),
        ),
        (
            {
                "tier": "auto",
                "autoscaling": {"metric": "latency", "targetSeconds": 0.5},
                "resources": {"gpu": 1, "gpuMemory": "24Gi"},
            },
            live_advise.LiveOptions(target_wait_s=0.5, gpu_memory="24Gi"),
        ),
        (
            {"engine": "rapidocr", "tier": 2, "resources": {"gpu": 1, "gpuMemory": "24Gi"}},
            live_advise.LiveOptions(engine="rapidocr", tier=2, gpu_memory="24Gi"),
        ),
    ],
)
def test_the_runtime_reports_what_the_operator_reports(
    spec: dict[str, Any], options: live_advise.LiveOptions
) -> None:
    clock = Clock()
    pod = EmulatedPod(rate=3.3, service_s=0.7, tiers=(0, 3, 3, 6), clock=clock)
    texts = [pod.text()]
    clock.t += 60
    texts.append(pod.text())
    seen = CapacitySeen()
    for n, text in enumerate(texts):
        seen.record({"p": parse(text)}, 2_000_000.0 + 60 * n, 60)
    fig = figures(seen)
    assert fig is not None
    model = DocParser.from_resource(docparser("inv", **spec)).spec
    ours = report(fig, model, window="1m", since="x", source="pods").to_wire()
    served = iter(texts)
    times = iter([2_000_000.0, 2_000_060.0])
    theirs = live_advise.from_pod(
        "http://pod/metrics",
        options,
        interval_s=60,
        fetch=lambda url: next(served),
        sleep=lambda s: None,
        clock=lambda: next(times),
    )
    assert _without(theirs) == _without(ours)
    assert ours["recommended"], ours
    title = "DocParser ocr/inv: capacity over"
    assert live_advise.render_report(ours, title) == kubectl_capacity.render_report(ours, title)


def test_both_send_the_same_promql() -> None:
    source = PrometheusSource(url="http://prometheus:9090")
    ours = sources.queries(source, "ocr", ["abc123", "def456"], 3600)
    selector = sources.selector(source, "ocr", ["abc123", "def456"])
    assert live_advise.promql(selector, 3600) == ours


class _Server(ThreadingHTTPServer):
    daemon_threads = True


def _serve(answer: Any) -> Iterator[str]:
    host = f"{loopback_subnet()}.9"

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = answer(self.path)
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = _Server((host, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://{host}:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def pod_url() -> Iterator[tuple[str, EmulatedPod]]:
    pod = EmulatedPod(rate=18.0, service_s=0.4)
    yield from ((url, pod) for url in _serve(lambda path: (200, pod.text())))


def test_the_cli_reads_a_pods_metrics(pod_url: tuple[str, EmulatedPod]) -> None:
    url, _pod = pod_url
    out = io.StringIO()
    with redirect_stdout(out):
        code = cli.main(["advise", "--from-metrics", f"{url}/metrics", "--interval", "2", "--json"])
    assert code == 0
    got = json.loads(out.getvalue())
    assert got["pagesPerSecond"] == pytest.approx(18.0, rel=0.1), got
    assert got["secondsPerPage"] == pytest.approx(0.4), got
    assert got["recommended"]["replicas"] == 5  # 18 pages/s x 0.4 s / 2 slots / 0.8 busy: 4.5
    table = io.StringIO()
    with redirect_stdout(table):
        assert cli.main(["advise", "--from-metrics", f"{url}/metrics", "--interval", "1"]) == 0
    assert "pages/s, busiest minute" in table.getvalue() and "recommended:" in table.getvalue()


def test_a_prometheus_window_and_its_errors() -> None:
    def answer(path: str) -> tuple[int, str]:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)["query"][0]
        if "docparser_pages_total" in query and "max_over_time" in query:
            result = [{"metric": {}, "value": [0, "6.0"]}]
        elif "docparser_pages_total" in query:
            result = [{"metric": {}, "value": [0, "7200"]}]  # 2 pages/s over the hour
        elif "service_seconds_sum" in query or "service_seconds_count" in query:
            result = [{"metric": {"tier": "0"}, "value": [0, "7200"]}]
        elif "decode_slots" in query:
            result = [{"metric": {}, "value": [0, "2"]}]
        else:
            result = []
        assert 'namespace="ocr"' in query
        return 200, json.dumps({"status": "success", "data": {"result": result}})

    for url in _serve(answer):
        out = io.StringIO()
        with redirect_stdout(out):
            args = ["advise", "--from-metrics", url, "--selector", 'namespace="ocr"', "--json"]
            assert cli.main(args) == 0
        got = json.loads(out.getvalue())
        assert (got["pagesPerSecond"], got["peakPagesPerSecond"]) == (2.0, 6.0), got
        assert got["recommended"]["replicas"] == 4  # 6 pages/s x 1 s / 2 slots / 0.8
    for url in _serve(lambda path: (400, json.dumps({"status": "error", "errorType": "bad_data"}))):
        assert cli.main(["advise", "--from-metrics", url]) == 1
    assert cli.main(["advise", "--from-metrics", "http://x/metrics", "--tier", "9"]) == 2
    assert cli.main(["advise"]) == 2

"""Optional OpenTelemetry tracing: with DOCPARSER_TRACING a parse is a server span with a
``docparser.parse`` child carrying its numbers and a ``docparser.decode`` grandchild,
the caller's trace continues (``traceparent``), probes are not traced; without it, no span
and no OpenTelemetry code runs."""

from __future__ import annotations

import io

import pytest
from app_for_tests import make_settings, serving
from PIL import Image

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind

PARSE = "/v1/document/parse"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


def pdf(pages: int) -> bytes:
    images = [Image.new("RGB", (300 + i, 400), "white") for i in range(pages)]
    buf = io.BytesIO()
    images[0].save(buf, format="PDF", save_all=True, append_images=images[1:])
    return buf.getvalue()


def recording_provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


async def test_a_parse_is_traced_with_its_numbers_and_continues_the_callers_trace():
    provider, exporter = recording_provider()
    settings = make_settings(tracing=True)
    async with serving(settings, tracer_provider=provider) as (_app, client, _engine):
        exporter.clear()  # start-up probes
        assert (await client.get("/readyz")).status_code == 200
        files = {"file": ("d.pdf", pdf(2), "application/pdf")}
        reply = await client.post(PARSE, files=files, headers={"traceparent": TRACEPARENT})
        assert reply.status_code == 200
        body = reply.json()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert not [n for n in spans if "readyz" in n], "probes are not traced"
    parse, decode = spans["docparser.parse"], spans["docparser.decode"]
    (server,) = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.SERVER]
    assert server.attributes["http.route"] == PARSE
    assert format(server.context.trace_id, "032x") == TRACE_ID  # the caller's trace
    assert parse.parent.span_id == server.context.span_id
    assert decode.parent.span_id == parse.context.span_id
    attrs = parse.attributes
    assert attrs["docparser.pages"] == 2
    assert attrs["docparser.vision_tokens"] == body["vision_tokens"]
    assert attrs["docparser.output_tokens"] == body["usage"]["output_tokens"]
    assert attrs["docparser.total_ms"] == body["timings_ms"]["total"]
    assert attrs["docparser.tier"] == 0
    assert decode.attributes["docparser.bytes"] > 0


async def test_tracing_is_off_by_default():
    provider, exporter = recording_provider()
    async with serving(make_settings(), tracer_provider=provider) as (_app, client, _engine):
        files = {"file": ("d.pdf", pdf(1), "application/pdf")}
        assert (await client.post(PARSE, files=files)).status_code == 200
    assert exporter.get_finished_spans() == ()

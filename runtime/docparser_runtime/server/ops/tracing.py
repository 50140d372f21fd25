"""Optional OpenTelemetry tracing (``DOCPARSER_TRACING=true``, the ``otel`` extra).

Off by default, and the runtime image does not need the OpenTelemetry packages unless it
is switched on: every import is guarded here and nothing else imports OpenTelemetry.
Switched on, a request gets:

- the server span of FastAPI's instrumentation (route, status; probes and /metrics are
  not traced), continuing the caller's trace from its ``traceparent`` header;
- a ``docparser.parse`` child span per parse with the numbers a slow request is judged
  by (pages, vision tokens, output tokens, tier, cached, time per stage), and a
  ``docparser.decode`` child span around opening the document in the sandboxed decoder.

Spans are exported over OTLP/HTTP to ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), the SDK's standard variables; ``OTEL_SERVICE_NAME``
defaults to ``docparser-runtime``. Tests pass their own tracer provider instead.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from fastapi import FastAPI

UNTRACED_ROUTES = "livez,readyz,health,metrics"  # FastAPIInstrumentor's excluded_urls


class TracingUnavailable(RuntimeError):
    """Tracing was switched on, but the OpenTelemetry packages are not installed (a
    start-up error: the process refuses to run half-configured)."""


class Span(Protocol):
    """What the pipeline does with a span (an OpenTelemetry ``Span``, or ``_NoSpan``)."""

    def set_attribute(self, key: str, value: Any) -> None: ...
    def set_attributes(self, attributes: dict[str, Any]) -> None: ...


class _NoSpan:
    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: dict[str, Any]) -> None:
        pass


class Tracing:
    """The parse pipeline's spans; every call is a no-op without a tracer."""

    def __init__(self, tracer: Any = None, provider: Any = None) -> None:
        self._tracer = tracer
        self._provider = provider  # shut down (flushed) with the app when we made it

    @property
    def enabled(self) -> bool:
        return self._tracer is not None

    @contextlib.contextmanager
    def span(self, name: str, **attributes: Any) -> Iterator[Span]:
        if self._tracer is None:
            yield _NoSpan()
            return
        clean = {f"docparser.{k}": v for k, v in attributes.items() if v is not None}
        with self._tracer.start_as_current_span(name, attributes=clean) as span:
            yield span

    def shutdown(self) -> None:
        if self._provider is not None:
            self._provider.shutdown()


def _otlp_provider(version: str) -> Any:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create(
        {
            "service.name": os.environ.get("OTEL_SERVICE_NAME", "docparser-runtime"),
            "service.version": version,
        }
    )
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def install_tracing(app: FastAPI, *, enabled: bool, version: str, provider: Any = None) -> Tracing:
    """Instrument ``app`` when ``enabled``; ``provider``: a tracer provider of the caller's
    (tests), else one exporting over OTLP/HTTP that the app shuts down with itself."""
    if not enabled:
        return Tracing()
    try:
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
    except ImportError as exc:
        raise TracingUnavailable(
            "DOCPARSER_TRACING is on but OpenTelemetry is not installed: "
            "pip install 'docparser-runtime[otel]' (the GPU image has it; the CPU image does not)"
        ) from exc
    owned = provider is None
    if owned:
        provider = _otlp_provider(version)
    FastAPIInstrumentor.instrument_app(app, tracer_provider=provider, excluded_urls=UNTRACED_ROUTES)
    tracer = provider.get_tracer("docparser_runtime")
    return Tracing(tracer, provider if owned else None)

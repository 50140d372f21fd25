"""Run the real app in-process (lifespan included) and talk to it over httpx's ASGI transport."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import httpx
from docparser_runtime.engines.base import Engine
from docparser_runtime.server.app import create_app
from docparser_runtime.settings import Settings
from engines_for_tests import GatedEngine
from prometheus_client.parser import text_string_to_metric_families

JOBS = "/v1/jobs"


def upload(data: bytes, name: str = "doc.pdf", **fields):
    """httpx keyword arguments of a multipart upload of ``data`` (as a client's ``file``)."""
    return {"files": {"file": (name, data, "application/octet-stream")}, "data": fields}


def make_settings(**overrides) -> Settings:
    # decode_workers=0: in-process decoding; the sandbox has its own tests (test_sandbox)
    # and the live-server suites run with the production default.
    base = {"default_tier": 0, "max_wait_ms": 2.0, "request_timeout_s": 30.0, "decode_workers": 0}
    return Settings(**{**base, **overrides})


async def wait_ready(client: httpx.AsyncClient, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while (await client.get("/readyz")).status_code != 200:
        if time.monotonic() > end:
            raise AssertionError("app never became ready")
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def serving(
    settings: Settings | None = None,
    engine: Engine | None = None,
    *,
    ready: bool = True,
    **app_kwargs,
) -> AsyncIterator[tuple]:
    """Yield (app, client, engine) with the lifespan running; waits for /readyz 200."""
    engine = engine if engine is not None else GatedEngine()
    app = create_app(settings or make_settings(), engine, **app_kwargs)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://testserver", timeout=60
        ) as client:
            if ready:
                await wait_ready(client)
            yield app, client, engine


async def scrape(client) -> dict[tuple[str, tuple], float]:
    resp = await client.get("/metrics")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(resp.text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples, name, **labels) -> float:
    """Sum of ``name``'s samples that carry ``labels`` (others, such as the request series'
    ``model`` / ``version``, may be there too)."""
    wanted = set(labels.items())
    return sum(v for (n, got), v in samples.items() if n == name and wanted <= set(got))

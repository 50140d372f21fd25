"""A recording reverse proxy in front of a real API server (tests only, 127.0.0.1).

Why: "a no-op resync performs zero write requests" must be checked on the requests the API
server received from the operator (kopf's and ours), not on the operator's own counters. The
emulator records natively; for real servers the operator talks plain HTTP to this proxy, which
records method, path, query and User-Agent, then forwards over TLS with the real credentials.
Watch streams are relayed chunk by chunk.
"""

from __future__ import annotations

import ssl
from typing import Any

import aiohttp
import aiohttp.web
from kube_cluster import Recorded

HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "authorization"}


class RecordingProxy:
    def __init__(self, configuration: Any) -> None:
        self.cfg = configuration
        self._records: list[Recorded] = []
        self._runner: aiohttp.web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    def records(self) -> list[Recorded]:
        return list(self._records)

    def _auth(self) -> dict[str, str]:
        headers = {}
        for auth in self.cfg.auth_settings().values():
            if auth.get("in") == "header" and auth.get("value"):
                headers[auth["key"]] = auth["value"]
        return headers

    async def start(self) -> int:
        ctx = (
            ssl.create_default_context(cafile=self.cfg.ssl_ca_cert)
            if self.cfg.ssl_ca_cert
            else None
        )
        if ctx is not None and self.cfg.cert_file:
            ctx.load_cert_chain(self.cfg.cert_file, self.cfg.key_file)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ctx if ctx is not None else False),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            auto_decompress=False,
        )
        app = aiohttp.web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = aiohttp.web.AppRunner(app, shutdown_timeout=1.0)
        await self._runner.setup()
        site = aiohttp.web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        return site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        self._records.append(
            Recorded(
                method=request.method.upper(),
                path=request.path,
                query=dict(request.query),
                user_agent=request.headers.get("User-Agent", ""),
            )
        )
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        headers.update(self._auth())
        body = await request.read()
        assert self._session is not None
        url = self.cfg.host.rstrip("/") + request.rel_url.path_qs
        async with self._session.request(
            request.method, url, headers=headers, data=body or None
        ) as upstream:
            response = aiohttp.web.StreamResponse(status=upstream.status)
            for k, v in upstream.headers.items():
                if k.lower() not in HOP_HEADERS:
                    response.headers[k] = v
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

"""A small blocking HTTP client for the server's JSON API, on the standard library.

WHY not httpx or the ``openai`` package: the runtime image does not ship them, and a CLI
that uploads one file and polls one batch needs no connection pool. Uploads stream from a
file (a batch input can be 200 MB) and downloads stream to one, so neither is held in
memory. Every failure is an ``ApiError`` carrying the server's ``{"error": {"code",
"message"}}`` when it sent one, so the CLI prints a reason code, never a traceback.
"""

from __future__ import annotations

import http.client
import json
import os
import uuid
from collections.abc import Iterator
from typing import IO, Any
from urllib.parse import urlsplit

_CHUNK = 1 << 20


class ApiError(Exception):
    """A request that failed: HTTP status (0: no reply), reason code and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class ApiClient:
    """Requests to one server (``http://`` or ``https://``), each on a fresh connection."""

    def __init__(self, url: str, api_key: str | None, *, timeout_s: float = 120.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ApiError(0, "invalid_url", f"--url must be http(s)://host[:port], got {url!r}")
        if parts.query or parts.fragment or parts.username:
            raise ApiError(0, "invalid_url", "--url takes no query, fragment or user info")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        try:
            self._port = parts.port
        except ValueError:
            raise ApiError(0, "invalid_url", f"--url has a bad port: {url!r}") from None
        self._base = parts.path.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = timeout_s

    def _connection(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=self._timeout)

    def _send(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        conn = self._connection()
        try:
            conn.request(
                method, self._base + path, body=body, headers={**self._headers, **(headers or {})}
            )
            reply = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise ApiError(0, "server_unreachable", f"{method} {path}: {exc}") from None
        if reply.status >= 300:
            text = reply.read(64 * 1024)
            conn.close()
            raise _error_of(reply.status, text)
        return conn, reply

    def json(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        """One JSON request; the decoded JSON reply."""
        body = None if payload is None else json.dumps(payload).encode()
        headers = {} if body is None else {"Content-Type": "application/json"}
        conn, reply = self._send(method, path, body, headers)
        try:
            return json.loads(reply.read())
        except ValueError:
            raise ApiError(reply.status, "invalid_reply", f"{path}: not JSON") from None
        finally:
            conn.close()

    def upload(self, path: str, fields: dict[str, str], name: str, file: IO[bytes]) -> Any:
        """``multipart/form-data`` with ``fields`` and one file part streamed from ``file``."""
        boundary = uuid.uuid4().hex
        head = b"".join(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
            for k, v in fields.items()
        )
        head += (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
            "Content-Type: application/jsonl\r\n\r\n"
        ).encode()
        tail = f"\r\n--{boundary}--\r\n".encode()
        size = os.fstat(file.fileno()).st_size
        file.seek(0)

        def parts() -> Iterator[bytes]:
            yield head
            while chunk := file.read(_CHUNK):
                yield chunk
            yield tail

        headers = {
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "Content-Length": str(len(head) + size + len(tail)),
        }
        conn, reply = self._send("POST", path, parts(), headers)
        try:
            return json.loads(reply.read())
        except ValueError:
            raise ApiError(reply.status, "invalid_reply", f"{path}: not JSON") from None
        finally:
            conn.close()

    def download(self, path: str, into: IO[bytes]) -> None:
        """The reply's bytes, streamed into ``into``."""
        conn, reply = self._send("GET", path)
        try:
            while chunk := reply.read(_CHUNK):
                into.write(chunk)
        except (OSError, http.client.HTTPException) as exc:
            raise ApiError(0, "server_unreachable", f"GET {path}: {exc}") from None
        finally:
            conn.close()


def _error_of(status: int, text: bytes) -> ApiError:
    try:
        error = json.loads(text)["error"]
        return ApiError(status, str(error["code"]), str(error["message"]))
    except (ValueError, KeyError, TypeError):
        return ApiError(status, f"http_{status}", text[:200].decode("utf-8", "replace"))

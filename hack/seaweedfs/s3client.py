"""A small S3 client (AWS Signature Version 4 over httpx) for the tests' own reads and writes.

WHY not boto3 or s3fs here: botocore pins ``python-dateutil<3`` and the operator's Kubernetes
client needs ``>=3``, so the test venv cannot hold it (the runtime under test runs from
``.venv-cloud``, which has s3fs). A client written from the public SigV4 rules is also a
second, independent reader: an object the runtime wrote through s3fs is checked through a
different S3 implementation, not the same library that wrote it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import hmac
import xml.etree.ElementTree as ET
from urllib.parse import quote

import httpx

REGION = "us-east-1"
_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


class S3Error(Exception):
    """A reply other than 2xx: its status and the server's S3 error code."""

    def __init__(self, method: str, path: str, reply: httpx.Response) -> None:
        code = ""
        with contextlib.suppress(ET.ParseError):
            code = ET.fromstring(reply.content).findtext("Code") or ""
        super().__init__(f"{method} {path}: {reply.status_code} {code} {reply.text[:300]}")
        self.status_code = reply.status_code
        self.code = code


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


class S3Client:
    """Path-style requests (``http://host:port/bucket/key``) signed with one access key."""

    def __init__(self, endpoint: str, access_key: str, secret_key: str) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.access_key, self.secret_key = access_key, secret_key
        self._http = httpx.Client(timeout=30)

    def close(self) -> None:
        self._http.close()

    def request(
        self, method: str, path: str, *, query: dict[str, str] | None = None, body: bytes = b""
    ) -> httpx.Response:
        """One signed request; raises ``S3Error`` unless the reply is 2xx."""
        now = dt.datetime.now(dt.UTC)
        stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        canonical_path = quote(path, safe="/-_.~")
        pairs = sorted(
            (quote(k, safe="-_.~"), quote(v, safe="-_.~")) for k, v in (query or {}).items()
        )
        canonical_query = "&".join(f"{k}={v}" for k, v in pairs)
        host = httpx.URL(self.endpoint).netloc.decode()
        payload = hashlib.sha256(body).hexdigest()
        headers = {"host": host, "x-amz-content-sha256": payload, "x-amz-date": stamp}
        signed = ";".join(sorted(headers))
        canonical = "\n".join(
            [
                method,
                canonical_path,
                canonical_query,
                "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)),
                signed,
                payload,
            ]
        )
        scope = f"{day}/{REGION}/s3/aws4_request"
        to_sign = "\n".join(
            ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
        )
        key = _hmac(
            _hmac(_hmac(_hmac(f"AWS4{self.secret_key}".encode(), day), REGION), "s3"),
            "aws4_request",
        )
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={self.access_key}/{scope}, "
            f"SignedHeaders={signed}, Signature={signature}"
        )
        url = self.endpoint + canonical_path + (f"?{canonical_query}" if canonical_query else "")
        reply = self._http.request(method, url, headers=headers, content=body)
        if not reply.is_success:
            raise S3Error(method, path, reply)
        return reply

    def create_bucket(self, bucket: str) -> None:
        """Creates ``bucket``; one that this key already owns is fine."""
        try:
            self.request("PUT", f"/{bucket}")
        except S3Error as exc:
            if exc.code != "BucketAlreadyOwnedByYou":
                raise

    def put(self, bucket: str, key: str, data: bytes) -> None:
        self.request("PUT", f"/{bucket}/{key}", body=data)

    def get(self, bucket: str, key: str) -> bytes:
        return self.request("GET", f"/{bucket}/{key}").content

    def delete(self, bucket: str, key: str) -> None:
        self.request("DELETE", f"/{bucket}/{key}")

    def list(self, bucket: str, prefix: str = "") -> list[str]:
        """Every key under ``prefix`` (ListObjectsV2, following continuation tokens)."""
        keys: list[str] = []
        token: str | None = None
        for _ in range(10_000):  # bounded: 10,000 pages of 1,000 keys
            query = {"list-type": "2", "prefix": prefix}
            if token:
                query["continuation-token"] = token
            root = ET.fromstring(self.request("GET", f"/{bucket}", query=query).content)
            keys += [c.findtext(f"{_NS}Key") or "" for c in root.findall(f"{_NS}Contents")]
            token = root.findtext(f"{_NS}NextContinuationToken")
            if root.findtext(f"{_NS}IsTruncated") != "true" or not token:
                return keys
        raise RuntimeError(f"listing s3://{bucket}/{prefix} did not end")

"""pytest wiring for the real S3 server: the session fixture ``seaweed_s3`` and a report line.

WHY a plugin (registered by tests/conftest.py): every suite that needs S3 shares one way to get
it, and the report header says whether the real server could run, so an S3 test skipped for a
missing build is never mistaken for a pass against S3.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .seaweed import VERSION, SeaweedS3, SeaweedUnavailable, weed_binary


def pytest_report_header(config: pytest.Config) -> str:
    try:
        return f"s3: SeaweedFS weed {VERSION} at {weed_binary()}"
    except SeaweedUnavailable as exc:
        return f"s3: NOT available, S3 tests skip: {exc}"


@pytest.fixture(scope="session")
def seaweed_s3() -> Iterator[SeaweedS3]:
    """One real S3 server (``weed server -filer -s3``) for the session; tests make their own
    buckets with ``seaweed_s3.client.create_bucket``. Skips, saying why, when weed is not built
    or does not start within its bounded wait."""
    try:
        server = SeaweedS3().start()
    except SeaweedUnavailable as exc:
        pytest.skip(f"real S3 server unavailable: {exc}")
    try:
        yield server
    finally:
        server.stop()

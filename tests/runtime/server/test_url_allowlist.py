"""No server-side URL fetching unless the host is on the allow-list."""

from __future__ import annotations

import pytest
from docparser_runtime.errors import InvalidInput
from docparser_runtime.server.guards.url_allowlist import check_url_allowed, is_url_allowed

ALLOW = ["docs.example.com", "*.cdn.example.org", "https://secure.example.net", "10.0.0.5:8080"]


@pytest.mark.parametrize(
    "url",
    [
        "https://docs.example.com/a.png",
        "http://docs.example.com/a.png",
        "https://DOCS.Example.com./a.png",
        "https://img.cdn.example.org/x.jpg",
        "https://a.b.cdn.example.org/x.jpg",
        "https://secure.example.net/scan.pdf",
        "http://10.0.0.5:8080/page.png",
    ],
)
def test_allowed(url):
    assert is_url_allowed(url, ALLOW)
    check_url_allowed(url, ALLOW)


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",  # cloud metadata
        "http://localhost:8000/metrics",
        "https://docs.example.com.evil.io/a.png",  # suffix trick
        "https://evil.io/docs.example.com",
        "https://docs.example.com@evil.io/a.png",  # userinfo confusion
        "https://user:pw@docs.example.com/a.png",
        "https://cdn.example.org/x.jpg",  # wildcard does not include the apex
        "http://secure.example.net/scan.pdf",  # scheme pinned to https
        "https://docs.example.com:8443/a.png",  # non-default port not listed
        "http://10.0.0.5/page.png",  # listed with port 8080 only
        "file:///etc/passwd",
        "ftp://docs.example.com/a.png",
        "data:image/png;base64,AAAA",
        "docs.example.com/a.png",
        "http://[::1]/",
        "http://docs.example.com:99999/",
    ],
)
def test_refused(url):
    assert not is_url_allowed(url, ALLOW)
    with pytest.raises(InvalidInput) as exc:
        check_url_allowed(url, ALLOW)
    assert exc.value.code == "url_not_allowed"


def test_empty_allowlist_allows_nothing():
    assert not is_url_allowed("https://docs.example.com/a.png", [])


def test_malformed_entries_are_ignored():
    assert not is_url_allowed("https://x.io/", ["", "user@x.io", "gopher://x.io", "x.io:notaport"])
    assert is_url_allowed("https://x.io/", ["", "x.io"])

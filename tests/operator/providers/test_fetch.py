"""The guarded client of the operator's own requests (providers/fetch.py, urls.py)
against real HTTP servers on 127.0.0.1, counted from the server's side.

What a DocParser's author must not get from the operator's network position: a connection to
a URL no admin allowed (however it is spelled), a redirect followed elsewhere, a remote body
echoed into status, or a reply large or slow enough to stall the reconciler.
"""

from __future__ import annotations

import ast
import json
import re
import ssl
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from docparser_operator.api.analysis_spec import PrometheusSource
from docparser_operator.api.models import DocParser
from docparser_operator.providers import analysis_run, sources
from docparser_operator.providers.base import SourceUnavailable, TrackQuery
from docparser_operator.providers.fetch import Fetcher, FetchError, NotAllowed
from docparser_operator.providers.golden import GoldenUnavailable
from docparser_operator.providers.golden import guarded as guarded_post
from docparser_operator.providers.golden import read as golden_read
from docparser_operator.providers.prometheus import PromQL
from docparser_operator.providers.urls import AllowList, BadURL, parse
from dp_helpers import CANARY_WEIGHTS, docparser
from local_http import LocalServer, closed_port, reply, serving

SECRET = "s3cr3t-token-from-the-internal-service"
SETTING = "DOCPARSER_OPERATOR_PROMETHEUS_URLS"


def fetcher_for(*entries: str) -> Fetcher:
    return Fetcher(AllowList.of(entries, SETTING))


@pytest.fixture
def leaky() -> Iterator[LocalServer]:
    """An internal service that answers JSON with a secret in it, and a 500 with its own
    reason phrase (what an admin endpoint or the API server would send)."""

    def secret_json(h: BaseHTTPRequestHandler) -> None:
        body = {"items": [{"token": SECRET}], "status": "Failure", "message": SECRET}
        reply(h, 200, json.dumps(body).encode(), content_type="application/json")

    def prom_error(h: BaseHTTPRequestHandler) -> None:
        body = {"status": "error", "errorType": "bad_data", "error": f"parse error: {SECRET}"}
        reply(h, 400, json.dumps(body).encode(), content_type="application/json")

    def odd_error(h: BaseHTTPRequestHandler) -> None:
        body = {"status": "error", "errorType": SECRET}
        reply(h, 503, json.dumps(body).encode(), phrase=SECRET)

    routes = {
        "/api/v1/query": secret_json,
        "/prom-400/api/v1/query": prom_error,
        "/prom-503/api/v1/query": odd_error,
        "/v1/document/parse": odd_error,
    }
    with serving(routes) as server:
        yield server


def test_a_url_outside_the_list_is_refused_before_any_connection(leaky: LocalServer) -> None:
    port = leaky.port
    allowed = fetcher_for(f"http://127.0.0.1:{port}/prometheus/", f"http://localhost:{port}/")
    for url in (
        f"http://127.0.0.1:{port}/api/v1/query",  # same host, outside the path prefix
        f"http://127.0.0.1:{port}/prometheusX/api/v1/query",  # shares the prefix's letters
        f"http://127.0.0.1:{port}/prometheus/../api/v1/query",  # a dot segment
        f"http://127.0.0.1:{port}/prometheus/%2e%2e/api/v1/query",  # an encoded one
        f"http://127.0.0.1:{port}@evil.example/prometheus/",  # userinfo: refused outright
        f"http://user:pw@127.0.0.1:{port}/prometheus/",
        f"http://2130706433:{port}/prometheus/",  # 127.0.0.1 as one number
        f"http://127.1:{port}/prometheus/",  # ... as inet_aton's short form
        f"http://0x7f.0.0.1:{port}/prometheus/",  # ... in hex
        f"http://[::ffff:127.0.0.1]:{port}/prometheus/",  # ... IPv4-mapped IPv6
        f"https://127.0.0.1:{port}/prometheus/",  # another scheme
        f"http://127.0.0.1:{closed_port()}/prometheus/",  # another port
        f"http://127.0.0.1:{port}/prometheus/ x",
        "file:///etc/passwd",
    ):
        with pytest.raises(NotAllowed):
            allowed.get(url, timeout_s=2, max_bytes=1024)
    # A name rule never admits an IP literal, even one the name resolves to.
    with pytest.raises(NotAllowed, match=f"not under {SETTING}"):
        allowed.get(f"http://127.0.0.1:{port}/", timeout_s=2, max_bytes=1024)
    assert leaky.seen.connections == 0
    # The same spellings normalise to the allowed prefix: these do connect.
    for url in (f"HTTP://127.0.0.1:{port}/prometheus/x", f"http://LOCALHOST.:{port}/api/v1/query"):
        assert allowed.get(url, timeout_s=5, max_bytes=1024).status in (200, 404)
    assert leaky.seen.connections == 2


def test_the_allow_list_refuses_bad_entries_at_start_up() -> None:
    for entry in ("prometheus:9090", "http://u@p:9090/", "http://p:9090/?x=1", "ftp://p/"):
        with pytest.raises(BadURL, match=SETTING):
            AllowList.of([entry], SETTING)
    with pytest.raises(BadURL):
        sources.guarded(["http://127.1:9090/"], ())
    assert parse("http://Prom.Monitoring.svc.:80/x").origin == "http://prom.monitoring.svc:80"


def test_a_bad_entry_stops_the_operator_at_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    import pydantic
    from docparser_operator.controller.settings import OperatorSettings

    monkeypatch.setenv("DOCPARSER_OPERATOR_PROMETHEUS_URLS", "http://prom:9090/, http://u@x/")
    with pytest.raises(pydantic.ValidationError, match=re.escape(f"{SETTING}: 'http://u@x/'")):
        OperatorSettings()
    monkeypatch.setenv("DOCPARSER_OPERATOR_PROMETHEUS_URLS", "http://prom.monitoring.svc:9090/")
    monkeypatch.setenv("DOCPARSER_OPERATOR_GOLDEN_SOURCES", "file:///golden/,https://127.1/g/")
    with pytest.raises(
        pydantic.ValidationError, match=re.escape("GOLDEN_SOURCES: 'https://127.1/g/'")
    ):
        OperatorSettings()
    monkeypatch.setenv("DOCPARSER_OPERATOR_GOLDEN_SOURCES", "file:///golden/,s3://qa/")
    assert OperatorSettings().prometheus_url_prefixes == ("http://prom.monitoring.svc:9090/",)


def test_a_name_is_resolved_once_and_a_metadata_address_is_never_dialled(
    leaky: LocalServer,
) -> None:
    asked: list[str] = []

    def resolver(answers: list[str]) -> Callable[[str, int], list[str]]:
        def resolve(host: str, port: int) -> list[str]:
            asked.append(host)
            return answers

        return resolve

    url = f"http://prometheus.monitoring.svc:{leaky.port}/api/v1/query"
    pinned = fetcher_for(f"http://prometheus.monitoring.svc:{leaky.port}/")
    pinned.resolve = resolver(["127.0.0.1"])
    assert pinned.get(url, timeout_s=5, max_bytes=4096).status == 200
    assert asked == ["prometheus.monitoring.svc"]  # one lookup, then that address is dialled
    assert leaky.seen.requests[-1][2] == f"prometheus.monitoring.svc:{leaky.port}"  # its Host
    for answers in (["169.254.169.254"], ["127.0.0.1", "169.254.169.254"], ["::ffff:a9fe:a9fe"]):
        pinned.resolve = resolver(answers)
        with pytest.raises(NotAllowed, match="never dials"):
            pinned.get(url, timeout_s=5, max_bytes=4096)
    assert leaky.seen.connections == 1
    # The pods' rule: an IP literal on the runtime's port; metadata refused even so.
    pods = Fetcher(AllowList.pods(8000))
    for url in ("http://169.254.169.254:8000/metrics", "http://10.0.0.1:9090/metrics"):
        with pytest.raises(NotAllowed):
            pods.get(url, timeout_s=1, max_bytes=1024)
    with pytest.raises(NotAllowed):
        pods.get("http://prometheus.monitoring.svc:8000/metrics", timeout_s=1, max_bytes=1024)


def test_a_redirect_is_not_followed() -> None:
    with serving({"*": lambda h: reply(h, 200, b"internal")}) as inside:
        hop = {"Location": f"{inside.url}/admin"}
        with serving({"*": lambda h: reply(h, 302, b"", headers=hop)}) as bouncer:
            # Both are allowed: it is the client, not the list, that stops the hop.
            both = fetcher_for(bouncer.url + "/", inside.url + "/")
            with pytest.raises(FetchError, match=r"^HTTP 302 \(redirects are not followed\)$"):
                both.get(f"{bouncer.url}/api/v1/query", timeout_s=5, max_bytes=1024)
            source = PromQL(PrometheusSource(url=bouncer.url), both)
            with pytest.raises(SourceUnavailable, match="HTTP 302"):
                source.measure(TrackQuery("ocr", "abc123", [], 60))
            assert bouncer.seen.connections >= 1
        assert inside.seen.connections == 0


def test_no_remote_body_reaches_status(leaky: LocalServer) -> None:
    """The author points the analysis at an allowed-but-wrong JSON endpoint, at a Prometheus
    answering an error, at pods answering 500 with their own reason phrase: status says the
    HTTP status, the errorType Prometheus defines, a reason code; never a byte of the body."""
    allowed = fetcher_for(leaky.url + "/")
    said = []
    for path in ("", "/prom-400", "/prom-503"):
        source = PromQL(PrometheusSource(url=leaky.url + path), allowed)
        with pytest.raises(SourceUnavailable) as caught:
            source.measure(TrackQuery("ocr", "abc123", [], 60))
        said.append(str(caught.value))
    assert said[0].endswith("HTTP 200, errorType unknown"), said
    assert said[1].endswith("HTTP 400, errorType bad_data"), said
    assert said[2].endswith("HTTP 503, errorType unknown"), said
    assert not [s for s in said if SECRET in s]

    # Through a whole analysis pass: the message status carries.
    resource = docparser("walk", replicas={"min": 2, "max": 2})
    resource["spec"]["canary"] = {
        "weights": CANARY_WEIGHTS,
        "analysis": {"intervalSeconds": 5, "prometheus": {"url": leaky.url}},
    }
    resource["metadata"].update(namespace="ocr", generation=1)
    model = DocParser.from_resource(resource)
    revisions = {"stable": "s1", "canary": "c1"}
    state = analysis_run.begin(model, revisions)
    assert state is not None
    guarded = sources.guarded([leaky.url], ())
    memory = analysis_run.AnalysisMemory()
    started = analysis_run.finish(
        memory, guarded, model, state, revisions, [], serving=True, now="2026-12-01T10:00:00Z"
    )
    after = analysis_run.finish(
        memory, guarded, model, started, revisions, [], serving=True, now="2026-12-01T10:00:06Z"
    )
    assert after.message == "cannot query Prometheus: HTTP 200, errorType unknown", after.message
    assert SECRET not in json.dumps(after.to_status().to_wire())

    # A pod's golden parse that fails: the track, its pod, the code.
    pod = {
        "metadata": {"name": "p"},
        "status": {"podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    to_pod = Fetcher(AllowList.pods(leaky.port))
    with pytest.raises(GoldenUnavailable) as caught_golden:
        docs = {"inv": ("inv.png", b"png", "Total")}
        golden_read(
            docs,
            [pod],
            [pod],
            lambda url, f, d: guarded_post(to_pod)(url.replace(":8000/", f":{leaky.port}/"), f, d),
        )
    assert str(caught_golden.value) == "the canary pod 127.0.0.1: HTTP 503"


def test_a_huge_or_slow_answer_is_cut() -> None:
    def endless(h: BaseHTTPRequestHandler) -> None:  # chunked, no length: cut by counting
        h.send_response(200)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        chunk = b"x" * 65536
        for _ in range(4096):  # at most 256 MiB, ended by the client going away
            try:
                h.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except OSError:
                return

    def trickle(
        h: BaseHTTPRequestHandler,
    ) -> None:  # a byte every 50 ms: each read is quick, the whole is not
        h.send_response(200)
        h.send_header("Content-Length", "100000")
        h.end_headers()
        for _ in range(600):  # at most 30 s, ended by the client going away
            try:
                h.wfile.write(b"x")
                h.wfile.flush()
            except OSError:
                return
            time.sleep(0.05)

    def silent(h: BaseHTTPRequestHandler) -> None:  # accepts, never answers
        time.sleep(10)

    def big(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", str(10**9))
        h.end_headers()

    routes = {"/endless": endless, "/trickle": trickle, "/silent": silent, "/big": big}
    routes["/small"] = lambda h: reply(h, 200, b"ok")
    with serving(routes) as server:
        client = fetcher_for(server.url + "/")
        for path, bound, expected in (
            ("/endless", 1_000_000, r"^TooLarge \(over 1000000 bytes\)$"),
            ("/big", 1_000_000, r"^TooLarge"),
            ("/trickle", 10**6, r"^Timeout$"),
            ("/silent", 10**6, r"^Timeout$"),
        ):
            began = time.monotonic()
            with pytest.raises(FetchError, match=expected):
                client.get(server.url + path, timeout_s=1.0, max_bytes=bound)
            took = time.monotonic() - began
            assert took < 2.5, (path, took)  # the deadline is the whole exchange's
        assert client.get(server.url + "/small", timeout_s=2, max_bytes=2).ok() == b"ok"


def test_every_operator_request_goes_through_the_guarded_client() -> None:
    """No module but fetch.py imports an HTTP client (the API server's client aside)."""
    root = Path(__file__).resolve().parents[3] / "operator" / "docparser_operator"
    clients = {"http.client", "urllib.request", "httpx", "aiohttp", "requests", "urllib3"}
    found = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            if any(n in clients for n in names):
                found.append(path.relative_to(root).as_posix())
    assert sorted(set(found)) == ["providers/fetch.py"]


def _tls_pair(tmp_path: Path, name: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server context with a certificate for ``name``, client context trusting only it)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert_file, key_file)
    return server, ssl.create_default_context(cafile=str(cert_file))


def test_https_goes_to_the_pinned_address_with_the_names_certificate(tmp_path: Path) -> None:
    """TLS to the one address the name resolved to, verified for the name (SNI and Host);
    a certificate for another name fails as ``TLSError``, without the certificate's names."""
    server_tls, client_tls = _tls_pair(tmp_path, "prometheus.monitoring.svc")
    routes = {"*": lambda h: reply(h, 200, b'{"status": "success"}')}
    with serving(routes, tls=server_tls) as server:
        entries = (
            f"https://prometheus.monitoring.svc:{server.port}/",
            f"https://x.test:{server.port}/",
        )
        client = Fetcher(
            AllowList.of(entries, SETTING), lambda host, port: ["127.0.0.1"], client_tls
        )
        url = f"https://prometheus.monitoring.svc:{server.port}/api/v1/query"
        assert client.get(url, timeout_s=5, max_bytes=1024).ok() == b'{"status": "success"}'
        assert server.seen.requests[-1][2] == f"prometheus.monitoring.svc:{server.port}"
        with pytest.raises(FetchError) as caught:
            client.get(f"https://x.test:{server.port}/", timeout_s=5, max_bytes=1024)
        assert str(caught.value) == "TLSError"

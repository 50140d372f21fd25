"""Tenant-chosen URLs and URIs (api/uri.py, providers/urls.py), one class per test,
against real HTTP servers and folders on this machine.

1. An allowed Prometheus URL carrying its own ``?query=`` (or fragment, or userinfo) is
   refused as ``SourceNotAllowed``, and no request ever carries a parameter the author wrote.
2. Golden prefixes are per namespace (``{namespace}``): a DocParser cannot name another
   namespace's folder, however the path is spelled, and no document of it is ever posted.
3. Any string as a URL: the one parser answers a reason code or a canonical form, never
   another exception; nothing the allow-list refuses is ever resolved or connected to.
"""

from __future__ import annotations

import contextlib
import json
import urllib.parse
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pydantic
import pytest
from docparser_operator.api import uri as uris
from docparser_operator.api.analysis_spec import CanaryAnalysis, PrometheusSource
from docparser_operator.api.models import DocParser
from docparser_operator.api.uri import BadURI
from docparser_operator.core.plan.children import Observed
from docparser_operator.providers import analysis_run, sources
from docparser_operator.providers.base import SourceUnavailable, TrackQuery
from docparser_operator.providers.fetch import Fetcher, NotAllowed
from docparser_operator.providers.golden import GoldenUnavailable
from docparser_operator.providers.golden_uri import GoldenSets
from docparser_operator.providers.urls import AllowList, BadURL, check_entries
from dp_helpers import CANARY_WEIGHTS, decide_on, docparser
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from local_http import LocalServer, reply, serving

MARKER = "docparser_marker_total"  # what a tenant's own query would ask for
PNG = b"\x89PNG\r\n\x1a\n fake scan"
VECTOR = {"status": "success", "data": {"resultType": "vector", "result": []}}


def prometheus_route(h: BaseHTTPRequestHandler) -> None:
    reply(h, 200, json.dumps(VECTOR).encode(), content_type="application/json")


@pytest.fixture(scope="module")
def prom() -> Iterator[LocalServer]:
    """A stand-in Prometheus: every path answers an empty vector; requests are recorded."""
    with serving({"*": prometheus_route}) as server:
        yield server


def walk(url: str, namespace: str = "ocr") -> DocParser:
    resource = docparser("walk", replicas={"min": 2, "max": 2})
    resource["spec"]["canary"] = {
        "weights": CANARY_WEIGHTS,
        "analysis": {"intervalSeconds": 5, "prometheus": {"url": url}},
    }
    resource["metadata"].update(namespace=namespace, generation=1)
    return DocParser.from_resource(resource)


def two_passes(guarded: sources.Sources, model: DocParser) -> str:
    """A window's start and end through the executor; the message status would carry."""
    revisions = {"stable": "s1", "canary": "c1"}
    state = analysis_run.begin(model, revisions)
    assert state is not None
    memory = analysis_run.AnalysisMemory()
    for now in ("2026-12-01T10:00:00Z", "2026-12-01T10:00:06Z"):
        state = analysis_run.finish(
            memory, guarded, model, state, revisions, [], serving=True, now=now
        )
    return state.message


# 1. ------------------------------------------------------------------------------------------


def test_a_query_in_the_authors_prometheus_url_is_refused_and_never_sent(
    prom: LocalServer,
) -> None:
    guarded = sources.guarded([prom.url + "/"], ())
    before = len(prom.seen.requests)
    for tail, code in (
        (f"/?query={MARKER}", "URIQuery"),
        (f"/api/v1/query?query={MARKER}", "URIQuery"),
        (f"?query={MARKER}", "URIQuery"),
        (f"/?query={MARKER}&query=", "URIQuery"),
        ("/?", "URIQuery"),
        (f"/#{MARKER}", "URIFragment"),
        (f"/?query={MARKER}#", "URIFragment"),
    ):
        model = walk(prom.url + tail)
        reasons = analysis_run.refusals(guarded, model)  # -> Degraded SourceNotAllowed
        assert len(reasons) == 1, (tail, reasons)
        assert reasons[0].startswith(f"spec.canary.analysis.prometheus.url: refused: {code}")
        assert MARKER not in reasons[0] and prom.url not in reasons[0], reasons
        message = two_passes(guarded, model)
        assert message == reasons[0], message  # the walk waits, saying the same rule
    userinfo = prom.url.replace("http://", f"http://{MARKER}@") + "/"
    (reason,) = analysis_run.refusals(guarded, walk(userinfo))
    assert "URIUserinfo" in reason and MARKER not in reason
    # The guarded client itself takes no query in a URL: only its own encoded parameters.
    with pytest.raises(NotAllowed, match="URIQuery"):
        Fetcher(AllowList.of([prom.url + "/"], "S")).get(
            f"{prom.url}/api/v1/query?query={MARKER}", timeout_s=2, max_bytes=1024
        )
    assert len(prom.seen.requests) == before, prom.seen.requests[before:]

    # An allowed URL: each request is rebuilt, one parameter, the operator's own PromQL.
    two_passes(guarded, walk(prom.url + "/prom/"))
    sent = prom.seen.requests[before:]
    assert sent, "the allowed Prometheus was queried"
    for _, path, _ in sent:
        where, _, query = path.partition("?")
        assert where == "/prom/api/v1/query", path
        params = urllib.parse.parse_qs(query, keep_blank_values=True)
        assert list(params) == ["query"] and len(params["query"]) == 1, params
        assert 'namespace="ocr"' in params["query"][0], params


# 2. ------------------------------------------------------------------------------------------


def golden_folder(root: Path, **expected: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for stem, text in expected.items():
        (root / f"{stem}.png").write_bytes(PNG + stem.encode())
        (root / f"{stem}.txt").write_text(text)
    return root


def test_golden_prefixes_are_per_namespace(tmp_path: Path) -> None:
    root = tmp_path / "goldens"
    golden_folder(root / "team" / "invoices", inv="Total 12 EUR")
    golden_folder(root / "team-b" / "payroll", salaries="Secret 99")
    golden_folder(root / "teamb" / "payroll", salaries="Secret 98")
    (root / "team" / "escape").symlink_to(root / "team-b")
    posted: list[str] = []

    def post(url: str, filename: str, document: bytes) -> str:
        posted.append(filename)
        return "Total 12 EUR"

    golden = GoldenSets((f"file://{root}/{{namespace}}/",), post)
    assert golden.refusal(f"file://{root}/team/invoices", "team") is None
    assert golden.refusal(f"file://{root}/team-b/payroll", "team-b") is None  # its own
    assert list(golden.load(f"file://{root}/team/invoices", "team")) == ["inv"]
    for uri in (
        f"file://{root}/team-b/payroll",  # another namespace's folder
        f"file://{root}/teamb/payroll",
        f"file://{root}/team/../team-b/payroll",  # a dot segment
        f"file://{root}/team/escape/payroll",  # a symlink out of the namespace's folder
        f"file://{root}/team%2F..%2Fteam-b/payroll",  # encoded separators
        f"file://{root}/team/%2e%2e/team-b/payroll",
        f"file://{root}/te%61m/invoices",  # an escape the store would not decode
        f"file://{root}/{{namespace}}/invoices",  # the placeholder is the admin's, not ours
        f"file://{root}/team-b",
        f"file://{root}",
    ):
        reason = golden.refusal(uri, "team")
        assert reason is not None, uri
        assert "payroll" not in reason and "salaries" not in reason, reason
        with pytest.raises(GoldenUnavailable) as caught:
            golden.load(uri, "team")
        assert "payroll" not in str(caught.value) and "salaries" not in str(caught.value)
    for namespace in ("", "..", "team/../team-b", "Team", "team-b/x", "%2e"):
        assert golden.refusal(f"file://{root}/team/invoices", namespace) is not None

    # Through the gate: a DocParser in `team` naming team-b's folder is refused, and not one
    # of team-b's documents reaches a pod.
    resource = docparser(
        "walk",
        canary={
            "weights": CANARY_WEIGHTS,
            "analysis": {"golden": {"uri": f"file://{root}/team-b/payroll"}},
        },
    )
    resource["metadata"]["namespace"] = "team"
    model = DocParser.from_resource(resource)
    parsed = replace(sources.guarded((), ()), golden=golden)
    (reason,) = analysis_run.refusals(parsed, model)
    assert reason.startswith("spec.canary.analysis.golden.uri: not under")
    assert "{namespace}" in reason and "payroll" not in reason, reason
    revisions = {"canary": "rc", "stable": "rs"}
    pods = [
        {
            "metadata": {"name": ip, "labels": {"docparser.io/revision": rev}},
            "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]},
        }
        for ip, rev in (("10.0.0.1", "rc"), ("10.0.0.2", "rs"))
    ]
    state = analysis_run.begin(model, revisions)
    assert state is not None
    after = analysis_run.finish(
        analysis_run.AnalysisMemory(), parsed, model, state, revisions, pods, serving=False, now="x"
    )
    assert after.phase == "Verifying" and "payroll" not in after.message, after.message
    assert posted == []  # not one of team-b's documents went to a pod


def test_prometheus_rules_may_be_per_namespace_too(prom: LocalServer) -> None:
    """``{namespace}`` in DOCPARSER_OPERATOR_PROMETHEUS_URLS: a path (or a host) per
    namespace, so one Prometheus proxy can enforce the tenant's own label."""
    guarded = sources.guarded([prom.url + "/{namespace}/"], ())
    assert analysis_run.refusals(guarded, walk(prom.url + "/ocr/", "ocr")) == []
    for url in (prom.url + "/ocr-b/", prom.url + "/ocr/../ocr-b/", prom.url + "/{namespace}/"):
        (reason,) = analysis_run.refusals(guarded, walk(url, "ocr"))
        assert "ocr-b" not in reason, reason
    hosts = AllowList.of(["http://prom-{namespace}.monitoring.svc:9090/"], "S").scoped("ocr")
    assert hosts.refusal("http://prom-ocr.monitoring.svc:9090/api") is None
    assert hosts.refusal("http://prom-ocr-b.monitoring.svc:9090/api") is not None
    assert check_entries(["s3://goldens/{namespace}/"], "S", uris.GOLDEN)
    for entry in ("s3://goldens/{ns}/", "http://p/{namespace}?x=1", "http://p:{namespace}/"):
        with pytest.raises(BadURL, match="S: "):
            check_entries([entry], "S", uris.GOLDEN)


# 3. ------------------------------------------------------------------------------------------

MALFORMED = (
    "http://[::1",
    "http://[zz::1]/",
    "http://[::1]x/",
    "http://h:٣٣/",
    "http://h:" + "9" * 1000,
    "http://h:99999999999999999999/",
    "http://h:0/",
    "http://h:/",
    "http://[fe80::1%25eth0]/",
    "http://a..b/",
    "http://xn--/",
    "http://h/%zz",
    "https://]/",
    "s3://[/x",
    "file://host/etc/passwd",
)


def test_a_malformed_url_is_a_reason_code_not_an_exception() -> None:
    guarded = sources.guarded(["http://h/"], ("http://h/", "s3://b/"))
    for url in MALFORMED:
        refusals = [guarded.golden.refusal(url, "ocr") or ""]
        if url.startswith("http"):  # the CRD's pattern admits each of these
            refusals += analysis_run.refusals(guarded, walk(url))
        for reason in refusals:
            code = reason.partition(": refused: ")[2].split(" ")[0]
            assert code in uris.REASONS, (url, reason)
    # weights.uri: the same parser; a malformed one is SpecInvalid, never a pod that fails.
    for uri, code in (("https://[::1/w", "URIHost"), ("s3://b/w?x#y", "URIFragment")):
        resource = docparser("walk")
        resource["spec"]["weights"]["uri"] = uri
        resource["metadata"].update(namespace="ocr", uid="u1", generation=1)
        with pytest.raises(pydantic.ValidationError, match=code):
            DocParser.from_resource(resource)
    presigned = "https://b.s3.amazonaws.com/w.tar?X-Amz-Signature=ab%2Fcd"
    assert uris.problem(presigned, uris.WEIGHTS) is None  # a query is a weights URL's own


_SCHEMES = ["http", "https", "HTTP", "s3", "gs", "file", "pvc", "ftp", "", "http:"]
_HOSTS = [
    "prom.test",
    "PROM.test.",
    "127.0.0.1",
    "127.1",
    "2130706433",
    "0x7f.0.0.1",
    "[::1]",
    "[::1",
    "::1]",
    "[zz::1]",
    "[::ffff:127.0.0.1]",
    "[fe80::1%25eth0]",
    "prom.test@evil.test",
    "evil.test#@prom.test",
    "a..b",
    "xn--",
    "\u210c.test",  # BLACK-LETTER CAPITAL H: IDNA maps it to h
    "",
]
_PORTS = [":{port}", "", ":", ":0", ":80", ":65536", ":99999999999", ":٣٣", ":+80", ": 80"]
_SEGMENTS = [
    "allowed",
    "ocr",
    "ocr-b",
    "..",
    ".",
    "%2e%2e",
    "%2F",
    "%",
    "%zz",
    "%41",
    "{namespace}",
]
_TAILS = ["", "?", f"?query={MARKER}", "#", "#x", "?a=1#b", "\\", " ", "\x00", "%00"]

segments = st.lists(st.one_of(st.sampled_from(_SEGMENTS), st.text(max_size=6)), max_size=4)
paths = segments.map(lambda s: "/" + "/".join(s) if s else "")
grammar = st.builds(
    lambda scheme, host, port, path, tail: f"{scheme}://{host}{port}{path}{tail}",
    st.sampled_from(_SCHEMES),
    st.one_of(st.sampled_from(_HOSTS), st.text(max_size=10)),
    st.one_of(st.sampled_from(_PORTS), st.integers(0, 10**25).map(lambda i: f":{i}")),
    paths,
    st.one_of(st.sampled_from(_TAILS), st.text(max_size=4)),
)
near_misses = st.builds(
    lambda path, tail: f"http://prom.test:{{port}}/allowed/ocr{path}{tail}",
    paths,
    st.sampled_from(_TAILS),
)
URLS = st.one_of(grammar, near_misses, st.text(max_size=40))


@pytest.fixture(scope="module")
def recording(prom: LocalServer) -> tuple[sources.Sources, list[str]]:
    """The production sources, allowed one path per namespace on ``prom`` (by a name that
    every lookup answers with this machine), and the names they looked up."""
    asked: list[str] = []

    def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]

    allowed = f"http://prom.test:{prom.port}/allowed/{{namespace}}/"
    return sources.guarded([allowed], [allowed], resolve=resolve), asked


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(url=URLS)
def test_any_string_is_a_reason_code_and_nothing_refused_is_dialled(
    prom: LocalServer, recording: tuple[sources.Sources, list[str]], url: str
) -> None:
    url = url.replace("{port}", str(prom.port))
    for grammar_ in (uris.HTTP, uris.GOLDEN, uris.WEIGHTS):
        try:
            uris.parse(url, grammar_)
        except BadURI as exc:
            assert exc.code in uris.REASONS
    guarded, asked = recording
    asked.clear()
    try:
        config = CanaryAnalysis(prometheus=PrometheusSource(url=url))
    except pydantic.ValidationError:
        config = None  # the CRD's pattern would not admit it either
    start = before = len(prom.seen.requests)
    if config is not None:
        refused = guarded.refusals(config, "ocr")
        with contextlib.suppress(SourceUnavailable):
            guarded.metrics(config, "ocr").measure(TrackQuery("ocr", "r1", [], 60))
        if refused:
            assert asked == [] and len(prom.seen.requests) == before, (url, refused)
        assert set(asked) <= {"prom.test"}, asked
    asked.clear()
    before = len(prom.seen.requests)
    golden_refused = guarded.golden.refusal(url, "ocr")
    with contextlib.suppress(GoldenUnavailable):
        guarded.golden.load(url, "ocr")
    if golden_refused is not None:
        assert asked == [] and len(prom.seen.requests) == before, (url, golden_refused)
    event("dialled" if len(prom.seen.requests) > start else "not dialled")
    for _, path, host in prom.seen.requests[start:]:  # what was dialled: the rule's only
        assert host == f"prom.test:{prom.port}", (url, host)
        assert path.startswith("/allowed/ocr/"), (url, path)
    assert set(asked) <= {"prom.test"}, asked


def test_a_decision_on_a_malformed_weights_uri_is_spec_invalid() -> None:
    """The reconciler's pure decision: Degraded SpecInvalid naming the rule, no child."""
    resource = docparser("walk")
    resource["spec"]["weights"]["uri"] = "https://[::1/weights"
    resource["metadata"].update(namespace="ocr", uid="u1", generation=1)
    decision = decide_on(resource, Observed({}, []), previous_weight=0)
    assert decision.target is None and decision.actions == []
    (problem,) = decision.problems
    assert problem.reason == "SpecInvalid" and "URIHost" in problem.message, problem
    assert "[::1" not in problem.message

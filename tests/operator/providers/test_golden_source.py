"""Golden sets read from a URI (golden_source.py) on real files: the allow-list holds against
``..`` and symlinks, a folder pairs documents with ``.txt`` or ``.md`` expectations, and every
problem is a GoldenUnavailable the status shows (the canary then gets no traffic)."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest
from docparser_operator.api.models import DocParser
from docparser_operator.providers import analysis_run, sources
from docparser_operator.providers import golden_uri as golden_source
from docparser_operator.providers.golden import MAX_DOCUMENTS, GoldenUnavailable
from docparser_operator.providers.golden_uri import GoldenSets, load, refusal
from dp_helpers import CANARY_WEIGHTS, docparser

PNG = b"\x89PNG\r\n\x1a\n fake scan"
NS = "ocr"  # the DocParser's namespace


def golden_folder(root: Path, **expected: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for stem, text in expected.items():
        (root / f"{stem}.png").write_bytes(PNG + stem.encode())
        (root / f"{stem}.txt").write_text(text)
    return root


def test_only_uris_under_an_allowed_prefix_are_read(tmp_path: Path) -> None:
    allowed = golden_folder(tmp_path / "golden" / "invoices", inv="Total 12 EUR")
    secret = tmp_path / "secrets"
    secret.mkdir()
    (allowed.parent / "escape").symlink_to(secret)
    sources = (f"file://{tmp_path}/golden/", "s3://qa-golden/")
    assert refusal(f"file://{allowed}", sources, NS) is None
    assert refusal(f"file://{tmp_path}/golden", sources, NS) is None  # the prefix itself
    for uri in (
        f"file://{tmp_path}/golden/../secrets",  # .. resolved before comparing
        f"file://{tmp_path}/golden/escape",  # a symlink out of the root
        f"file://{tmp_path}/golden-other",  # a sibling sharing the prefix's letters
        "s3://qa-golden/../payroll/",
        "s3://qa-golden-2/x",
        "gs://qa-golden/x",
    ):
        reason = refusal(uri, sources, NS)
        assert reason is not None and uri not in reason, uri
        assert "DOCPARSER_OPERATOR_GOLDEN_SOURCES" in reason or "URIPath" in reason, reason
    assert refusal("s3://qa-golden/v2/", sources, NS) is None
    assert "(none)" in (refusal(f"file://{allowed}", (), NS) or "")


def test_a_folder_pairs_documents_with_text_or_markdown(tmp_path: Path) -> None:
    root = golden_folder(tmp_path / "g", inv="Total 12 EUR")
    (root / "table.pdf").write_bytes(b"%PDF-1.7 fake")
    (root / "table.md").write_text("| a | b |\n|---|---|\n| 1 | 2 |\n")
    (root / "README").write_text("ignored: neither a document nor an expectation")
    (root / "nested").mkdir()
    docs = load(f"file://{root}", (f"file://{tmp_path}/",), NS)
    assert docs == {
        "inv": ("inv.png", PNG + b"inv", "Total 12 EUR"),
        "table": ("table.pdf", b"%PDF-1.7 fake", "| a | b |\n|---|---|\n| 1 | 2 |\n"),
    }


@pytest.mark.parametrize(
    ("breakage", "complaint"),
    [
        ("no-text", r"^1 document\(s\) with no expected text"),
        ("empty", "no documents"),
        ("missing", "FileNotFoundError"),
        ("not-utf8", "UnicodeDecodeError"),
        ("too-many", f"at most {MAX_DOCUMENTS}"),
        ("too-big", "over 0 MiB"),
        ("twins", "two documents share one ID"),
    ],
)
def test_a_broken_folder_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, breakage: str, complaint: str
) -> None:
    root = tmp_path / "g"
    root.mkdir()
    if breakage == "no-text":
        (root / "x.png").write_bytes(PNG)
    elif breakage == "missing":
        root = tmp_path / "absent"
    elif breakage == "not-utf8":
        (root / "x.png").write_bytes(PNG)
        (root / "x.txt").write_bytes(b"\xff\xfe bad")
    elif breakage == "too-many":
        golden_folder(root, **{f"d{i}": "text" for i in range(MAX_DOCUMENTS + 1)})
    elif breakage == "too-big":
        golden_folder(root, x="text")
        monkeypatch.setattr(golden_source, "MAX_DOCUMENT_BYTES", 4)
    elif breakage == "twins":
        golden_folder(root, x="text")
        (root / "x.pdf").write_bytes(b"%PDF")
    with pytest.raises(GoldenUnavailable, match=complaint):
        load(f"file://{root}", (f"file://{tmp_path}/",), NS)


@pytest.mark.skipif(importlib.util.find_spec("s3fs") is not None, reason="s3fs is installed here")
def test_an_object_store_without_its_backend_says_which_package() -> None:
    with pytest.raises(GoldenUnavailable, match=r"no fsspec backend.*s3fs"):
        load("s3://qa-golden/invoices/", ("s3://qa-golden/",), NS)


def test_the_gate_reads_a_uri_golden_set_and_scores_both_tracks(tmp_path: Path) -> None:
    """Through the analysis pass: the documents come from the folder, each track's pod
    parses them (here a reply per pod IP), and a canary that lost text fails the gate."""
    root = golden_folder(tmp_path / "golden" / "inv", inv="Total 12 EUR", memo="Pay by Friday")
    resource = docparser(
        "walk",
        canary={
            "weights": CANARY_WEIGHTS,
            "analysis": {"golden": {"uri": f"file://{root}"}},
        },
    )
    model = DocParser.from_resource(resource)
    revisions = {"canary": "rc", "stable": "rs"}

    def pod(ip: str, revision: str) -> dict:
        return {
            "metadata": {"name": ip, "labels": {"docparser.io/revision": revision}},
            "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]},
        }

    pods = [pod("10.0.0.1", "rc"), pod("10.0.0.2", "rs")]
    texts = {"10.0.0.2": {"inv.png": "Total 12 EUR", "memo.png": "Pay by Friday"}}
    texts["10.0.0.1"] = {"inv.png": "Total 12 EUR", "memo.png": "Pay by"}
    memory = analysis_run.AnalysisMemory()
    golden_sets = GoldenSets(
        sources=(f"file://{tmp_path}/golden/",),
        post=lambda url, filename, _: texts[url.split("/")[2].split(":")[0]][filename],
    )
    parsed = replace(sources.guarded((), ()), golden=golden_sets)
    state = analysis_run.begin(model, revisions)
    assert state is not None and state.phase == "Verifying"
    after = analysis_run.finish(
        memory, parsed, model, state, revisions, pods, serving=False, now="x"
    )
    assert (after.phase, after.reason, after.weight) == ("Failed", "GoldenRegression", 0)
    scores = {s.document: s for s in after.golden}
    assert scores["inv"].ok and not scores["memo"].ok and scores["memo"].canary > 0.3
    default = sources.guarded((), golden_source.DEFAULT_SOURCES)
    refused = analysis_run.finish(
        analysis_run.AnalysisMemory(),
        default,
        model,
        state,
        revisions,
        pods,
        serving=False,
        now="x",
    )
    assert refused.phase == "Verifying" and "file:///golden/{namespace}/" in refused.message
    assert str(root) not in refused.message  # the rule, never the URI


def test_the_allow_list_is_a_setting_read_at_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    from docparser_operator.controller.settings import OperatorSettings

    assert OperatorSettings().golden_source_prefixes == golden_source.DEFAULT_SOURCES
    monkeypatch.setenv("DOCPARSER_OPERATOR_GOLDEN_SOURCES", "file:///golden/, s3://qa-golden/,")
    assert OperatorSettings().golden_source_prefixes == ("file:///golden/", "s3://qa-golden/")


def test_a_golden_set_over_http_is_read_from_its_index_page(tmp_path: Path) -> None:
    """``python -m http.server``'s own listing of a folder: the same documents as file://,
    through the guarded client; a URI outside the http(s) prefix is never requested."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    golden_folder(tmp_path / "sets" / "inv", inv="Total 12 EUR", memo="Pay by Friday")
    (tmp_path / "sets" / "bad").mkdir()
    (tmp_path / "sets" / "bad" / "x.png").write_bytes(PNG)
    (tmp_path / "sets" / "bad" / "x.txt").write_bytes(b"\xff\xfe bad")
    paths: list[str] = []

    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            paths.append(self.path)

    handler = functools.partial(Handler, directory=str(tmp_path))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        sources = (f"{base}/sets/",)
        assert load(f"{base}/sets/inv", sources, NS) == load(
            f"file://{tmp_path}/sets/inv", (f"file://{tmp_path}/",), NS
        )
        with pytest.raises(GoldenUnavailable, match=r"^UnicodeDecodeError$"):
            load(f"{base}/sets/bad", sources, NS)
        with pytest.raises(GoldenUnavailable, match=r"^HTTP 404$"):
            load(f"{base}/sets/none", sources, NS)
        asked = len(paths)
        for uri in (
            f"{base}/other/",
            f"{base}/sets/../other/",
            f"http://localhost:{server.server_address[1]}/sets/inv",
        ):
            with pytest.raises(GoldenUnavailable, match=r"GOLDEN_SOURCES|URIPath") as caught:
                load(uri, sources, NS)
            assert uri not in str(caught.value)
        assert len(paths) == asked  # refused before any request
    finally:
        server.shutdown()
        server.server_close()

"""The shadow canary's parts (issue 24): the page comparison, the config file and its
reload, the page budget, the worst-disagreement store, the credentials, the memory share;
and, in process, the stable's hooks (sync, streamed) against a real canary process.

Real processes end to end: ``test_shadow_live.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest
from app_for_tests import make_settings, scrape, serving, value
from docparser_runtime.engines.base import ParseOptions
from docparser_runtime.errors import NotFound, PermissionDenied, Unauthenticated
from docparser_runtime.server.guards.internal_auth import SecretFile, bearer
from docparser_runtime.server.protocol import ParseRequest
from docparser_runtime.server.shadow.compare import (
    PageDigest,
    cer,
    compare_pages,
    normalise,
    table_shapes,
)
from docparser_runtime.server.shadow.config import OFF, ConfigWatcher, parse_config
from docparser_runtime.server.shadow.metrics import ShadowMetrics
from docparser_runtime.server.shadow.sampler import PageBudget, sampled
from docparser_runtime.server.shadow.sender import ShadowMirror
from docparser_runtime.server.shadow.worst import MAX_ENTRIES, MAX_EXCERPT_CHARS, WorstStore
from docparser_runtime.sizing.cgroup_memory import MemoryLimit
from docparser_runtime.sizing.host_memory import MIB, MemoryBudget, plan_budget
from engines_for_tests import GatedEngine
from live_server import LiveServer
from prometheus_client import CollectorRegistry


# -- comparison ----------------------------------------------------------------------------
def test_markdown_html_and_whitespace_are_no_disagreement():
    markdown = (
        "# Invoice 42\n\n| Item | Total |\n|---|---:|\n| **Paper** | 12.50 |\n\n- one  line\n"
    )
    html = (
        "Invoice 42\n<table><tr><td>Item</td><td>Total</td></tr>"
        "<tr><td>Paper</td><td>12.50</td></tr></table>\none line"
    )
    assert normalise(markdown) == normalise(html) == "Invoice 42 Item Total Paper 12.50 one line"
    assert cer(markdown, html) == 0.0
    assert normalise("see [the terms](http://x/y) `now`") == "see the terms now"


def test_cer_counts_lost_and_misread_characters_against_stable():
    stable = "The total is 1250 euros"
    assert cer(stable, stable) == 0.0
    assert cer(stable, "The total is 1260 euros") == pytest.approx(1 / len(stable))
    assert cer(stable, "The total is") == pytest.approx(11 / len(stable))
    assert cer(stable, "") == 1.0
    assert cer("", "") == 0.0 and cer("", "ghost text") == 1.0
    assert cer("ab", "a much longer hallucination") == 1.0  # capped


def test_table_shapes_from_markdown_and_html():
    md = "text\n| a | b | c |\n|---|---|---|\n| 1 | 2 | 3 |\n| 4 | 5 | 6 |\nmore"
    html = "<table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr></table>"
    assert table_shapes(md) == ((3, 3),)
    assert table_shapes(html) == ((2, 2),)
    assert table_shapes("no table here") == ()


def _page(index: int, text: str, blocks=("text",), truncated=False, repetition=False):
    return PageDigest(index, text, tuple(blocks), truncated, repetition)


def test_pages_are_matched_by_index_and_structure_compared():
    stable = [_page(0, "a b c", ("title", "text")), _page(1, "| x | y |\n| 1 | 2 |"), _page(2, "z")]
    canary = [_page(1, "| x y |\n| 1 2 |"), _page(0, "a b c", ("text", "title"))]
    by_index = {c.index: c for c in compare_pages(stable, canary)}
    assert by_index[0].cer == 0 and by_index[0].structure_agrees  # order of blocks is no matter
    assert (
        by_index[1].cer == 0 and not by_index[1].structure_agrees
    )  # a table of 2 columns lost one
    assert (
        by_index[2].cer == 1.0 and by_index[2].canary is None and not by_index[2].structure_agrees
    )


def test_metrics_count_flags_per_side_and_only_the_canarys():
    registry = CollectorRegistry()
    metrics = ShadowMetrics(registry)
    config = parse_config(
        b'{"enabled": true, "target": "http://c:8000", '
        b'"stableRevision": "s", "canaryRevision": "c"}'
    )
    metrics.export_pair(config)
    pair = {"stable_revision": "s", "canary_revision": "c"}
    assert (
        registry.get_sample_value("docparser_shadow_dropped_total", {"reason": "budget", **pair})
        == 0
    )
    stable = [_page(0, "a", truncated=True), _page(1, "b"), _page(2, "c", repetition=True)]
    canary = [
        _page(0, "a", truncated=True),
        _page(1, "b", truncated=True, repetition=True),
        _page(2, "c"),
    ]
    metrics.record(config, compare_pages(stable, canary), 1.5)

    def get(name, **labels):
        return registry.get_sample_value(name, {**labels, **pair})

    assert get("docparser_shadow_pages_compared_total") == 3
    assert get("docparser_shadow_flagged_pages_total", side="stable", flag="truncated") == 1
    assert get("docparser_shadow_flagged_pages_total", side="canary", flag="truncated") == 2
    assert get("docparser_shadow_only_canary_flagged_pages_total", flag="truncated") == 1
    assert get("docparser_shadow_only_canary_flagged_pages_total", flag="repetition") == 1
    assert get("docparser_shadow_latency_ratio_bucket", le="1.25") == 0
    assert get("docparser_shadow_latency_ratio_bucket", le="1.5") == 1
    assert get("docparser_shadow_page_cer_bucket", le="0.001") == 3


# -- config --------------------------------------------------------------------------------
def test_config_file_schema():
    config = parse_config(
        json.dumps(
            {"enabled": True, "target": "http://dp-canary.ns.svc:8000/", "percent": 10,
             "maxPagesPerMinute": 20, "stableRevision": "abc", "canaryRevision": "def",
             "futureField": 1}
        ).encode()
    )  # fmt: skip
    assert config.target == "http://dp-canary.ns.svc:8000"
    assert (config.percent, config.max_pages_per_minute) == (10, 20)
    assert config.mirrors("abc") and not config.mirrors("def") and not config.mirrors("")
    assert parse_config(b'{"enabled": false}') == OFF
    for bad in (b"[]", b"{", b'{"enabled": true, "target": "file:///etc/passwd"}',
                b'{"enabled": true, "target": "http://x", "percent": 101}'):  # fmt: skip
        with pytest.raises(ValueError):
            parse_config(bad)


def test_the_config_is_re_read_when_the_file_changes(tmp_path: Path):
    path = tmp_path / "config.json"
    changes = []
    watcher = ConfigWatcher(path, lambda old, new: changes.append((old, new)))
    assert watcher.refresh() == OFF  # missing: off
    on = {"enabled": True, "target": "http://c", "stableRevision": "s", "canaryRevision": "c1"}
    path.write_text(json.dumps(on))
    assert watcher.refresh().canary_revision == "c1"
    assert watcher.refresh().canary_revision == "c1" and len(changes) == 1  # unchanged: no call
    tmp = tmp_path / "new"
    tmp.write_text(json.dumps({**on, "canaryRevision": "c2"}))
    os.replace(tmp, path)  # the kubelet swaps the ConfigMap's files atomically
    assert watcher.refresh().canary_revision == "c2" and len(changes) == 2
    path.write_text("{not json")
    assert watcher.refresh() == OFF  # invalid: off, never a crash


def test_a_config_map_made_after_the_pod_started_is_read_when_the_kubelet_fills_the_volume(
    tmp_path: Path,
):
    """A DocParser without a shadow has no ``<name>-shadow`` (the operator renders it only
    once a shadow is configured); its pods mount the ConfigMap ``optional``, so the kubelet
    starts them with an empty folder and, once the ConfigMap is made, fills it the way it
    updates any ConfigMap volume: a timestamped folder, ``..data`` pointing at it, and
    ``config.json`` a link through ``..data``. Until then the shadow is off; then the pod
    mirrors without a restart, and off again when the operator rewrites it."""
    volume = tmp_path / "shadow"
    volume.mkdir()  # the optional volume of a ConfigMap that does not exist: empty
    watcher = ConfigWatcher(volume / "config.json")
    for _ in range(3):
        assert watcher.refresh() == OFF
    on = {"enabled": True, "target": "http://c", "stableRevision": "s", "canaryRevision": "c1"}

    def kubelet_writes(stamp: str, config: dict) -> None:
        folder = volume / f"..{stamp}"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config))
        link = volume / "..data_tmp"
        link.symlink_to(folder.name)
        os.replace(link, volume / "..data")  # the atomic swap of the kubelet's AtomicWriter
        if not (volume / "config.json").is_symlink():
            (volume / "config.json").symlink_to("..data/config.json")

    kubelet_writes("2026_12_05_07_00_00.1", on)
    assert watcher.refresh().mirrors("s")
    kubelet_writes("2026_12_05_07_01_00.2", {"enabled": False})
    assert watcher.refresh() == OFF and watcher.reloads == 2


# -- budget and sampling -------------------------------------------------------------------
def test_the_page_budget_refills_per_minute_and_drops_whole_requests():
    now = [0.0]
    budget = PageBudget(60, clock=lambda: now[0])
    assert budget.take(50) and not budget.take(11)  # a request is mirrored whole or not at all
    assert budget.take(10) and not budget.take(1)
    now[0] += 5.0  # 5 s of 60 pages/min
    assert budget.take(5) and not budget.take(1)
    now[0] += 3600
    assert budget.take(60) and not budget.take(1)  # never more than a minute's burst
    budget.set_rate(0)
    now[0] += 60
    assert not budget.take(1)


def test_sampling_percent():
    draws = iter([0.05, 0.5, 0.099, 0.1])
    assert [sampled(10, lambda: next(draws)) for _ in range(4)] == [True, False, True, False]
    assert sampled(100) and not sampled(0)


# -- worst store ---------------------------------------------------------------------------
def test_the_worst_store_keeps_few_bounded_pages_and_is_cleared(tmp_path: Path):
    store = WorstStore()
    long = "word " * 5000
    for i in range(3 * MAX_ENTRIES):
        stable = [_page(0, long)]
        canary = [_page(0, long[: len(long) - i * 10])]
        store.offer(compare_pages(stable, canary), None)
    store.offer(compare_pages([_page(0, "same")], [_page(0, "same")]), None)  # agrees: not kept
    pages = store.snapshot()["pages"]
    assert 0 < len(pages) <= MAX_ENTRIES
    assert pages == sorted(pages, key=lambda p: p["cer"], reverse=True)
    assert all(len(p["stable"]["text"]) <= MAX_EXCERPT_CHARS for p in pages)
    store.clear(OFF)
    assert store.snapshot() == {"pages": []}


# -- credentials and memory ----------------------------------------------------------------
def test_secret_file_closed_missing_wrong_and_rotated(tmp_path: Path):
    path = tmp_path / "token"
    secret = SecretFile(path, "internal token")
    with pytest.raises(NotFound):
        secret.check("anything")  # no file: the route does not exist
    path.write_text("s3cret\n")
    with pytest.raises(Unauthenticated):
        secret.check(None)
    with pytest.raises(PermissionDenied):
        secret.check("s3cre")
    secret.check("s3cret")
    path.write_text("rotated-token")
    with pytest.raises(PermissionDenied):
        secret.check("s3cret")
    secret.check("rotated-token")
    assert bearer("Bearer abc") == "abc" and bearer("Basic abc") is None and bearer(None) is None


def test_copies_take_memory_only_within_their_share():
    budget = MemoryBudget(plan_budget(MemoryLimit(4 * 1024 * MIB, "test"), "rapidocr", 0))
    quarter = int(budget.total * 0.25)
    assert budget.try_reserve(quarter - 10, share=0.25)
    assert not budget.try_reserve(20, share=0.25)
    budget.release(quarter - 10)
    assert budget.used == 0


# -- in process: the stable's hooks against a real canary process --------------------------
@pytest.fixture(scope="module")
def canary_process(tmp_path_factory):
    root = tmp_path_factory.mktemp("canary")
    (root / "token").write_text("tok")
    server = LiveServer(
        gated_delay_s=0.0,
        engine_args=("--truncate", "10"),
        env={"DOCPARSER_INTERNAL_TOKEN_FILE": root / "token", "DOCPARSER_REVISION": "c1"},
    )
    with server:
        yield server, root / "token"


def _stable_settings(tmp_path: Path, token: Path, target: str, judged: str = "c1", **overrides):
    """A stable pod (revision s1) told to mirror to ``target`` and judge revision ``judged``."""
    config = tmp_path / "shadow.json"
    config.write_text(json.dumps({
        "enabled": True, "target": target, "percent": 100, "maxPagesPerMinute": 100,
        "stableRevision": "s1", "canaryRevision": judged,
    }))  # fmt: skip
    return make_settings(
        revision="s1", shadow_config_file=config, internal_token_file=token, **overrides
    )


async def _wait_compared(client, n: int, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while value(await scrape(client), "docparser_shadow_pages_compared_total") < n:
        samples = await scrape(client)
        dropped = {k: v for k, v in samples.items() if "shadow" in k[0] and v}
        assert time.monotonic() < deadline, f"pages never compared: {dropped}"
        await asyncio.sleep(0.05)


async def test_sync_and_streamed_answers_are_mirrored_after_they_are_sent(tmp_path, canary_process):
    from documents import png_bytes
    from PIL import Image

    canary, token = canary_process
    settings = _stable_settings(tmp_path, token, canary.url)
    engine = GatedEngine()
    async with serving(settings, engine) as (_, client, _):
        png = png_bytes(Image.new("RGB", (300, 200), "white"))
        files = {"file": ("a.png", png, "image/png")}
        reply = await client.post("/v1/document/parse", files=files)
        assert reply.status_code == 200
        await _wait_compared(client, 1)
        streamed = await client.post(
            "/v1/document/parse", files=files, data={"stream": "true", "cache": "false"}
        )
        assert streamed.status_code == 200 and "event: result" in streamed.text
        await _wait_compared(client, 2)
        samples = await scrape(client)
    pair = {"stable_revision": "s1", "canary_revision": "c1"}
    # The canary cuts every page to 10 characters: a disagreement on both pages.
    assert value(samples, "docparser_shadow_page_cer_sum", **pair) > 1.0
    assert value(samples, "docparser_shadow_mirrored_pages_total", **pair) == 2
    assert reply.json()["content"] == "# page 0 300x200 markdown tier 0"  # the client's, untouched


async def test_a_pod_of_another_revision_or_without_the_token_mirrors_nothing(
    tmp_path, canary_process
):
    from documents import png_bytes
    from PIL import Image

    canary, token = canary_process
    png = png_bytes(Image.new("RGB", (120, 90), "white"))
    files = {"file": ("a.png", png, "image/png")}
    settings = _stable_settings(tmp_path, token, canary.url).model_copy(update={"revision": "c1"})
    async with serving(settings) as (_, client, _):
        assert (await client.post("/v1/document/parse", files=files)).status_code == 200
        samples = await scrape(client)
    assert value(samples, "docparser_shadow_mirrored_pages_total") == 0  # the canary's own pods

    settings = _stable_settings(tmp_path, tmp_path / "no-token", canary.url)
    async with serving(settings) as (_, client, _):
        assert (await client.post("/v1/document/parse", files=files)).status_code == 200
        await asyncio.sleep(0.05)  # the offer runs after the body is sent
        samples = await scrape(client)
    assert value(samples, "docparser_shadow_dropped_total", reason="credential") == 1
    assert value(samples, "docparser_shadow_mirrored_pages_total") == 0


async def test_a_reply_from_another_canary_revision_is_not_compared(tmp_path, canary_process):
    """The canary Service can still reach the release before (a rolled-back canary in its
    preStop window): its reply says its revision, and it is not counted for the one judged."""
    from documents import png_bytes
    from PIL import Image

    canary, token = canary_process  # revision c1
    files = {"file": ("a.png", png_bytes(Image.new("RGB", (140, 90), "white")), "image/png")}
    async with serving(_stable_settings(tmp_path, token, canary.url, judged="c2")) as (
        _, client, _,
    ):  # fmt: skip
        assert (await client.post("/v1/document/parse", files=files)).status_code == 200
        deadline = time.monotonic() + 30
        pair = {"stable_revision": "s1", "canary_revision": "c2"}
        while not value(await scrape(client), "docparser_shadow_dropped_total", reason="revision"):
            assert time.monotonic() < deadline, "the other revision's reply was not dropped"
            await asyncio.sleep(0.05)
        samples = await scrape(client)
    assert value(samples, "docparser_shadow_dropped_total", reason="revision", **pair) == 1
    assert value(samples, "docparser_shadow_pages_compared_total", **pair) == 0
    assert value(samples, "docparser_shadow_page_cer_count", **pair) == 0


def test_the_shadow_series_are_in_the_operations_guide():
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    guide = (Path(__file__).resolve().parents[3] / "docs" / "operations.md").read_text()
    registry = CollectorRegistry()
    ShadowMetrics(registry)
    names = {
        f.name + ("_total" if f.type == "counter" else "")
        for f in text_string_to_metric_families(generate_latest(registry).decode())
    }
    assert len(names) == 8
    assert sorted(n for n in names if f"`{n}`" not in guide) == []


# -- the bounds of the hot path: queue, page budget, memory share ---------------------------
def _mirror(tmp_path: Path, *, per_minute: float = 1000, queue: int = 1, memory=None):
    (tmp_path / "token").write_text("tok")
    config = tmp_path / "shadow.json"
    config.write_text(json.dumps({
        "enabled": True, "target": "http://127.0.0.1:9", "percent": 100,
        "maxPagesPerMinute": per_minute, "stableRevision": "s1", "canaryRevision": "c1",
    }))  # fmt: skip
    settings = make_settings(
        revision="s1", shadow_config_file=config, internal_token_file=tmp_path / "token",
        shadow_max_in_flight=1, shadow_queue=queue,
    )  # fmt: skip
    budget = memory or MemoryBudget(plan_budget(MemoryLimit(1536 * MIB, "test"), "rapidocr", 0))
    registry = CollectorRegistry()
    return ShadowMirror(settings, registry, memory=budget), registry, budget


def _reply(pages: int) -> dict:
    return {
        "pages": [{"index": i, "content": "text", "blocks": []} for i in range(pages)],
        "timings_ms": {"total": 10.0},
        "cached": False,
    }


def _dropped(registry: CollectorRegistry, reason: str) -> float:
    labels = {"reason": reason, "stable_revision": "s1", "canary_revision": "c1"}
    return registry.get_sample_value("docparser_shadow_dropped_total", labels) or 0.0


async def test_a_full_queue_drops_busy_and_a_cache_hit_is_not_offered(tmp_path):
    mirror, registry, memory = _mirror(tmp_path, queue=1)
    await mirror.start()
    request = ParseRequest(data=b"x" * 1000, options=ParseOptions())
    try:
        mirror.offer(request, {**_reply(1), "cached": True})
        assert memory.used == 0 and _dropped(registry, "busy") == 0
        for _ in range(3):  # one in flight and one queued fit; the third does not
            mirror.offer(request, _reply(1))
        assert _dropped(registry, "busy") == 1
        assert memory.used > 2000  # the two copies held count in the memory budget
    finally:
        await mirror.close()
    assert memory.used == 0  # and are given back, compared or not


async def test_the_page_budget_drops_a_request_whose_pages_do_not_fit(tmp_path):
    mirror, registry, _ = _mirror(tmp_path, per_minute=5, queue=10)
    await mirror.start()
    request = ParseRequest(data=b"x", options=ParseOptions())
    try:
        mirror.offer(request, _reply(4))
        mirror.offer(request, _reply(2))  # 1 page left of 5
        mirror.offer(request, _reply(1))
        assert _dropped(registry, "budget") == 1
    finally:
        await mirror.close()


async def test_copies_never_take_more_than_their_share_of_host_memory(tmp_path):
    mirror, registry, memory = _mirror(tmp_path, queue=10)
    await mirror.start()
    try:
        live = await memory.reserve(int(memory.total * 0.2), "live pages", time.monotonic() + 5)
        big = ParseRequest(data=b"x" * int(memory.total * 0.06), options=ParseOptions())
        mirror.offer(big, _reply(1))  # 20 % + 6 % > 25 %: dropped, live pages keep the rest
        assert _dropped(registry, "busy") == 1
        memory.release(live)
        mirror.offer(big, _reply(1))
        assert _dropped(registry, "busy") == 1 and memory.used > 0
    finally:
        await mirror.close()
    assert memory.used == 0


async def test_a_canary_that_answers_too_late_is_dropped_busy(tmp_path, slow_canary):
    from documents import png_bytes
    from PIL import Image

    canary, token = slow_canary
    settings = _stable_settings(tmp_path, token, canary.url, shadow_timeout_s=0.5)
    async with serving(settings) as (_, client, _):
        png = png_bytes(Image.new("RGB", (100, 80), "white"))
        t0 = time.monotonic()
        reply = await client.post("/v1/document/parse", files={"file": ("a.png", png, "image/png")})
        assert reply.status_code == 200 and time.monotonic() - t0 < 2.0  # never waits on it
        deadline = time.monotonic() + 20
        while value(await scrape(client), "docparser_shadow_dropped_total", reason="busy") < 1:
            assert time.monotonic() < deadline, "the late copy was never dropped"
            await asyncio.sleep(0.05)
        samples = await scrape(client)
    assert value(samples, "docparser_shadow_pages_compared_total") == 0


@pytest.fixture(scope="module")
def slow_canary(tmp_path_factory):
    root = tmp_path_factory.mktemp("slow-canary")
    (root / "token").write_text("tok")
    server = LiveServer(
        gated_delay_s=3.0,
        env={"DOCPARSER_INTERNAL_TOKEN_FILE": root / "token", "DOCPARSER_REVISION": "c1"},
    )
    with server:
        yield server, root / "token"


def test_a_reply_page_carries_the_flags_the_comparison_reads():
    from docparser_runtime.engines.base import Block, PageResult

    result = PageResult(
        index=3, content="| a | b |\n| 1 | 2 |", width=10, height=10, tiles=1, vision_tokens=1,
        blocks=[Block("a b", (0, 0, 1, 1), "table")], truncated=True, repetition_trips=2,
    )  # fmt: skip
    page = result.to_dict()
    assert page["repetition_guarded"] is True
    digest = PageDigest.of(page)
    assert (digest.index, digest.truncated, digest.repetition) == (3, True, True)
    assert digest.structure() == ((("table", 1),), ((2, 2),))

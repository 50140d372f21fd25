"""The shadow canary on real processes (issue 24): a stable runtime mirrors its answered
requests to a canary runtime, both ``docparser-runtime serve`` with the rapidocr engine.

- a canary whose engine drops one line in twenty (``DOCPARSER_TEST_DROP_LINE_EVERY=20``):
  the stable's metrics show the disagreement, the admin key reads the worst pages;
- the config file re-pointed at an identical canary, without restarting the stable: the
  pair agrees (CER about 0), sync answers and async jobs alike;
- a canary that is down or busy: the stable's answers are what they are with the shadow
  off, and every copy not compared is counted as dropped;
- the mirror path without the internal token is 401, with a wrong one 403, a client's API
  key does not open it, and a mirrored document never lands in a caller's cache scope nor
  in the canary's ``/v1/`` request counters.

Latency with the shadow on against off is measured by ``bench/shadow_overhead.py``, not
asserted here (a shared CI machine's timings are no verdict).
"""

from __future__ import annotations

import io
import json
import random
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from documents import font
from live_server import LiveServer, start_all
from page_corpus import sentence
from PIL import Image, ImageDraw
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.slow

TOKEN = "internal-token-for-tests-0123456789"
ADMIN = "admin-key-for-tests-0123456789"
API_KEY = "client-api-key-0123456789"
PARSE = "/v1/document/parse"
MIRROR = "/internal/v1/shadow/parse"
WORST = "/admin/v1/shadow/worst"
STABLE_REV = "stable1"


def page_lines(seed: int, lines: int = 24) -> list[str]:
    rng = random.Random(seed)
    return [sentence(rng, rng.randrange(3, 6)) for _ in range(lines)]


def page_png(seed: int, lines: int = 24) -> bytes:
    """A page of ``lines`` short sentences (enough that one line in twenty is dropped)."""
    image = Image.new("RGB", (900, 80 + lines * 46), "white")
    draw = ImageDraw.Draw(image)
    for i, text in enumerate(page_lines(seed, lines)):
        draw.text((60, 40 + i * 46), text, font=font(24), fill=0)
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(samples, name: str, **labels: str) -> float:
    wanted = set(labels.items())
    return sum(v for (n, got), v in samples.items() if n == name and wanted <= set(got))


def wait_for(check: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


class Shadow:
    """The stable's mounted config file, rewritten as the operator's ConfigMap would be."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def point_at(self, target: str | None, canary_revision: str = "", percent: int = 100):
        config = {"enabled": False}
        if target is not None:
            config = {
                "enabled": True, "target": target, "percent": percent,
                "maxPagesPerMinute": 1000, "stableRevision": STABLE_REV,
                "canaryRevision": canary_revision,
            }  # fmt: skip
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(config))
        tmp.replace(self.path)  # atomic, like the kubelet's ..data swap


@pytest.fixture(scope="module")
def secrets(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("shadow-secrets")
    files = {"token": TOKEN, "admin": ADMIN, "keys": API_KEY, "config": '{"enabled": false}'}
    for name, content in files.items():
        (root / name).write_text(content + "\n")
    return {name: root / name for name in files}


def _env(secrets: dict[str, Path], revision: str, **extra: object) -> dict[str, object]:
    return {
        "DOCPARSER_REVISION": revision,
        "DOCPARSER_INTERNAL_TOKEN_FILE": secrets["token"],
        "DOCPARSER_DECODE_WORKERS": 1,
        "DOCPARSER_MAX_WAIT_MS": 2,
        **extra,
    }


@pytest.fixture(scope="module")
def fleet(secrets) -> Iterator[dict[str, LiveServer]]:
    """stable (mirrors per the config file), a canary that drops lines, an identical one."""
    stable = LiveServer(
        env=_env(
            secrets,
            STABLE_REV,
            DOCPARSER_SHADOW_CONFIG_FILE=secrets["config"],
            DOCPARSER_SHADOW_POLL_S=0.2,
            DOCPARSER_ADMIN_KEY_FILE=secrets["admin"],
            DOCPARSER_SHADOW_MAX_IN_FLIGHT=1,
            DOCPARSER_SHADOW_QUEUE=0,
        )
    )
    dropping = LiveServer(env=_env(secrets, "canary1", DOCPARSER_TEST_DROP_LINE_EVERY=20))
    same = LiveServer(env=_env(secrets, "canary2", DOCPARSER_API_KEYS_FILE=secrets["keys"]))
    servers = {"stable": stable, "dropping": dropping, "same": same}
    try:
        start_all(*servers.values())
        yield servers
    finally:
        for server in servers.values():
            server.stop()


def parse(url: str, data: bytes, *, fresh: bool = False, **headers: str) -> dict:
    """``fresh``: past the result cache (``cache: false``), so the same page is parsed again."""
    resp = httpx.post(
        f"{url}{PARSE}",
        files={"file": ("p.png", data, "image/png")},
        data={"cache": "false"} if fresh else None,
        headers=headers,
        timeout=120,
    )
    assert resp.status_code == 200, resp.text
    return resp.json()


def settled(url: str, before: float) -> Callable[[], bool]:
    """The copies sent so far are compared or dropped (one in flight at a time)."""

    def check() -> bool:
        samples = scrape(url)
        done = total(samples, "docparser_shadow_dropped_total") + total(
            samples, "docparser_shadow_latency_ratio_count"
        )
        return done > before

    return check


def mirror_once(stable: LiveServer, data: bytes, *, fresh: bool = False) -> dict:
    samples = scrape(stable.url)
    before = total(samples, "docparser_shadow_dropped_total") + total(
        samples, "docparser_shadow_latency_ratio_count"
    )
    body = parse(stable.url, data, fresh=fresh)
    if not body["cached"]:  # a cache hit is not mirrored
        wait_for(settled(stable.url, before), "the copy to be compared or dropped")
    return body


def test_a_canary_that_drops_lines_disagrees_then_an_identical_one_agrees(fleet, secrets):
    stable, dropping, same = fleet["stable"], fleet["dropping"], fleet["same"]
    shadow = Shadow(secrets["config"])
    pair = {"stable_revision": STABLE_REV, "canary_revision": "canary1"}
    shadow.point_at(dropping.url, "canary1")
    wait_for(
        lambda: (
            ("docparser_shadow_pages_compared_total", tuple(sorted(pair.items())))
            in scrape(stable.url)
        ),
        "the stable to read its config",
    )
    pid = stable.proc.pid
    docs = [page_png(seed) for seed in (1, 2, 3)]
    for data in docs:
        mirror_once(stable, data)
    samples = scrape(stable.url)
    assert total(samples, "docparser_shadow_pages_compared_total", **pair) == 3
    assert total(samples, "docparser_shadow_mirrored_pages_total", **pair) == 3
    assert total(samples, "docparser_shadow_dropped_total", **pair) == 0
    mean_cer = total(samples, "docparser_shadow_page_cer_sum", **pair) / 3
    assert mean_cer > 0.01, f"one line in twenty dropped, mean CER {mean_cer}"
    assert total(samples, "docparser_shadow_page_cer_bucket", le="0.005", **pair) == 0
    assert total(samples, "docparser_shadow_latency_ratio_count", **pair) == 3

    # The worst pages: admin key only, and they show the canary's text missing a line.
    assert httpx.get(f"{stable.url}{WORST}").status_code == 401
    wrong = {"authorization": "Bearer not-the-key"}
    assert httpx.get(f"{stable.url}{WORST}", headers=wrong).status_code == 403
    admin = {"authorization": f"Bearer {ADMIN}"}
    worst = httpx.get(f"{stable.url}{WORST}", headers=admin).json()
    assert worst["canary_revision"] == "canary1" and worst["pages"]
    first = worst["pages"][0]
    assert first["cer"] > 0.01
    assert len(first["canary"]["text"]) < len(first["stable"]["text"])

    # Re-pointed at an identical canary: read without a restart, the kept pages cleared.
    pair2 = {"stable_revision": STABLE_REV, "canary_revision": "canary2"}
    shadow.point_at(same.url, "canary2")
    wait_for(
        lambda: (
            httpx.get(f"{stable.url}{WORST}", headers=admin).json().get("canary_revision")
            == "canary2"
        ),
        "the stable to re-read its config",
    )
    assert httpx.get(f"{stable.url}{WORST}", headers=admin).json()["pages"] == []
    again = mirror_once(stable, docs[0])  # stable answers from its result cache: not mirrored
    assert again["cached"] is True
    for data in (page_png(5), page_png(6)):
        mirror_once(stable, data)
    # An async job's pages are compared too; its owner's result is what a sync parse gives.
    job = httpx.post(
        f"{stable.url}/v1/jobs", files={"file": ("p.png", page_png(4), "image/png")}, timeout=30
    ).json()

    def job_done() -> bool:
        body = httpx.get(f"{stable.url}/v1/jobs/{job['id']}", timeout=10).json()
        return body["status"] == "succeeded"

    wait_for(job_done, "the job")
    result = httpx.get(f"{stable.url}/v1/jobs/{job['id']}", timeout=10).json()["result"]
    wait_for(
        lambda: total(scrape(stable.url), "docparser_shadow_pages_compared_total", **pair2) == 3,
        "the job's page to be compared",
    )
    samples = scrape(stable.url)
    assert total(samples, "docparser_shadow_page_cer_sum", **pair2) < 0.005
    assert total(samples, "docparser_shadow_structure_disagreements_total", **pair2) == 0
    assert stable.proc.pid == pid and stable.proc.poll() is None
    direct = parse(stable.url, page_png(4))
    assert result["content"] == direct["content"]
    assert result["pages"][0]["blocks"] == direct["pages"][0]["blocks"]

    # The canary served the copies on the mirror path only: its /v1 counters saw none, and
    # none of them is in the caller's cache scope (a client's first parse is a miss).
    canary = scrape(same.url)
    assert total(canary, "docparser_requests_total", route=MIRROR, status="200") == 3
    v1 = [
        v
        for (n, labels), v in canary.items()
        if n == "docparser_requests_total" and dict(labels)["route"].startswith("/v1/")
    ]
    assert sum(v1) == 0
    key = {"authorization": f"Bearer {API_KEY}"}
    assert parse(same.url, docs[0], **key)["cached"] is False
    assert parse(same.url, docs[0], **key)["cached"] is True  # the cache itself works

    # Neither side logged a document's text (every request was logged, at info).
    for server in (stable, dropping, same):
        log = server.log(tail=2_000_000)
        assert "POST /internal/v1/shadow/parse 200" in log or server is stable
        leaked = [line for seed in (1, 2, 3) for line in page_lines(seed) if line in log]
        assert leaked == [], f"document text in the log of {server.url}"


def test_the_mirror_path_needs_the_internal_token(fleet):
    same = fleet["same"]
    files = {"file": ("p.png", page_png(9, lines=3), "image/png")}
    assert httpx.post(f"{same.url}{MIRROR}", files=files).status_code == 401
    wrong = {"x-docparser-internal-token": "guess"}
    assert httpx.post(f"{same.url}{MIRROR}", files=files, headers=wrong).status_code == 403
    api_key = {"authorization": f"Bearer {API_KEY}"}  # a client's key opens nothing here
    assert httpx.post(f"{same.url}{MIRROR}", files=files, headers=api_key).status_code == 401
    right = {"x-docparser-internal-token": TOKEN}
    reply = httpx.post(f"{same.url}{MIRROR}", files=files, headers=right, timeout=120)
    assert reply.status_code == 200 and reply.json()["pages"]


def test_a_down_or_busy_canary_changes_no_answer_and_its_drops_are_counted(fleet, secrets):
    stable = fleet["stable"]
    shadow = Shadow(secrets["config"])
    docs = [page_png(seed, lines=6) for seed in (21, 22, 23)]
    shadow.point_at(None)
    wait_for(lambda: not _mirrors(stable), "the shadow to turn off")
    off = [parse(stable.url, d, fresh=True) for d in docs]

    # Down: nothing listens at the target.
    dead = LiveServer()  # only for a free port; never started
    pair = {"stable_revision": STABLE_REV, "canary_revision": "down"}
    shadow.point_at(dead.url, "down")
    wait_for(lambda: _mirrors(stable, "down"), "the shadow to point at the dead canary")
    down = [mirror_once(stable, d, fresh=True) for d in docs]
    samples = scrape(stable.url)
    assert total(samples, "docparser_shadow_dropped_total", reason="error", **pair) == 3
    assert total(samples, "docparser_shadow_pages_compared_total", **pair) == 0

    # Busy: a canary that takes 30 s a page, longer than the stable takes to answer all three:
    # one copy in flight, the others dropped.
    env = {"DOCPARSER_INTERNAL_TOKEN_FILE": secrets["token"], "DOCPARSER_DRAIN_TIMEOUT_S": 0}
    slow = LiveServer(gated_delay_s=30.0, env=env)
    with slow:
        pair = {"stable_revision": STABLE_REV, "canary_revision": "slow"}
        shadow.point_at(slow.url, "slow")
        wait_for(lambda: _mirrors(stable, "slow"), "the shadow to point at the slow canary")
        with ThreadPoolExecutor(len(docs)) as pool:  # answered together: one copy goes
            busy = list(pool.map(lambda d: parse(stable.url, d, fresh=True), docs))
        wait_for(
            lambda: total(scrape(stable.url), "docparser_shadow_dropped_total", **pair) >= 2,
            "the copies that found the one slot taken to be dropped",
        )
        samples = scrape(stable.url)
        assert total(samples, "docparser_shadow_dropped_total", reason="busy", **pair) == 2
        assert total(samples, "docparser_shadow_mirrored_pages_total", **pair) == 1
    shadow.point_at(None)
    for replies in (down, busy):
        for ours, theirs in zip(replies, off, strict=True):
            assert ours["content"] == theirs["content"]
            assert ours["pages"] == theirs["pages"] or _same_pages(ours, theirs)


def _same_pages(a: dict, b: dict) -> bool:
    return [p["content"] for p in a["pages"]] == [p["content"] for p in b["pages"]]


def _mirrors(stable: LiveServer, canary_revision: str | None = None) -> bool:
    """Whether the stable exports the pair's series (it does from the config's reload on)."""
    admin = {"authorization": f"Bearer {ADMIN}"}
    worst = httpx.get(f"{stable.url}{WORST}", headers=admin, timeout=10).json()
    if canary_revision is None:
        return bool(worst.get("canary_revision"))
    return worst.get("canary_revision") == canary_revision

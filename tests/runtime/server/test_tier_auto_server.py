"""Issue 25's done-when, through the real server process with the CPU engine: with
``tier: auto`` a plain single-column letter is read at tier 0 or 1, a dense two-column page
with a table at a high tier; both in the reply and in ``/metrics``."""

from __future__ import annotations

import base64

import documents
import httpx
import pytest
import tier_pages
from live_server import LiveServer
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.slow  # two full pages through the CPU engine: a minute on a busy box
PARSE = "/v1/document/parse"


@pytest.fixture(scope="module")
def server():
    # the default tier is auto, as the operator renders it for spec.tier: auto
    # a full A4 page takes the CPU engine minutes on a loaded machine: a long request timeout
    env = {
        "DOCPARSER_DEFAULT_TIER": "auto",
        "DOCPARSER_MAX_TIER": "6",
        "DOCPARSER_REQUEST_TIMEOUT_S": "900",
        "DOCPARSER_DRAIN_TIMEOUT_S": "900",
    }
    with LiveServer(env=env) as live:
        live.wait_ready(timeout=120)
        yield live


def tier_counts(text: str) -> dict[tuple[str, str], float]:
    counts: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "docparser_tier_pages_total":
                key = (s.labels["tier"], s.labels["choice"])
                counts[key] = counts.get(key, 0) + s.value
    return counts


def test_letter_low_dense_two_columns_with_table_high(server) -> None:
    letter = documents.png_bytes(tier_pages.plain_letter().image)
    dense = documents.png_bytes(tier_pages.dense_two_columns_table().image)
    with httpx.Client(base_url=server.url, timeout=1000) as client:
        # the default (auto) for the letter, an explicit form field for the dense page
        low = client.post(
            PARSE, files={"file": ("letter.png", letter, "image/png")}, data={"mode": "text"}
        )
        high = client.post(
            PARSE, json={"image": base64.b64encode(dense).decode(), "tier": "auto", "mode": "text"}
        )
        metrics = client.get("/metrics").text
    assert low.status_code == 200, server.log()
    assert high.status_code == 200, server.log()
    (letter_page,) = low.json()["pages"]
    (dense_page,) = high.json()["pages"]
    assert letter_page["tier"] in (0, 1) and letter_page["vision_tokens"] == 256
    assert dense_page["tier"] == 6 and dense_page["vision_tokens"] == 1120
    assert "Dear Customer" in low.json()["content"]  # read, not just planned
    counts = tier_counts(metrics)
    assert counts.get((str(letter_page["tier"]), "auto")) == 1
    assert counts.get(("6", "auto")) == 1

"""The parse reply as a pydantic model (server/protocol.py) keeps the wire format: the same
JSON bytes the hand-built dict had, fields in the same order, and a field a newer pod adds
survives the front's relay and the result cache."""

from __future__ import annotations

import json

import pytest
from docparser_runtime.engines.base import Block, PageResult, PageWarning
from docparser_runtime.server.protocol import ModelRef, ParseReply, StageTimings
from fastapi.responses import JSONResponse
from pydantic import ValidationError

TIMINGS = StageTimings(queue=1.5, preprocess=2.0, inference=30.25, audit=0.0, total=34.75)


def _pages() -> list[PageResult]:
    first = PageResult(
        index=0, content="# Title", width=800, height=600, tiles=2, vision_tokens=400,
        blocks=[Block("Title", (10.0, 20.5, 300.25, 60.0), "title")], output_tokens=5, tier=2,
    )  # fmt: skip
    second = PageResult(
        index=1, content="täxt", width=800, height=600, tiles=2, vision_tokens=400,
        output_tokens=7, truncated=True, repetition_trips=3,
        warnings=[PageWarning("uncovered_text", (1.0, 2.0, 3.0, 4.0))],
    )  # fmt: skip
    return [first, second]


def test_the_reply_renders_the_wire_bytes_in_field_order():
    reply = ParseReply.of(
        _pages(), engine=ModelRef(engine="rapidocr", version="v1"), vision_tokens=800,
        timings_ms=TIMINGS,
    ).model_copy(update={"id": "parse-1"})  # fmt: skip
    page0 = (
        '{"index":0,"content":"# Title","width":800,"height":600,"tier":2,"tiles":2,'
        '"vision_tokens":400,"blocks":[{"text":"Title","bbox":[10.0,20.5,300.2,60.0],'
        '"type":"title"}],"output_tokens":5,"truncated":false,"repetition_guarded":false,'
        '"warnings":[]}'
    )
    page1 = (
        '{"index":1,"content":"täxt","width":800,"height":600,"tier":null,"tiles":2,'
        '"vision_tokens":400,"blocks":[],"output_tokens":7,"truncated":true,'
        '"repetition_guarded":true,"warnings":[{"code":"uncovered_text","bbox":[1.0,2.0,3.0,4.0]}]}'
    )
    expected = (
        '{"id":"parse-1","model":{"engine":"rapidocr","version":"v1"},'
        '"content":"# Title\\n\\n<--- Page Split --->\\n\\ntäxt",'
        f'"pages":[{page0},{page1}],"vision_tokens":800,"complete":false,"warnings":1,'
        '"usage":{"vision_tokens":800,"output_tokens":12,"pages":2},'
        '"timings_ms":{"queue":1.5,"preprocess":2.0,"inference":30.25,"audit":0.0,"total":34.75},'
        '"cached":false}'
    )
    assert JSONResponse(reply.body()).body.decode() == expected


def test_a_cache_hit_is_the_stored_reply_with_a_new_id_and_only_the_total():
    reply = ParseReply.of(
        _pages(), engine=ModelRef(engine="e", version="v"), vision_tokens=800, timings_ms=TIMINGS
    )
    hit = ParseReply.from_cache(reply.cache_bytes()).replayed(0.5)
    assert hit.id != reply.id and hit.id.startswith("parse-") and hit.cached
    assert hit.timings_ms.model_dump() == {
        "queue": 0.0, "preprocess": 0.0, "inference": 0.0, "audit": 0.0, "total": 0.5,
    }  # fmt: skip
    assert hit.model_dump(exclude={"id", "cached", "timings_ms"}) == reply.model_dump(
        exclude={"id", "cached", "timings_ms"}
    )
    assert hit.page_events() == reply.body()["pages"]


def test_fields_a_newer_pod_adds_survive_the_relay():
    body = ParseReply.of(
        _pages(), engine=ModelRef(engine="e", version="v"), vision_tokens=800, timings_ms=TIMINGS
    ).body()
    body["language"] = "de"
    body["pages"][0]["rotation"] = 90
    relayed = ParseReply.model_validate_json(json.dumps(body))
    assert relayed.body() == body
    assert list(relayed.body()) == list(body)  # the known fields first, in wire order


def test_a_reply_without_its_fields_is_refused():
    with pytest.raises(ValidationError):
        ParseReply.model_validate_json(b'{"pages": []}')

"""One JSON log line per request, with a request id the client can quote."""

from __future__ import annotations

import json
import logging

from app_for_tests import make_settings, serving
from docparser_runtime.logs import JsonFormatter, resolve_format
from engines_for_tests import png_bytes

PARSE = "/v1/document/parse"


def access_lines(caplog) -> list[dict]:
    """The access records as the JSON formatter writes them."""
    formatter = JsonFormatter()
    return [json.loads(formatter.format(r)) for r in caplog.records if r.name == "docparser.access"]


async def test_each_request_logs_one_json_line_with_its_id(caplog):
    caplog.set_level(logging.DEBUG, logger="docparser.access")
    files = {"file": ("a.png", png_bytes(160, 90), "image/png")}
    async with serving(make_settings()) as (_app, client, _engine):
        ok = await client.post(PARSE, files=files, headers={"X-Request-ID": "trace-42"})
        generated = await client.post(PARSE, files={"file": ("x.txt", b"hello", "text/plain")})
        hostile = await client.get("/livez", headers={"X-Request-ID": "bad id\r\nx"})
    assert ok.headers["x-request-id"] == "trace-42"
    assert len(generated.headers["x-request-id"]) == 32  # generated (uuid4 hex)
    assert hostile.headers["x-request-id"] != "bad id\r\nx"  # not echoed: replaced
    lines = {line["request_id"]: line for line in access_lines(caplog)}
    good = lines["trace-42"]
    assert good["route"] == PARSE and good["status"] == 200 and good["method"] == "POST"
    assert good["pages"] == 1 and good["output_tokens"] > 0 and good["vision_tokens"] > 0
    assert good["cached"] is False and good["latency_ms"] > 0 and good["level"] == "info"
    assert set(good["timings_ms"]) >= {"queue", "preprocess", "inference", "total"}
    bad = lines[generated.headers["x-request-id"]]
    assert bad["status"] == 415 and bad["error_code"] == "unsupported_media_type"
    assert lines[hostile.headers["x-request-id"]]["level"] == "debug"  # probes stay quiet
    assert all("hello" not in json.dumps(line) for line in lines.values())  # no content


async def test_the_callers_key_id_is_logged_never_the_key(caplog, tmp_path):
    caplog.set_level(logging.INFO, logger="docparser.access")
    keys = tmp_path / "keys"
    keys.write_text("dp-key-alpha-0123456789\n")
    async with serving(make_settings(api_keys_file=keys)) as (_app, client, _engine):
        headers = {"Authorization": "Bearer dp-key-alpha-0123456789"}
        await client.post(
            PARSE, files={"file": ("a.png", png_bytes(), "image/png")}, headers=headers
        )
    (line,) = [x for x in access_lines(caplog) if x["route"] == PARSE]
    assert line["key_id"].startswith("key-")
    assert "dp-key-alpha" not in json.dumps(line)


def test_auto_format_is_json_off_a_terminal() -> None:
    class Tty:
        def isatty(self) -> bool:
            return True

    assert resolve_format("auto", Tty()) == "text"
    assert resolve_format("auto", object()) == "json"
    assert resolve_format("text", object()) == "text"

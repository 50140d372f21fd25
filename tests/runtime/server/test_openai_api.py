"""The official ``openai`` client against a live server (rapidocr engine on 127.0.0.1):
chat completion with a data-URL image, streaming, models.list, and its error paths."""

from __future__ import annotations

import base64
import http.server
import io
import threading

import openai
import pytest
from app_for_tests import make_settings, serving
from docparser_runtime.server.endpoints.openai.api_router import mode_from_prompt
from engines_for_tests import png_bytes
from live_server import LiveServer
from PIL import Image, ImageDraw, ImageFont

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
WORDS = "Invoice 2026"


def data_url() -> str:
    img = Image.new("RGB", (420, 120), "white")
    ImageDraw.Draw(img).text((20, 30), WORDS, fill="black", font=ImageFont.truetype(FONT, 44))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def messages(prompt: str, url: str) -> list[dict]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": url}},
                {"type": "text", "text": prompt},
            ],
        }
    ]


@pytest.fixture(scope="module")
def client():
    with LiveServer(env={"DOCPARSER_DEFAULT_TIER": "0"}) as server:
        yield openai.OpenAI(
            base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120
        )


@pytest.mark.slow
def test_models_list_names_the_loaded_engine(client):
    models = client.models.list()
    ids = [m.id for m in models.data]
    assert ids[0] == "rapidocr" and ids[1].startswith("rapidocr:rapidocr-onnxruntime")
    assert client.models.retrieve("rapidocr").id == "rapidocr"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")


@pytest.mark.slow
def test_chat_completion_with_a_data_url_image(client):
    reply = client.chat.completions.create(
        model="rapidocr", messages=messages("Free OCR.", data_url()), max_tokens=256
    )
    text = reply.choices[0].message.content
    assert "Invoice" in text and "2026" in text
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage.prompt_tokens == 256  # tier 0: the global view only
    assert reply.usage.completion_tokens > 0
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


@pytest.mark.slow
def test_streaming_chat_completion_deltas_add_up_to_the_answer(client):
    url = data_url()
    stream = client.chat.completions.create(
        model="rapidocr",
        messages=messages("<|grounding|>Convert the document to markdown.", url),
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finishes == ["stop"]
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == 256
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    whole = client.chat.completions.create(
        model="rapidocr", messages=messages("<|grounding|>Convert the document to markdown.", url)
    )
    assert text == whole.choices[0].message.content and "Invoice" in text


@pytest.mark.slow
def test_errors_reach_the_client_as_api_errors(client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=messages("Free OCR.", data_url()))
    with pytest.raises(openai.BadRequestError) as remote:
        client.chat.completions.create(
            model="rapidocr", messages=messages("Free OCR.", "http://169.254.169.254/latest")
        )
    assert remote.value.body["code"] == "url_not_allowed"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="rapidocr", messages=[{"role": "user", "content": "no image here"}]
        )


# -- in-process: prompt -> mode, and the allow-listed URL fetch (SSRF guard) -------------
@pytest.mark.parametrize(
    ("prompt", "mode"),
    [
        ("<image>\nFree OCR.", "text"),
        ("<image>\n<|grounding|>Convert the document to markdown.", "grounding"),
        ("<image>\nConvert the document to markdown.", "markdown"),
        ("", "markdown"),
    ],
)
def test_prompt_selects_the_mode(prompt, mode):
    assert mode_from_prompt(prompt) == mode


class _Files(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/img.png":
            body = png_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:  # anything else redirects to the image: must not be followed
            self.send_response(302)
            self.send_header("Location", "/img.png")
            self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def file_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def test_remote_image_urls_only_from_the_allow_list_and_without_redirects(file_server):
    settings = make_settings(url_fetch_allowlist=[file_server])

    def chat(url: str) -> dict:
        return {"model": "gated-test", "messages": messages("Free OCR.", url)}

    async with serving(settings) as (_app, client, _engine):
        ok = await client.post("/v1/chat/completions", json=chat(f"{file_server}/img.png"))
        assert ok.status_code == 200, ok.text
        assert ok.json()["choices"][0]["message"]["content"].startswith("# page 0 200x120 text")
        redirect = await client.post("/v1/chat/completions", json=chat(f"{file_server}/go"))
        assert redirect.status_code == 400
        assert redirect.json()["error"]["code"] == "url_fetch_failed"
        other = file_server.rsplit(":", 1)[0] + ":9/img.png"  # same host, other port
        refused = await client.post("/v1/chat/completions", json=chat(other))
        assert refused.json()["error"]["code"] == "url_not_allowed"


def test_image_url_as_a_bare_string_is_accepted_like_the_object_form():
    from docparser_runtime.server.endpoints.openai.protocol import ChatCompletionRequest

    url = "data:image/png;base64,AAAA"
    bare = {"type": "image_url", "image_url": url}
    obj = {"type": "image_url", "image_url": {"url": url}}
    parsed = [
        ChatCompletionRequest.model_validate(
            {"model": "m", "messages": [{"role": "user", "content": [part]}]}
        )
        .messages[0]
        .content[0]
        for part in (bare, obj)
    ]
    assert parsed[0] == parsed[1]
    assert parsed[0].image_url.url == url

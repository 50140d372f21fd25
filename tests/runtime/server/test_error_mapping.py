"""error_mapping: every taxonomy class has one status; framework errors share the shape."""

from __future__ import annotations

import httpx
import pytest
from docparser_runtime import errors
from docparser_runtime.server.error_mapping import (
    error_from_reply,
    error_response,
    install_error_handlers,
    status_for,
)
from fastapi import FastAPI
from pydantic import BaseModel

EXPECTED = {
    errors.InvalidInput: 400,
    errors.UnsupportedMediaType: 415,
    errors.PayloadTooLarge: 413,
    errors.Unauthenticated: 401,
    errors.PermissionDenied: 403,
    errors.NotFound: 404,
    errors.Conflict: 409,
    errors.Overloaded: 429,
    errors.Unavailable: 503,
    errors.DeadlineExceeded: 504,
    errors.GpuOutOfMemory: 422,
    errors.EngineFailure: 500,
    errors.WeightsError: 503,
    errors.DocParserError: 500,
}


def test_every_top_level_error_category_has_an_explicit_status():
    """A new category must get a deliberate status; subclasses inherit their parent's."""
    from docparser_runtime.server.error_mapping import STATUS_BY_ERROR

    for cls in errors.DocParserError.__subclasses__():
        if cls.__module__ == errors.__name__:
            assert cls in STATUS_BY_ERROR, f"{cls.__name__} has no status in error_mapping"
            assert STATUS_BY_ERROR[cls] == EXPECTED[cls]


@pytest.mark.parametrize(
    ("cls", "status"), EXPECTED.items(), ids=lambda v: getattr(v, "__name__", v)
)
def test_status_and_body(cls, status):
    exc = cls("something happened")
    assert status_for(exc) == status
    resp = error_response(exc)
    assert resp.status_code == status
    assert resp.body == (
        b'{"error":{"code":"' + cls.code.encode() + b'","message":"something happened"}}'
    )


def test_subclass_outside_the_module_inherits_the_parent_status():
    class ScannedTooSmall(errors.InvalidInput):
        code = "too_small"

    assert status_for(ScannedTooSmall("x")) == 400


def test_custom_code_and_retry_after_and_www_authenticate():
    resp = error_response(errors.Overloaded("busy", retry_after_s=2.2, code="rate_limited"))
    assert resp.status_code == 429
    assert resp.headers["Retry-After"] == "3"
    assert b'"code":"rate_limited"' in resp.body
    assert (
        error_response(errors.Overloaded("busy", retry_after_s=0.1)).headers["Retry-After"] == "1"
    )
    assert error_response(errors.Unauthenticated("no key")).headers["WWW-Authenticate"] == "Bearer"
    assert "Retry-After" in error_response(errors.Unavailable("loading")).headers


class Item(BaseModel):
    name: str
    count: int


def small_app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/items")
    async def create(item: Item) -> dict:
        return {"ok": item.name}

    @app.get("/conflict")
    async def conflict() -> dict:
        raise errors.Conflict("idempotency key reused with another body")

    @app.get("/boom")
    async def boom() -> dict:
        raise RuntimeError("password=hunter2 at /secret/path")

    return app


@pytest.fixture
async def client():
    transport = httpx.ASGITransport(app=small_app(), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        yield c


async def test_handlers_map_taxonomy_errors(client):
    resp = await client.get("/conflict")
    assert resp.status_code == 409
    assert resp.json() == {
        "error": {"code": "conflict", "message": "idempotency key reused with another body"}
    }


async def test_validation_errors_use_the_error_shape(client):
    resp = await client.post("/items", json={"name": "a", "count": "many"})
    assert resp.status_code == 422
    error = resp.json()["error"]
    assert error["code"] == "validation_error"
    assert "count" in error["message"]


async def test_malformed_json_is_400_invalid_json(client):
    resp = await client.post(
        "/items", content=b'{"name": ', headers={"content-type": "application/json"}
    )
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "invalid_json"


async def test_unknown_route_and_method(client):
    assert (await client.get("/nope")).json()["error"]["code"] == "not_found"
    resp = await client.delete("/items")
    assert resp.status_code == 405
    assert resp.json()["error"]["code"] == "method_not_allowed"


async def test_unexpected_exception_is_500_without_leaking(client):
    resp = await client.get("/boom")
    assert resp.status_code == 500
    assert resp.json() == {"error": {"code": "engine_failure", "message": "internal server error"}}
    assert "hunter2" not in resp.text


@pytest.mark.parametrize(
    "exc",
    [
        errors.InvalidInput("bad tier", code="invalid_tier"),
        errors.PayloadTooLarge("too big"),
        errors.PermissionDenied("no", code="invalid_api_key"),
        errors.Overloaded("slow down", retry_after_s=12, code="rate_limited"),
        errors.Unavailable("later", code="no_capacity", retry_after_s=30),
        errors.DeadlineExceeded("late"),
        errors.DocumentTooComplex("hostile"),
    ],
)
def test_a_relayed_error_reply_becomes_the_same_reply_again(exc):
    """The CPU front turns a pod's error reply back into an error; answering it gives the
    client the pod's status, code, message and Retry-After."""
    import json

    sent = error_response(exc)
    again = error_from_reply(
        sent.status_code, json.loads(sent.body), retry_after=sent.headers.get("Retry-After")
    )
    relayed = error_response(again)
    assert relayed.status_code == sent.status_code
    assert relayed.body == sent.body
    assert relayed.headers.get("Retry-After") == sent.headers.get("Retry-After")


def test_a_reply_without_an_error_body_is_a_backend_failure():
    assert error_from_reply(502, "<html>bad gateway</html>").code == "backend_failure"
    assert error_from_reply(418, {"error": {"code": "teapot", "message": "x"}}).code == (
        "backend_failure"
    )

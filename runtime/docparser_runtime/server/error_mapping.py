"""THE one place where errors become HTTP responses.

Every route raises classes from ``docparser_runtime.errors``; this module decides the
status code and the body ``{"error": {"code", "message"}}``. Framework errors (request
validation, unknown routes, wrong methods) and unexpected exceptions are folded into the
same shape so clients parse one error format. Unexpected exceptions become a 500
``engine_failure`` whose message never carries a traceback or internal detail.
"""

from __future__ import annotations

import logging
import math

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from docparser_runtime import errors
from docparser_runtime.errors import public_message

log = logging.getLogger("docparser.server")

# Most specific class first: lookup walks the exception's MRO.
STATUS_BY_ERROR: dict[type[errors.DocParserError], int] = {
    errors.DocumentTooComplex: 422,
    errors.GpuOutOfMemory: 422,
    errors.UnsupportedMediaType: 415,
    errors.PayloadTooLarge: 413,
    errors.RequestTimeout: 408,
    errors.InvalidInput: 400,
    errors.Unauthenticated: 401,
    errors.PermissionDenied: 403,
    errors.NotFound: 404,
    errors.Conflict: 409,
    errors.Overloaded: 429,
    errors.Unavailable: 503,
    errors.DeadlineExceeded: 504,
    errors.EngineFailure: 500,
    errors.WeightsError: 503,
    errors.DocParserError: 500,
}

# Statuses from Starlette/FastAPI's own HTTPException (routing) -> our codes.
CODE_BY_HTTP_STATUS = {
    400: "invalid_input",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "overloaded",
    503: "unavailable",
}

# Returned when a client hangs up before its reply is ready (nginx's convention); only
# visible in logs and metrics, since nobody is left to read it.
CLIENT_CLOSED_STATUS = 499


UNAVAILABLE_RETRY_AFTER_S = 5.0

# The reverse of ``STATUS_BY_ERROR`` (its most specific class per status): the CPU front
# turns a backend pod's error reply back into the same error, so its client gets the
# status, code and message the pod gave, mapped here like any other error.
ERROR_BY_STATUS: dict[int, type[errors.DocParserError]] = {}
for _cls, _status in STATUS_BY_ERROR.items():
    ERROR_BY_STATUS.setdefault(_status, _cls)


def error_from_reply(
    status: int, body: object, *, retry_after: str | None = None
) -> errors.DocParserError:
    """The error a pod answered (``{"error": {"code", "message"}}`` with ``status``)."""
    detail = body.get("error") if isinstance(body, dict) else None
    code = str(detail.get("code", "")) if isinstance(detail, dict) else ""
    message = str(detail.get("message", "")) if isinstance(detail, dict) else ""
    cls = ERROR_BY_STATUS.get(status)
    if cls is None or not code:
        return errors.EngineFailure(
            f"the backend answered HTTP {status} without an error body", code="backend_failure"
        )
    wait: float | None = None
    if retry_after is not None:
        try:
            wait = max(0.0, float(retry_after))
        except ValueError:
            wait = None
    if issubclass(cls, errors.Overloaded):
        return cls(message, code=code, retry_after_s=1.0 if wait is None else wait)
    if issubclass(cls, errors.Unavailable):
        return cls(message, code=code, retry_after_s=wait)
    return cls(message, code=code)


def status_for(exc: errors.DocParserError) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[cls]
    return 500


def error_body(code: str, message: str) -> dict[str, dict[str, str]]:
    return {"error": {"code": code, "message": public_message(message)}}


def error_response(exc: errors.DocParserError) -> JSONResponse:
    """The HTTP response for one taxonomy error (also used by streaming/job code)."""
    status = status_for(exc)
    headers: dict[str, str] = {}
    if isinstance(exc, errors.Overloaded):
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_s)))
    elif isinstance(exc, errors.Unavailable):
        wait = exc.retry_after_s if exc.retry_after_s is not None else UNAVAILABLE_RETRY_AFTER_S
        headers["Retry-After"] = str(max(1, math.ceil(wait)))
    elif isinstance(exc, errors.Unauthenticated):
        headers["WWW-Authenticate"] = "Bearer"
    if status >= 500:
        log.warning("request failed: %s (%s)", exc.code, exc.message)
    return JSONResponse(error_body(exc.code, exc.message), status_code=status, headers=headers)


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        parts.append(f"{loc or 'body'}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


async def _on_docparser_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, errors.DocParserError)
    return error_response(exc)


async def _on_validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    if any(err.get("type") == "json_invalid" for err in exc.errors()):
        return JSONResponse(error_body("invalid_json", "the body is not valid JSON"), 400)
    return JSONResponse(error_body("validation_error", _validation_message(exc)), 422)


async def _on_http_exception(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = CODE_BY_HTTP_STATUS.get(exc.status_code, "http_error")
    detail = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    return JSONResponse(
        error_body(code, detail), status_code=exc.status_code, headers=exc.headers or None
    )


async def _on_client_disconnect(_: Request, exc: Exception) -> Response:
    # The client hung up while sending the body: nobody to answer, nothing went wrong here.
    return Response(status_code=CLIENT_CLOSED_STATUS)


async def _on_unexpected(_: Request, exc: Exception) -> JSONResponse:
    log.error("unexpected error", exc_info=exc)
    return JSONResponse(error_body("engine_failure", "internal server error"), 500)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(errors.DocParserError, _on_docparser_error)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_exception)
    app.add_exception_handler(ClientDisconnect, _on_client_disconnect)
    app.add_exception_handler(Exception, _on_unexpected)

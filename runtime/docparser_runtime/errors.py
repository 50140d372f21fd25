"""The runtime's one error taxonomy.

Every failure a caller can cause or observe is one of these classes, each with a stable
machine-readable ``code``. The HTTP status for each class is decided in exactly one
place (``server/error_mapping.py``); nothing else picks status codes. A bad input must
always be an ``InvalidInput`` (4xx), never an unhandled exception (5xx).
"""

from __future__ import annotations

import re

# A Python object repr (``<_io.BytesIO object at 0x7f...>``) is an internal detail and
# an address-space oracle; library messages that embed one are scrubbed here, once.
_OBJECT_REPR = re.compile(r"<[^<>]{0,200}? at 0x[0-9a-fA-F]+>")
MAX_MESSAGE_CHARS = 2000


def public_message(message: str) -> str:
    """A message safe to show a client: no object reprs, bounded length."""
    text = _OBJECT_REPR.sub("<object>", message)
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 3] + "..."
    return text


class DocParserError(Exception):
    """Base class. ``code`` is stable API; ``message`` is for humans."""

    code = "internal_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class InvalidInput(DocParserError):
    """The request is malformed: bad image, bad PDF, bad option, bad base64 (400)."""

    code = "invalid_input"


class UnsupportedMediaType(InvalidInput):
    """The bytes are not one of the accepted image or PDF formats (415)."""

    code = "unsupported_media_type"


class PayloadTooLarge(InvalidInput):
    """Upload, pixel count (decompression bomb) or page count beyond limits (413)."""

    code = "payload_too_large"


class DocumentTooComplex(InvalidInput):
    """Decoding the document hit a sandbox limit (wall clock, CPU time, memory) or crashed
    the decoder: a valid-looking but hostile or pathological document (422)."""

    code = "document_too_complex"


class RequestTimeout(InvalidInput):
    """The client sent its request body too slowly or stopped half-way (408)."""

    code = "request_timeout"


class Unauthenticated(DocParserError):
    """No or malformed credentials (401)."""

    code = "unauthenticated"


class PermissionDenied(DocParserError):
    """Credentials present but not accepted (403)."""

    code = "permission_denied"


class NotFound(DocParserError):
    """Unknown job id or route (404)."""

    code = "not_found"


class Conflict(DocParserError):
    """Idempotency key reused with a different body, or a job state conflict (409)."""

    code = "conflict"


class Overloaded(DocParserError):
    """Queue full, rate limit or concurrency cap hit (429 with Retry-After)."""

    code = "overloaded"

    def __init__(self, message: str, *, retry_after_s: float = 1.0, code: str | None = None):
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s


class Unavailable(DocParserError):
    """Starting up, draining, engine not loaded, or (the CPU front) no backend ready in time
    (503). ``retry_after_s``: when the client should come back (``Retry-After``); None
    leaves the default of ``server/error_mapping.py``."""

    code = "unavailable"

    def __init__(
        self, message: str, *, code: str | None = None, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s


class DeadlineExceeded(DocParserError):
    """The request's deadline passed before inference finished (504)."""

    code = "deadline_exceeded"


class GpuOutOfMemory(DocParserError):
    """One page alone does not fit in GPU memory at the requested tier (422): the batch
    was split down to that page first, so only it fails; a lower tier may fit."""

    code = "gpu_out_of_memory"


class EngineFailure(DocParserError):
    """The model failed on valid input: our bug or the hardware's (500)."""

    code = "engine_failure"


class WeightsError(DocParserError):
    """Weights missing, unverified or failing their sha256 (fetch-weights, serve)."""

    code = "weights_error"

"""Process logging: JSON lines for machines, text for people.

Why: the deployment guides we follow ask for per-request latency, input size, output length
and error in the logs, and a platform team's log pipeline (Loki, Elasticsearch, Cloud
Logging) wants one JSON object per line. ``auto`` picks JSON when stderr is not a terminal
(a container) and text at a terminal. Extra fields travel in ``record.fields`` (a dict),
so call sites stay plain ``logging`` calls.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import Any, Literal

LogFormat = Literal["auto", "json", "text"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, message, then ``record.fields``."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update({k: v for k, v in fields.items() if k not in line})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, separators=(",", ":"))


def resolve_format(fmt: LogFormat, stream: object = None) -> Literal["json", "text"]:
    if fmt != "auto":
        return fmt
    stream = stream if stream is not None else sys.stderr
    return "text" if getattr(stream, "isatty", lambda: False)() else "json"


def configure(level: str, fmt: LogFormat = "auto") -> None:
    """Root logging for a server process (replaces handlers set before)."""
    handler = logging.StreamHandler()
    if resolve_format(fmt) == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())

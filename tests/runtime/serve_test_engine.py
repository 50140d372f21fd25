"""``docparser-runtime serve`` with the deterministic ``GatedEngine`` instead of a model.

The production app and the production drain server (``server/drain.run_server``) run in a
real process; only the engine is swapped so process-level tests (SIGTERM drain, SIGKILL
failover) control how long each page takes instead of depending on OCR speed on a busy
machine. Settings come from ``DOCPARSER_*`` env vars, as in production.

    python serve_test_engine.py --port 8123 --delay 1.0
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fakes"))  # engines_for_tests

from docparser_runtime import logs
from docparser_runtime.server.app import create_app
from docparser_runtime.server.drain import run_server
from docparser_runtime.settings import Settings
from engines_for_tests import GatedEngine


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds per batch")
    parser.add_argument("--fail", action="store_true", help="every batch fails (a 500)")
    parser.add_argument("--truncate", type=int, help="cut every page's text to N characters")
    parser.add_argument(
        "--hang-on-close", action="store_true", help="engine.close() never returns (a stuck exit)"
    )
    args = parser.parse_args()
    settings = Settings(host=args.host, port=args.port)
    if "DOCPARSER_LOG_FORMAT" in os.environ:  # the production log lines (JSON: request ids)
        logs.configure(settings.log_level, settings.log_format)
    else:
        logging.basicConfig(level=settings.log_level.upper())
    engine = GatedEngine(delay_s=args.delay)
    engine.broken = args.fail
    engine.truncate_to = args.truncate
    if args.hang_on_close:

        def close_forever() -> None:
            threading.Event().wait()

        engine.close = close_forever  # type: ignore[method-assign]
    run_server(create_app(settings, engine), settings)


if __name__ == "__main__":
    main()

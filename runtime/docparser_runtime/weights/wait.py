"""Wait for weights another process is putting in place (``docparser-runtime wait-weights``).

The operator's weights cache fills a shared claim with a Job, while the runtime pods that
mount it read-only start at once and wait in an init container. ``fetch-weights`` renames
the verified copy into place in one step, so its manifest appearing means every file is
there; ``serve`` then verifies the files itself before loading them. Waiting here keeps
the pod in ``Init`` with a clear log line instead of crash-looping on a missing directory.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from docparser_runtime.errors import WeightsError
from docparser_runtime.weights.manifest import MANIFEST_NAME

log = logging.getLogger(__name__)


def wait_for_weights(
    directory: Path,
    *,
    timeout_s: float,
    poll_s: float = 2.0,
    report_every_s: float = 30.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Return once ``directory`` holds a manifest; ``WeightsError`` after ``timeout_s``."""
    manifest = Path(directory) / MANIFEST_NAME
    start = clock()
    next_report = start
    while not manifest.is_file():
        now = clock()
        if now - start >= timeout_s:
            raise WeightsError(
                f"no verified weights at {directory} after {timeout_s:.0f}s: the cache fill "
                "Job did not finish (kubectl get jobs -l app.kubernetes.io/component=weights-cache)"
            )
        if now >= next_report:
            log.info(
                "waiting for the weights cache to fill %s (%.0fs so far)", directory, now - start
            )
            next_report = now + report_every_s
        sleep(poll_s)
    log.info("weights present at %s after %.0fs", directory, clock() - start)

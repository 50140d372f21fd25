"""Suite-wide pytest setup shared by tests/runtime and tests/operator.

The real control plane (hack/controlplane) is a plugin so its `real_apiserver` fixture and its
"which backend ran" report lines are available to every suite. hack/ holds the Go-built tools
(control plane, gitopscheck, SeaweedFS), not tests; pytest's `pythonpath` (pyproject.toml) puts
it on sys.path, so the plugins import as `controlplane`, `gitopscheck` and `seaweedfs`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

pytest_plugins = [
    "controlplane.pytest_plugin",
    "gitopscheck.pytest_plugin",
    "seaweedfs.pytest_plugin",
]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `pytest-xdist --dist worksteal`, the modules holding a `slow` test run first.

    WHY: a minute-long test collected late (tests/runtime/server/test_tier_auto_server.py sorts near
    the end) runs while the other worker has nothing left, and the phase waits on it alone.
    Longest work first lets the many short tests fill both workers at the end; worksteal then
    moves queued tests to whichever worker runs dry. Only there: `--dist load` hands each worker
    its first eighth of the collection up front, which would give one worker every slow module.
    Whole modules move, in their own order, so a module's tests stay together (module-scoped
    fixtures start once per worker, as before); the sort is stable and the same in every
    worker, as xdist requires. Serial runs keep the collection order."""
    if not os.environ.get("PYTEST_XDIST_WORKER") or config.getoption("dist", "no") != "worksteal":
        return
    slow = {getattr(item, "module", None) for item in items if item.get_closest_marker("slow")}
    slow.discard(None)
    items.sort(key=lambda item: getattr(item, "module", None) not in slow)


def _not_pytests(handler: logging.Handler) -> bool:
    return not type(handler).__module__.startswith("_pytest")


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """The root logger's own handlers and level as they were before each test (pytest's
    capture handlers come and go by phase and are left to pytest). WHY: a test that runs a CLI
    in-process (``main(["serve", ...])`` calls ``logs.configure``) left a handler on pytest's
    captured stderr, which pytest closes after that test; a later in-process server then
    printed "--- Logging error --- ValueError: I/O operation on closed file" per request."""
    root = logging.getLogger()
    before, level = [h for h in root.handlers if _not_pytests(h)], root.level
    yield
    for handler in root.handlers[:]:
        if _not_pytests(handler) and handler not in before:
            root.removeHandler(handler)
    for handler in before:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)

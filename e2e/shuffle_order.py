"""A pytest plugin that runs the collected scenarios in a seeded, shuffled order.

Loaded by the race hunt (e2e/race_hunt.py: ``-p shuffle_order`` with e2e/ on PYTHONPATH) when
DOCPARSER_SHUFFLE_SEED is set; a plain run keeps the collection order. WHY: a scenario that
passes only after another one (a namespace, a cordon, a GPU-holding pod or an operator leader
left behind) passes in the written order every time; shuffled, the run that fails names the
seed that reproduces it. Modules stay whole (their module-scoped fixtures start once) and
move as units; the tests inside each module are shuffled too.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from typing import TypeVar

import pytest

SEED_ENV = "DOCPARSER_SHUFFLE_SEED"
T = TypeVar("T")


def shuffled(items: Sequence[T], group: Sequence[str], seed: int) -> list[T]:
    """`items` with each group (``group[i]`` names item i's) kept together: the groups in a
    seeded order, the items inside each group shuffled by the same generator."""
    rng = random.Random(seed)
    groups: dict[str, list[T]] = {}
    for item, key in zip(items, group, strict=True):
        groups.setdefault(key, []).append(item)
    keys = list(groups)
    rng.shuffle(keys)
    order: list[T] = []
    for key in keys:
        members = groups[key]
        rng.shuffle(members)
        order.extend(members)
    return order


def _seed() -> int | None:
    raw = os.environ.get(SEED_ENV, "").strip()
    return int(raw) if raw else None


def pytest_report_header(config: pytest.Config) -> str | None:
    seed = _seed()
    return None if seed is None else f"shuffled order: {SEED_ENV}={seed}"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seed = _seed()
    if seed is None:
        return
    items[:] = shuffled(items, [item.nodeid.split("::", 1)[0] for item in items], seed)

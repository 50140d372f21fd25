"""A Degraded reason the pass found (``Problem``): the value planning hands to status.

Why here, at the floor of ``plan/``: the planners that find a problem (drain, idle, refusals,
decide) sit below status (core/status/ reports what the plan did and reads the plan's types),
so the one value they share with the conditions (core/status/conditions.py, which turns
problems into ``Degraded``) lives on the plan's side.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """Something the operator found wrong with the spec or the cluster (-> Degraded)."""

    reason: str
    message: str
    since: str | None = None  # when the cluster first said so (for a reason with a grace period)

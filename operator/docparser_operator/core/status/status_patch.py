"""The status write: its merge patch, and whether it would change anything (pure).

A pass builds its whole status (core/status/conditions.py) and writes it as a JSON merge patch (RFC
7386). A merge patch merges objects key by key: a section the pass no longer writes, or a
field a section lost, stays on the server unless the patch says ``null`` for it, and a
nested one only by a nested null (``{"canary": {"shadow": null}}``: the canary stays, its
shadow goes). Which parts go with their feature is the one table ``SECTIONS``
(api/status_models.py): a section, and every field within one, that the live status has and
the pass's lacks gets its null here. Fields outside every section are written by every pass.

Whether to write is decided on exactly that patch: the status it leads to, compared with
the live one. A write that would change nothing is not sent, and one that was sent leaves
the live status equal to what the next pass computes at rest, so no write repeats: at rest
the operator writes nothing (the promise the resync relies on).
"""

from __future__ import annotations

import copy
from typing import Any

from docparser_operator.api.status_models import SECTIONS

_SECTION_PATHS = frozenset(section.path for section in SECTIONS)


def owned(path: tuple[str, ...]) -> bool:
    """Whether the status field at ``path`` is a section or lies within one (it goes when a
    pass does not write it)."""
    return any(path[:n] in _SECTION_PATHS for n in range(1, len(path) + 1))


def status_patch(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """The merge patch that writes ``new`` over the live ``old``: all of ``new``, and a null
    for each section or field within one that ``old`` has and ``new`` lacks."""
    return _patch(old or {}, new, ())


def _patch(old: dict[str, Any], new: dict[str, Any], at: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            out[key] = _patch(before, value, (*at, key))
        else:
            out[key] = value
    for key, before in old.items():
        if key not in new and before is not None and owned((*at, key)):
            out[key] = None  # a merge-patch null removes the field
    return out


def merged(target: Any, patch: Any) -> Any:
    """What the API server stores after the merge ``patch`` on ``target`` (RFC 7386)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merged(out.get(key), value)
    return out


def status_write(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any] | None:
    """The merge patch to send so the live status ``old`` says ``new``; None when it would
    change nothing (decided on that very patch: the resync at rest must not write)."""
    old = old or {}
    patch = status_patch(old, new)
    return patch if merged(old, patch) != old else None


def status_changed(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """Whether writing ``new`` would change the live status ``old``."""
    return status_write(old, new) is not None

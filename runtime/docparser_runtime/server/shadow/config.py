"""The shadow config: a JSON file the operator renders into a ConfigMap and mounts in every
runtime pod, re-read when it changes.

WHY a mounted file and not an environment variable: turning the shadow on or off, or
pointing it at a new canary, must not restart stable's pods, and a pod template change
would. The kubelet updates a ConfigMap volume in place (within about a minute); a poll of
the file's stat data every ``shadow_poll_s`` (at most 5 s) notices it and re-reads it.

A missing, unreadable or invalid file is shadow off (logged once per change, without its
content). A pod mirrors only while ``enabled`` and its own revision (``DOCPARSER_REVISION``,
from the pod's ``docparser.io/revision`` label) is ``stableRevision``: the canary's pods read
the same file and never mirror.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

log = logging.getLogger("docparser.shadow")

MAX_CONFIG_BYTES = 64 * 1024


class _ConfigFile(BaseModel):
    """The file's schema (CONTRACTS.md, issue 24); unknown keys are ignored (a newer
    operator may add some)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    enabled: bool = False
    target: str = ""
    percent: float = Field(0.0, ge=0, le=100)
    max_pages_per_minute: float = Field(0.0, ge=0, alias="maxPagesPerMinute")
    stable_revision: str = Field("", max_length=63, alias="stableRevision")
    canary_revision: str = Field("", max_length=63, alias="canaryRevision")


@dataclass(frozen=True)
class ShadowConfig:
    enabled: bool = False
    target: str = ""
    percent: float = 0.0
    max_pages_per_minute: float = 0.0
    stable_revision: str = ""
    canary_revision: str = ""

    def mirrors(self, revision: str) -> bool:
        """Whether a pod of ``revision`` mirrors under this config."""
        own = bool(revision) and revision == self.stable_revision
        return self.enabled and bool(self.target) and own

    @property
    def labels(self) -> dict[str, str]:
        return {"stable_revision": self.stable_revision, "canary_revision": self.canary_revision}


OFF = ShadowConfig()


def parse_config(raw: bytes) -> ShadowConfig:
    """The config a file's bytes describe; raises ``ValueError`` when they describe none."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("not valid JSON") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    try:
        parsed = _ConfigFile.model_validate(data)
    except ValidationError as exc:
        fields = ", ".join(".".join(str(p) for p in e["loc"]) for e in exc.errors()[:5])
        raise ValueError(f"invalid fields: {fields}") from None
    target = parsed.target.strip()
    if parsed.enabled:
        url = urlsplit(target)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError("target must be an http(s) URL")
    return ShadowConfig(
        enabled=parsed.enabled,
        target=target.rstrip("/"),
        percent=parsed.percent,
        max_pages_per_minute=parsed.max_pages_per_minute,
        stable_revision=parsed.stable_revision,
        canary_revision=parsed.canary_revision,
    )


class ConfigWatcher:
    """The current config of one file; ``refresh()`` re-reads it when its stat data
    changed and calls ``on_change(old, new)`` when the config itself did."""

    def __init__(
        self, path: Path, on_change: Callable[[ShadowConfig, ShadowConfig], None] | None = None
    ) -> None:
        self.path = Path(path)
        self.current = OFF
        self.reloads = 0
        self._on_change = on_change
        self._signature: tuple[object, ...] | None = None

    def _stat(self) -> tuple[object, ...]:
        try:
            st = self.path.stat()  # follows the ConfigMap volume's ..data symlink
        except OSError as exc:
            return ("missing", type(exc).__name__)
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def refresh(self) -> ShadowConfig:
        signature = self._stat()
        if signature == self._signature:
            return self.current
        self._signature = signature
        new = self._read(signature)
        old, self.current = self.current, new
        if new != old:
            self.reloads += 1
            log.info(
                "shadow config: %s (stable %s, canary %s, %g%%, %g pages/min)",
                "on" if new.enabled else "off", new.stable_revision or "-",
                new.canary_revision or "-", new.percent, new.max_pages_per_minute,
            )  # fmt: skip
            if self._on_change is not None:
                self._on_change(old, new)
        return new

    def _read(self, signature: tuple[object, ...]) -> ShadowConfig:
        if signature[0] == "missing":
            return OFF
        try:
            with self.path.open("rb") as f:
                raw = f.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            log.warning("shadow config %s unreadable (%s): off", self.path, type(exc).__name__)
            return OFF
        if len(raw) > MAX_CONFIG_BYTES:
            log.warning("shadow config %s larger than %d bytes: off", self.path, MAX_CONFIG_BYTES)
            return OFF
        try:
            return parse_config(raw)
        except ValueError as exc:
            log.warning("shadow config %s ignored (%s): off", self.path, exc)
            return OFF

"""The base of every CRD-mirroring model (pydantic v2): a leaf, so that spec (models.py) and
status (status_models.py) models share it without importing each other."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class WireModel(BaseModel):
    """camelCase on the wire (like the CRD), snake_case in Python; unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    def to_wire(self) -> dict[str, Any]:
        """The object as the API server stores it: camelCase keys, unset (None) fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class StatusModel(WireModel):
    """A part of ``status``: unknown fields are ignored, not refused. Status is what an
    operator wrote, and Helm never downgrades a CRD: after a rollback to an older operator the
    API server keeps serving the sections a newer one wrote, and refusing them would make the
    whole DocParser unreadable (SpecInvalid) for a field nobody set by hand."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )


class SecretRef(WireModel):
    """A reference by name to an object in the DocParser's namespace (a Secret, a ConfigMap)."""

    name: Annotated[str, Field(min_length=1, max_length=253)]

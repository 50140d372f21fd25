"""Types shared by preprocessing and the engines: a leaf module that imports neither.

Preprocessing produces ``PageImage``s and engines consume them; keeping the type here lets
``preprocess`` stay free of engine imports (an import-linter contract in pyproject.toml).
"""

from __future__ import annotations

from dataclasses import dataclass

from PIL import Image


@dataclass(frozen=True)
class PageImage:
    """One decoded RGB page with its tiling plan (from ``preprocess.tiling``)."""

    index: int
    image: Image.Image
    tiles: int
    vision_tokens: int
    tier: int | None = None  # the tier this page is planned at (``auto``: the selector's)

    @property
    def width(self) -> int:
        return self.image.width

    @property
    def height(self) -> int:
        return self.image.height

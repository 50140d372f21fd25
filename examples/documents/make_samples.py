"""Render the sample documents in this folder (run from anywhere: python make_samples.py).

The samples are drawn by the same code as the CPU engine's tests
(``tests/runtime/documents.py``), so what the README shows is what the tests check.
Files stay small (well under 200 KB) so they can live in git.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tests" / "runtime"))

import documents  # noqa: E402  (test helper module, found through the path above)

MAX_BYTES = 200_000


def main() -> int:
    outputs: dict[str, bytes] = {
        "single-column.png": documents.png_bytes(documents.single_column().image),
        "two-columns.png": documents.png_bytes(documents.two_columns().image),
        "ruled-table.png": documents.png_bytes(documents.ruled_table().image),
        "rotated-scan.jpg": documents.exif_rotated_jpeg(documents.single_column()),
        "two-pages.pdf": documents.pdf_of(
            [documents.single_column(), documents.two_columns()], resolution=144
        ),
    }
    chinese = documents.chinese()
    if chinese is not None:
        outputs["chinese.png"] = documents.png_bytes(chinese.image)
    else:
        print("no CJK font found: chinese.png skipped (apt-get install fonts-wqy-microhei)")
    for name, data in outputs.items():
        if len(data) > MAX_BYTES:
            raise SystemExit(f"{name} is {len(data)} bytes, above {MAX_BYTES}")
        (HERE / name).write_bytes(data)
        print(f"{name}: {len(data)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Generated hostile (and plain) PDFs for the hostile-input tests and the attack bench.

Written by hand, object by object, so each attack is exactly the few kilobytes an
attacker would send: no PDF library "helpfully" flattens the nesting or clamps a page.
"""

from __future__ import annotations

import zlib


def _pdf(objects: list[bytes]) -> bytes:
    """Objects 1..n (object 1 is the catalog) -> a PDF with a correct xref table."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def _stream(dictionary: bytes, data: bytes) -> bytes:
    packed = zlib.compress(data)
    return (
        b"<< " + dictionary + b" /Filter /FlateDecode /Length %d >>\nstream\n" % len(packed)
        + packed + b"\nendstream"
    )  # fmt: skip


def _pages(page_objects: list[bytes], first_number: int) -> list[bytes]:
    """Catalog + page tree for pages numbered from ``first_number``."""
    kids = b" ".join(b"%d 0 R" % (first_number + i) for i in range(len(page_objects)))
    return [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % len(page_objects),
    ]


def blank_pdf(pages: int = 2, width_pt: float = 200, height_pt: float = 150) -> bytes:
    """``pages`` pages with one black bar each: a normal, cheap document."""
    content = _stream(b"", b"0 0 0 rg 10 10 50 20 re f")
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %g %g] /Contents 3 0 R >>" % (
        width_pt,
        height_pt,
    )
    page_objects = [page] * pages
    return _pdf([*_pages(page_objects, 4), content, *page_objects])


def huge_pages_pdf(pages: int = 8, inches: float = 200.0) -> bytes:
    """``pages`` pages of ``inches`` x ``inches``; 200 inches (14,400 pt) is the largest
    page PDFium accepts, about 830 M pixels at 144 dpi before our pixel cap."""
    size = inches * 72
    content = _stream(b"", b"0 0 0 rg 0 0 %g %g re f" % (size / 2, size / 3))
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %g %g] /Contents 3 0 R >>" % (
        size,
        size,
    )
    page_objects = [page] * pages
    return _pdf([*_pages(page_objects, 4), content, *page_objects])


def nested_xobject_pdf(levels: int = 8, fanout: int = 10, pages: int = 1) -> bytes:
    """Form XObjects nested ``levels`` deep, each drawing the next ``fanout`` times: a
    few kilobytes that cost ``fanout ** levels`` fills to render (10**8 at 8 levels)."""
    # Objects: 1 catalog, 2 pages, 3 page content, 4.. forms (4 = top), then the pages.
    forms = []
    for level in range(levels):
        number = 4 + level
        if level == levels - 1:
            body, resources = b"0 0 0 rg 0 0 1 1 re f", b"<< >>"
        else:
            draws = b"".join(
                b"q 0.3 0 0 0.3 %d %d cm /X Do Q " % (i % 4, i // 4) for i in range(fanout)
            )
            body, resources = draws, b"<< /XObject << /X %d 0 R >> >>" % (number + 1)
        forms.append(
            _stream(b"/Type /XObject /Subtype /Form /BBox [0 0 4 4] /Resources " + resources, body)
        )
    first_page = 4 + levels
    content = _stream(b"", b"q 100 0 0 100 10 10 cm /X Do Q")
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R "
        b"/Resources << /XObject << /X 4 0 R >> >> >>"
    )
    page_objects = [page] * pages
    return _pdf([*_pages(page_objects, first_page), content, *forms, *page_objects])

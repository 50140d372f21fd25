"""Unit tests for preprocess.decode: formats, normalisation and every bad input."""

from __future__ import annotations

import io
import random
import struct
import zlib

import numpy as np
import pytest
from docparser_runtime.errors import InvalidInput, PayloadTooLarge, UnsupportedMediaType
from docparser_runtime.preprocess.decode import decode_image, sniff_format
from PIL import Image

LIMIT = 50_000_000


def encode(img: Image.Image, fmt: str, **kwargs) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kwargs)
    return buf.getvalue()


def png_header_only(width: int, height: int) -> bytes:
    """A valid PNG signature + IHDR announcing ``width x height``, one empty IDAT, IEND.

    A few dozen bytes that would need gigabytes if a decoder trusted them.
    """

    def chunk(kind: bytes, payload: bytes) -> bytes:
        crc = zlib.crc32(kind + payload) & 0xFFFFFFFF
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 16)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def noise(width: int = 120, height: int = 80, seed: int = 1) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


@pytest.mark.parametrize(
    ("fmt", "pil_name"),
    [
        ("png", "PNG"),
        ("jpeg", "JPEG"),
        ("webp", "WEBP"),
        ("tiff", "TIFF"),
        ("bmp", "BMP"),
        ("gif", "GIF"),
    ],
)
def test_each_image_format_is_sniffed_and_decoded_to_rgb(fmt, pil_name):
    src = Image.new("RGB", (64, 40), (200, 30, 30))
    data = encode(src, pil_name)
    assert sniff_format(data) == fmt
    img = decode_image(data, max_pixels=LIMIT)
    assert img.mode == "RGB"
    assert img.size == (64, 40)
    r, g, b = img.getpixel((10, 10))
    assert r > 150 and g < 80 and b < 80


def test_pdf_is_sniffed_even_after_leading_junk_but_is_not_an_image():
    assert sniff_format(b"%PDF-1.7\n...") == "pdf"
    assert sniff_format(b"\x00" * 100 + b"%PDF-1.4\n") == "pdf"
    with pytest.raises(UnsupportedMediaType):
        decode_image(b"%PDF-1.7\n", max_pixels=LIMIT)


def test_empty_input_has_its_own_code():
    with pytest.raises(InvalidInput) as err:
        sniff_format(b"")
    assert err.value.code == "empty_document"
    with pytest.raises(InvalidInput) as err:
        decode_image(b"", max_pixels=LIMIT)
    assert err.value.code == "empty_document"


def test_random_bytes_are_unsupported():
    data = random.Random(7).randbytes(4096)
    with pytest.raises(UnsupportedMediaType) as err:
        decode_image(data, max_pixels=LIMIT)
    assert err.value.code == "unsupported_media_type"
    assert "binary" in err.value.message


@pytest.mark.parametrize(
    ("data", "hint"),
    [
        (b"Hello, this is a plain text file.\nNot an image at all.\n", "text"),
        (b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"></svg>', "SVG"),
        (b'<svg xmlns="http://www.w3.org/2000/svg" width="10"></svg>', "SVG"),
        (b"<!DOCTYPE html><html><body><img src=x></body></html>", "HTML"),
        (b'{"image": "not really"}', "text"),
    ],
)
def test_text_svg_html_posing_as_image_are_refused_with_a_hint(data, hint):
    with pytest.raises(UnsupportedMediaType) as err:
        decode_image(data, max_pixels=LIMIT)
    assert hint in err.value.message


def test_truncated_png_is_corrupt_not_half_a_page():
    data = encode(noise(300, 200), "PNG")
    with pytest.raises(InvalidInput) as err:
        decode_image(data[: len(data) // 2], max_pixels=LIMIT)
    assert err.value.code == "corrupt_image"


def test_png_signature_with_garbage_header_is_corrupt():
    with pytest.raises(InvalidInput) as err:
        decode_image(b"\x89PNG\r\n\x1a\n" + b"garbage" * 10, max_pixels=LIMIT)
    assert err.value.code == "corrupt_image"


def test_truncated_jpeg_is_corrupt():
    data = encode(noise(300, 200), "JPEG", quality=95)
    with pytest.raises(InvalidInput) as err:
        decode_image(data[: len(data) // 3], max_pixels=LIMIT)
    assert err.value.code == "corrupt_image"


def test_decompression_bomb_beyond_pillow_limit_is_payload_too_large():
    data = png_header_only(50_000, 50_000)
    assert len(data) < 200
    with pytest.raises(PayloadTooLarge) as err:
        decode_image(data, max_pixels=LIMIT)
    assert err.value.code == "image_too_large"


def test_pixel_limit_is_checked_from_the_header_before_decoding():
    # The header says 5000x5000 but there is no pixel data: if the decoder ran first,
    # this would be a corrupt_image error; our limit must fire before it.
    data = png_header_only(5000, 5000)
    with pytest.raises(PayloadTooLarge) as err:
        decode_image(data, max_pixels=1_000_000)
    assert "5000x5000" in err.value.message
    # A real image just under/over the limit.
    real = encode(Image.new("RGB", (100, 100), "white"), "PNG")
    assert decode_image(real, max_pixels=10_000).size == (100, 100)
    with pytest.raises(PayloadTooLarge):
        decode_image(real, max_pixels=9_999)


def test_exif_orientation_is_applied():
    # Stored landscape with a dark block at the left; Orientation 6 means "rotate 90
    # degrees clockwise to display", so the upright page is portrait, block on top.
    stored = Image.new("RGB", (200, 100), "white")
    stored.paste((0, 0, 0), (0, 0, 40, 100))
    exif = Image.Exif()
    exif[0x0112] = 6
    data = encode(stored, "JPEG", quality=95, exif=exif.tobytes())
    img = decode_image(data, max_pixels=LIMIT)
    assert img.size == (100, 200)
    assert max(img.getpixel((50, 10))) < 60
    assert min(img.getpixel((50, 190))) > 200


def test_cmyk_jpeg_becomes_rgb():
    cmyk = Image.new("CMYK", (60, 60), (0, 0, 0, 0))
    cmyk.paste((255, 0, 0, 0), (0, 0, 30, 60))  # cyan on the left half
    img = decode_image(encode(cmyk, "JPEG", quality=95), max_pixels=LIMIT)
    assert img.mode == "RGB"
    r, g, b = img.getpixel((10, 30))
    assert r < 60 and g > 200 and b > 200
    assert min(img.getpixel((50, 30))) > 230


@pytest.mark.parametrize("fmt", ["PNG", "TIFF"])
def test_16_bit_grey_is_scaled_not_clipped(fmt):
    arr = np.zeros((20, 30), dtype=np.uint16)
    arr[:, 10:20] = 32768
    arr[:, 20:] = 65535
    src = Image.fromarray(arr)
    assert src.mode == "I;16"
    img = decode_image(encode(src, fmt), max_pixels=LIMIT)
    assert img.mode == "RGB"
    assert img.getpixel((5, 5)) == (0, 0, 0)
    assert img.getpixel((15, 5)) == (128, 128, 128)
    assert img.getpixel((25, 5)) == (255, 255, 255)


def test_alpha_is_composited_on_white():
    src = Image.new("RGBA", (40, 20), (0, 0, 0, 0))  # fully transparent black
    src.paste((0, 0, 0, 255), (0, 0, 20, 20))  # opaque black glyph area
    img = decode_image(encode(src, "PNG"), max_pixels=LIMIT)
    assert img.getpixel((30, 10)) == (255, 255, 255)
    assert img.getpixel((5, 10)) == (0, 0, 0)


def test_grey_alpha_and_palette_transparency_are_composited_on_white():
    la = Image.new("LA", (20, 20), (0, 0))
    assert decode_image(encode(la, "PNG"), max_pixels=LIMIT).getpixel((3, 3)) == (255, 255, 255)
    pal = Image.new("P", (20, 20), 0)
    pal.putpalette([0, 0, 0, 255, 0, 0] + [0] * (254 * 3))
    pal.paste(1, (10, 0, 20, 20))
    data = encode(pal, "PNG", transparency=0)
    img = decode_image(data, max_pixels=LIMIT)
    assert img.getpixel((3, 3)) == (255, 255, 255)
    assert img.getpixel((15, 3)) == (255, 0, 0)


def test_bilevel_image_becomes_rgb():
    src = Image.new("1", (16, 16), 1)
    src.paste(0, (0, 0, 8, 16))
    img = decode_image(encode(src, "PNG"), max_pixels=LIMIT)
    assert img.getpixel((2, 2)) == (0, 0, 0)
    assert img.getpixel((12, 2)) == (255, 255, 255)


@pytest.mark.parametrize("fmt", ["GIF", "WEBP", "PNG", "TIFF"])
def test_animated_or_multi_frame_images_take_the_first_frame(fmt):
    red = Image.new("RGB", (32, 32), (255, 0, 0))
    blue = (
        Image.new("RGB", (48, 48), (0, 0, 255))
        if fmt == "TIFF"
        else Image.new("RGB", (32, 32), (0, 0, 255))
    )
    data = encode(red, fmt, save_all=True, append_images=[blue])
    assert getattr(Image.open(io.BytesIO(data)), "n_frames", 1) == 2
    img = decode_image(data, max_pixels=LIMIT)
    assert img.size == (32, 32)
    r, _, b = img.getpixel((16, 16))
    assert r > 200 and b < 60


@pytest.mark.parametrize("compression", ["group4", "tiff_lzw", "jpeg"])
def test_scanner_tiffs_decode(compression):
    page = Image.new("1", (200, 100), 1)
    page.paste(0, (0, 0, 50, 100))
    src = page.convert("RGB") if compression == "jpeg" else page
    img = decode_image(encode(src, "TIFF", compression=compression), max_pixels=LIMIT)
    assert img.mode == "RGB"
    assert img.getpixel((10, 10)) == (0, 0, 0)
    assert img.getpixel((150, 10)) == (255, 255, 255)


def test_multi_picture_jpeg_from_a_camera_takes_the_first_picture():
    first, second = Image.new("RGB", (50, 50), "red"), Image.new("RGB", (50, 50), "blue")
    data = encode(first, "MPO", save_all=True, append_images=[second])
    assert sniff_format(data) == "jpeg"
    r, _, b = decode_image(data, max_pixels=LIMIT).getpixel((5, 5))
    assert r > 200 and b < 50

#!/usr/bin/env python3
"""Writes the image-decoding and resizing fixtures of tests/vision/test_image_processor.cpp: small PNGs of every colour
type JPEGs (baseline, grayscale, progressive) and WebPs (lossy, lossless, with alpha), each with NAME.rgb.png = Pillow's
Image.open(NAME).convert("RGB") stored as a plain 8-bit RGB PNG (what the engine's decoder must give),
and resize_src.png with its Pillow bicubic resizes resize_WxH.png.

usage: python3 make_images.py   (needs numpy and pillow; writes next to itself)"""
import os
import struct
import zlib

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(14)


def smooth(h, w, c):
    """A random smooth image with noise, so JPEG chroma subsampling and the IDCT have work to do."""
    ys, xs = np.mgrid[0:h, 0:w]
    base = 128 + 100 * np.sin(xs[..., None] / 5.0 + rng.uniform(0, 6, c)) * np.cos(ys[..., None] / 7.0)
    return np.clip(base + rng.normal(0, 20, (h, w, c)), 0, 255).astype(np.uint8)


def adam7_png(path, rgb):
    """An interlaced (Adam7) 8-bit RGB PNG; Pillow cannot write one."""
    h, w, _ = rgb.shape
    raw = b""
    for x0, y0, dx, dy in ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
                           (0, 1, 1, 2)):
        sub = rgb[y0::dy, x0::dx]
        if sub.size:
            raw += b"".join(b"\0" + row.tobytes() for row in sub)

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 1))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def write(name, image, **save):
    path = os.path.join(HERE, name)
    image.save(path, **save)
    with Image.open(path) as im:
        Image.fromarray(np.asarray(im.convert("RGB"))).save(path + ".rgb.png")


write("gray8.png", Image.fromarray(smooth(9, 13, 1)[..., 0], "L"))
# 16-bit gray opens as I;16, which convert("RGB") clips to 255 (it does not take the high byte)
write("gray16.png", Image.fromarray((np.arange(7 * 11).reshape(7, 11) * 5).astype(np.uint16)))
write("palette.png", Image.fromarray(smooth(10, 12, 3)).quantize(16))
write("rgba.png", Image.fromarray(np.dstack([smooth(8, 10, 3), smooth(8, 10, 1)]), "RGBA"))
adam7_png(os.path.join(HERE, "interlaced.png"), smooth(17, 19, 3))
with Image.open(os.path.join(HERE, "interlaced.png")) as im:
    Image.fromarray(np.asarray(im.convert("RGB"))).save(os.path.join(HERE, "interlaced.png.rgb.png"))
write("photo.jpg", Image.fromarray(smooth(20, 30, 3)), quality=85)
write("gray.jpg", Image.fromarray(smooth(12, 18, 1)[..., 0], "L"), quality=90)
write("lossy.webp", Image.fromarray(smooth(14, 22, 3)), quality=80)
write("lossless.webp", Image.fromarray(smooth(9, 15, 3)), lossless=True)
write("alpha.webp", Image.fromarray(np.dstack([smooth(10, 12, 3), smooth(10, 12, 1)]), "RGBA"), quality=90)
write("progressive.jpg", Image.fromarray(smooth(16, 24, 3)), quality=80, progressive=True)

# bicubic resizes of one noisy image (shrink x3 and x14, enlarge, one axis, tiny)
src = Image.fromarray(rng.integers(0, 256, (29, 41, 3), dtype=np.uint8))
src.save(os.path.join(HERE, "resize_src.png"))
for w, h in ((13, 9), (100, 71), (41, 60), (7, 29), (3, 2), (40, 28)):
    src.resize((w, h), Image.Resampling.BICUBIC).save(os.path.join(HERE, f"resize_{w}x{h}.png"))

# max_wh_ratio (the release leaves it null): a 60x20 image with ratio 2 and the tiny-vision settings is planned
# as 40x20 -> min_pixels -> 141x70 -> 154x70 and, being that wide, stretched by a plain resize to 154x70
wide = Image.fromarray(smooth(20, 60, 3))
wide.save(os.path.join(HERE, "wide.png"))
wide.resize((154, 70)).save(os.path.join(HERE, "wide_canvas.png"))

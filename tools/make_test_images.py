#!/usr/bin/python3
# make_test_images.py: writes the PIL reference outputs under tests/data that tests/test_image.c
# and tests/test_transform.c compare against pixel for pixel, so the tests need no Python.
# Needs Debian's python3-pil and python3-numpy (run with /usr/bin/python3). The torchvision
# steps (Resize size rule, CenterCrop padding and rounding, ToTensor + Normalize in float32)
# are written out here with numpy, line for line as torchvision computes them.
import io
import math
import os
import sys

import numpy as np
from PIL import Image, ImageFilter, ImageOps, ImageEnhance

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "data")
os.makedirs(OUT, exist_ok=True)
rng = np.random.RandomState(1234)


def save(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def test_image(w, h, c):
    """Noise plus a gradient: noise makes bicubic overshoot and exercises clamping."""
    yy, xx = np.mgrid[0:h, 0:w]
    base = (xx * 255 // max(w - 1, 1) + yy * 97 // max(h - 1, 1)) % 256
    img = np.stack([(base + 80 * k) % 256 for k in range(c)], axis=-1).astype(np.int32)
    noise = rng.randint(-60, 61, size=img.shape)
    img = np.clip(img + noise, 0, 255).astype(np.uint8)
    return img


def pil(arr):
    return Image.fromarray(arr[..., 0] if arr.shape[-1] == 1 else arr, "L" if arr.shape[-1] == 1 else "RGB")


def arr(im):
    a = np.asarray(im, dtype=np.uint8)
    return a[..., None] if a.ndim == 2 else a


# ---- bicubic resize references: source 37x23 (RGB and L) to several sizes ----
src = test_image(37, 23, 3)
save("src_37x23_rgb.raw", src.tobytes())
gsrc = test_image(37, 23, 1)
save("src_37x23_l.raw", gsrc.tobytes())
for (dw, dh) in [(16, 10), (50, 31), (37, 23), (5, 3), (20, 40), (37, 11), (74, 23)]:
    save("rs_rgb_%dx%d.raw" % (dw, dh), arr(pil(src).resize((dw, dh), Image.BICUBIC)).tobytes())
    save("rs_l_%dx%d.raw" % (dw, dh), arr(pil(gsrc).resize((dw, dh), Image.BICUBIC)).tobytes())


# ---- evaluation transform references: timm transforms_imagenet_eval with torchvision ----
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def tv_resize(im, size):
    w, h = im.size
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = size, int(size * long / short)
    nw, nh = (new_short, new_long) if w <= h else (new_long, new_short)
    if (nw, nh) == (w, h):
        return im
    return im.resize((nw, nh), Image.BICUBIC)


def tv_center_crop(a, size):
    h, w = a.shape[:2]
    if size > w or size > h:
        pl = (size - w) // 2 if size > w else 0
        pt = (size - h) // 2 if size > h else 0
        pr = (size - w + 1) // 2 if size > w else 0
        pb = (size - h + 1) // 2 if size > h else 0
        a = np.pad(a, ((pt, pb), (pl, pr), (0, 0)))
        h, w = a.shape[:2]
        if (w, h) == (size, size):
            return a
    top = int(round((h - size) / 2.0))
    left = int(round((w - size) / 2.0))
    return a[top:top + size, left:left + size]


def to_tensor_normalize(a, c):
    t = a.astype(np.float32).transpose(2, 0, 1) / np.float32(255)
    m = MEAN[:c] if c == 3 else MEAN[:1]
    s = STD[:c] if c == 3 else STD[:1]
    return ((t - m[:, None, None]) / s[:, None, None]).astype(np.float32)


evals = []
for i, (w, h, c, size, crop_pct) in enumerate([
        (61, 45, 3, 32, 0.875),   # landscape, downscale
        (45, 61, 1, 32, 0.9),     # portrait, gray, crop_pct 0.9
        (40, 30, 3, 32, 1.0),     # upscale
        (61, 37, 3, 24, 0.95),    # (41 - 24) / 2 = 8.5: round half to even gives 8
        (30, 41, 3, 32, 1.25),    # crop larger than the resized image: zero padding
        (32, 32, 3, 32, 1.0)]):   # identity resize, no crop
    a = test_image(w, h, c)
    scale = math.floor(size / crop_pct)
    r = arr(tv_resize(pil(a), scale))
    crop = tv_center_crop(r, size)
    out = to_tensor_normalize(crop, c)
    save("ev%d_src.raw" % i, a.tobytes())
    save("ev%d_crop.raw" % i, crop.tobytes())
    if i < 2:  # the float32 tensor itself for two cases; the rest are checked as uint8 crops
        save("ev%d_out.f32" % i, out.tobytes())
    evals.append("%d %d %d %d %.9g %d %d" % (w, h, c, size, crop_pct, r.shape[1], r.shape[0]))
save("eval_cases.txt", ("\n".join(evals) + "\n").encode())

# ---- JPEG / PNG files written by PIL, with PIL's decoded pixels ----
j = test_image(40, 30, 3)
for name, kw, mode in [("rgb420", dict(quality=90, subsampling=2), "RGB"),
                       ("rgb444", dict(quality=95, subsampling=0), "RGB"),
                       ("prog", dict(quality=85, progressive=True), "RGB"),
                       ("gray", dict(quality=90), "L"),
                       ("cmyk", dict(quality=90), "CMYK")]:
    im = pil(j).convert(mode)
    b = io.BytesIO()
    im.save(b, "JPEG", **kw)
    save("pil_%s.jpg" % name, b.getvalue())
    dec = Image.open(io.BytesIO(b.getvalue()))
    save("pil_%s_rgb.raw" % name, arr(dec.convert("RGB")).tobytes())
    save("pil_%s_l.raw" % name, arr(dec.convert("L")).tobytes())
# a PNG under a JPEG name, as ImageNet has one
b = io.BytesIO()
pil(j).save(b, "PNG")
save("png_named.JPEG", b.getvalue())
save("png_named_rgb.raw", j.tobytes())

# ---- RandAugment ops: the PIL calls timm's auto_augment.py makes, on a 20x16 image ----
# One line per case in ra_cases.txt: "<name> <mode> <param>"; outputs ra_<i>.raw.
ra = test_image(20, 16, 3)
ra = (30 + (ra.astype(np.int32) * 170) // 255).astype(np.uint8)  # inside [30, 200]
save("ra_src_rgb.raw", ra.tobytes())
gra = arr(pil(ra).convert("L"))
save("ra_src_l.raw", gra.tobytes())
FILL_RGB, FILL_L = (124, 116, 104), 124


def solarize_add(img, add, thresh=128):
    lut = [min(255, i + add) if i < thresh else i for i in range(256)]
    if img.mode == "RGB":
        lut = lut + lut + lut
    return img.point(lut)


def affine(img, m, resample):
    fill = FILL_RGB if img.mode == "RGB" else FILL_L
    return img.transform(img.size, Image.AFFINE, m, resample=resample, fillcolor=fill)


def rotate(img, deg, resample):
    fill = FILL_RGB if img.mode == "RGB" else FILL_L
    return img.rotate(deg, resample=resample, fillcolor=fill)


BIL, BIC = Image.BILINEAR, Image.BICUBIC
cases = [
    ("autocontrast", 0, lambda im, p: ImageOps.autocontrast(im)),
    ("equalize", 0, lambda im, p: ImageOps.equalize(im)),
    ("invert", 0, lambda im, p: ImageOps.invert(im)),
    ("posterize", 1, lambda im, p: ImageOps.posterize(im, int(p))),
    ("posterize", 3, lambda im, p: ImageOps.posterize(im, int(p))),
    ("posterize", 0, lambda im, p: ImageOps.posterize(im, int(p))),
    ("solarize", 128, lambda im, p: ImageOps.solarize(im, int(p))),
    ("solarize", 31, lambda im, p: ImageOps.solarize(im, int(p))),
    ("solarize_add", 99, lambda im, p: solarize_add(im, int(p))),
    ("color", 0.37, lambda im, p: ImageEnhance.Color(im).enhance(p)),
    ("color", 1.62, lambda im, p: ImageEnhance.Color(im).enhance(p)),
    ("contrast", 0.4, lambda im, p: ImageEnhance.Contrast(im).enhance(p)),
    ("contrast", 1.81, lambda im, p: ImageEnhance.Contrast(im).enhance(p)),
    ("brightness", 0.55, lambda im, p: ImageEnhance.Brightness(im).enhance(p)),
    ("brightness", 1.9, lambda im, p: ImageEnhance.Brightness(im).enhance(p)),
    ("sharpness", 0.25, lambda im, p: ImageEnhance.Sharpness(im).enhance(p)),
    ("sharpness", 1.85, lambda im, p: ImageEnhance.Sharpness(im).enhance(p)),
    ("shear_x_bicubic", 0.27, lambda im, p: affine(im, (1, p, 0, 0, 1, 0), BIC)),
    ("shear_y_bilinear", -0.21, lambda im, p: affine(im, (1, 0, 0, p, 1, 0), BIL)),
    ("translate_x_bicubic", 0.31, lambda im, p: affine(im, (1, 0, p * im.size[0], 0, 1, 0), BIC)),
    ("translate_y_bilinear", -0.4, lambda im, p: affine(im, (1, 0, 0, 0, 1, p * im.size[1]), BIL)),
    ("rotate_bicubic", 23.5, lambda im, p: rotate(im, p, BIC)),
    ("rotate_bilinear", -17.0, lambda im, p: rotate(im, p, BIL)),
    ("rotate_bicubic", 180.0, lambda im, p: rotate(im, p, BIC)),
]
lines = []
for i, (name, param, fn) in enumerate(cases):
    for mode, src_arr in (("RGB", ra), ("L", gra)):
        out = arr(fn(pil(src_arr), param))
        save("ra_%d_%s.raw" % (i, mode.lower()), out.tobytes())
    lines.append("%s %r" % (name, param))
save("ra_cases.txt", ("\n".join(lines) + "\n").encode())
print("wrote", OUT)

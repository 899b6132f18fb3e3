#!/usr/bin/python3
# make_corpus.py: an ImageNet-like corpus from real photographs, for bench-data and loader
# tests: ROOT/{train,val}/<class>/*.JPEG, about 500x375, quality 90, 4:2:0, like ImageNet's
# typical file. Sources: the photographs Debian's python3-skimage ships (apt-get install
# python3-skimage python3-pil); many distinct files per class come from random crops, flips and
# small colour changes. A few files carry what real ImageNet holds (gray, progressive, CMYK,
# a PNG named .JPEG, a 3000-pixel image) unless --plain is given.
#
#   /usr/bin/python3 tools/make_corpus.py ROOT [--train 40] [--val 10] [--seed 0] [--plain]

import argparse
import glob
import os
import random
import sys

try:
    from PIL import Image, ImageEnhance
except ImportError:
    sys.exit("make_corpus: needs Pillow: apt-get install python3-pil")

# class name -> skimage data files (photographs only; the gray ones become RGB JPEGs)
CLASSES = {
    "n0001_astronaut": ["astronaut.png"],
    "n0002_cat": ["chelsea.png"],
    "n0003_coffee": ["coffee.png"],
    "n0004_motorcycle": ["motorcycle_left.png", "motorcycle_right.png"],
    "n0005_rocket": ["rocket.jpg"],
    "n0006_galaxies": ["hubble_deep_field.jpg"],
    "n0007_retina": ["retina.jpg"],
    "n0008_tissue": ["ihc.png"],
    "n0009_camera": ["camera.png"],
    "n0010_texture": ["brick.png", "grass.png", "gravel.png"],
}


def skimage_data_dir():
    try:
        import skimage

        d = os.path.join(os.path.dirname(skimage.__file__), "data")
        if os.path.isdir(d):
            return d
    except ImportError:
        pass
    for d in glob.glob("/usr/lib/python3/dist-packages/skimage/data"):
        if os.path.isdir(d):
            return d
    sys.exit("make_corpus: no skimage data folder: apt-get install python3-skimage")


def variant(src, rng, portrait):
    """A random crop (35-100% of the area, the output's aspect), flip and colour change."""
    w, h = src.size
    aspect = 375 / 500 if portrait else 500 / 375
    area = rng.uniform(0.35, 1.0) * w * h
    cw = min(w, int(round((area * aspect) ** 0.5)))
    ch = min(h, int(round(cw / aspect)))
    cw = min(w, int(round(ch * aspect)))
    x0 = rng.randint(0, w - cw)
    y0 = rng.randint(0, h - ch)
    im = src.crop((x0, y0, x0 + cw, y0 + ch))
    if rng.random() < 0.5:
        im = im.transpose(Image.FLIP_LEFT_RIGHT)
    im = ImageEnhance.Brightness(im).enhance(rng.uniform(0.8, 1.2))
    im = ImageEnhance.Contrast(im).enhance(rng.uniform(0.8, 1.2))
    im = ImageEnhance.Color(im).enhance(rng.uniform(0.7, 1.3))
    size = (375, 500) if portrait else (500, 375)
    return im.resize(size, Image.BICUBIC)


def save_jpeg(im, path, **kw):
    im.save(path, "JPEG", quality=90, subsampling=2, **kw)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("root")
    ap.add_argument("--train", type=int, default=40, help="train images per class")
    ap.add_argument("--val", type=int, default=10, help="val images per class")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plain", action="store_true", help="no gray/CMYK/PNG/progressive/large files")
    a = ap.parse_args()
    data = skimage_data_dir()
    rng = random.Random(a.seed)
    total = 0
    for split, per_class in (("train", a.train), ("val", a.val)):
        for ci, (cls, files) in enumerate(sorted(CLASSES.items())):
            out = os.path.join(a.root, split, cls)
            os.makedirs(out, exist_ok=True)
            srcs = [Image.open(os.path.join(data, f)).convert("RGB") for f in files]
            for i in range(per_class):
                im = variant(srcs[i % len(srcs)], rng, portrait=rng.random() < 0.25)
                save_jpeg(im, os.path.join(out, "%s_%s_%04d.JPEG" % (cls[:5], split, i)))
                total += 1
            if a.plain or ci != 0:
                continue
            # what real ImageNet holds, one of each, all named .JPEG
            base = variant(srcs[0], rng, portrait=False)
            save_jpeg(base.convert("L"), os.path.join(out, "odd_%s_gray.JPEG" % split))
            save_jpeg(base, os.path.join(out, "odd_%s_progressive.JPEG" % split), progressive=True)
            save_jpeg(base.convert("CMYK"), os.path.join(out, "odd_%s_cmyk.JPEG" % split))
            base.save(os.path.join(out, "odd_%s_png.JPEG" % split), "PNG")
            save_jpeg(base.resize((3000, 2250), Image.BICUBIC),
                      os.path.join(out, "odd_%s_large.JPEG" % split))
            total += 5
    print("make_corpus: wrote %d files in %d classes under %s" % (total, len(CLASSES), a.root))


if __name__ == "__main__":
    main()

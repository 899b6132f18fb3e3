#!/usr/bin/env python3
"""dev/length/intervals.py: the intervals of issue 49's length experiment, from the per-image
predictions that dev/length/sets.sh writes (OUT/{vil,vim}/sets/<set>.<side>/<pos>/<variant>_s<seed>.csv.gz,
vil eval's --predictions-file; or the same outcomes packed by dev/length/pack.py): accuracy, each
intervention against its control, ViL against ViM and the seeds' "flat" criterion, each with a
95% bootstrap interval and the number of seeds. Imported by dev/length/report.py; numpy
(Debian's python3-numpy, as torch's).

The bootstrap. Every model of a cell is evaluated on the same test images, so the outcomes form a
crossed design, seeds x images, and both are samples: the seeds of the training's randomness,
the images of the test distribution. One replicate draws the seeds with replacement and,
independently, the images with replacement (one image draw shared by every seed and both arms
of a comparison), and takes the mean of the drawn (seed, image) outcomes; the interval is the
2.5 and 97.5 percentiles of the replicates. This is the two-way ("pigeonhole") bootstrap of a
crossed design (Owen 2007, "The pigeonhole bootstrap"; McCullagh 2000, "Resampling and
exchangeable arrays"): it counts the seed x image interaction in both margins, so it is somewhat
conservative when that term is large, and with few seeds it is not conservative at all: 3 seeds
give only 10 distinct seed draws, a seed-level spread sqrt(2/3) of the usual standard error, and
percentiles where a t-interval with 2 degrees of freedom would be 2.2 times wider. Claims rest on
5 or more seeds (tests/test_length_report.py: 95% intervals cover a known difference in 95% of
synthetic experiments with 8 seeds), and every cell prints its n.
- Paired (an intervention against the control post-trained from the same base checkpoint; a set
  against the training length for the same model): the difference is taken per (seed, image)
  and that matrix bootstrapped, so the seed's and the image's effects that both arms share
  cancel.
- ViL against ViM: the two families' seed s share nothing, so their seeds are drawn
  independently; the images, the same for both, are drawn once.
The replicates' draws depend only on (seed of the bootstrap, what is drawn, how many), so the
report is deterministic for a seed, and every comparison of the same shape uses the same draws
(common random numbers: the differences between cells are not bootstrap noise).
"""
import csv
import gzip
import io
import json
import os
import re

import numpy as np

LEVEL = 0.95
FLAT_POINTS = 2.0  # the seeds' standard: within 2 points of the accuracy at the training length


class Bootstrap:
    """the crossed bootstrap with reps replicates, deterministic for seed"""

    def __init__(self, reps=2000, seed=0):
        self.reps, self.seed = int(reps), int(seed)
        self._draws = {}

    def counts(self, kind, n, arm=0):
        """(reps, n) how often each of n units is drawn in each replicate; kind 0 seeds, 1 images"""
        key = (kind, n, arm)
        if key not in self._draws:
            rng = np.random.default_rng([self.seed, kind, n, arm])
            if n == 1:
                c = np.ones((self.reps, 1), dtype=np.float32)
            else:  # float32 holds the counts and the sums below exactly (integers far below 2^24)
                c = rng.multinomial(n, np.full(n, 1.0 / n), size=self.reps).astype(np.float32)
            self._draws[key] = c
        return self._draws[key]

    def replicates(self, x):
        """replicates of the mean of x (seeds, images)"""
        s, i = x.shape
        w, v = self.counts(0, s), self.counts(1, i)
        out = np.empty(self.reps)
        for a in range(0, self.reps, 256):  # (reps, images) products in chunks
            b = min(self.reps, a + 256)
            out[a:b] = np.einsum("ri,ri->r", w[a:b] @ x, v[a:b]) / (s * i)
        return out

    def replicates_two(self, a, b):
        """replicates of mean(a) - mean(b): seeds drawn independently, images jointly"""
        (sa, i), sb = a.shape, b.shape[0]
        wa, wb, v = self.counts(0, sa, 0), self.counts(0, sb, 1), self.counts(1, i)
        out = np.empty(self.reps)
        for lo in range(0, self.reps, 256):
            hi = min(self.reps, lo + 256)
            ma = np.einsum("ri,ri->r", wa[lo:hi] @ a, v[lo:hi]) / (sa * i)
            mb = np.einsum("ri,ri->r", wb[lo:hi] @ b, v[lo:hi]) / (sb * i)
            out[lo:hi] = ma - mb
        return out


def interval(est, reps):
    """(estimate, low, high) of a replicate vector at LEVEL"""
    lo, hi = np.percentile(reps, [50 * (1 - LEVEL), 50 * (1 + LEVEL)])
    return float(est), float(lo), float(hi)


def mean_ci(boot, x):
    """accuracy-like mean of x (seeds, images) with its interval"""
    return interval(x.mean(dtype=np.float64), boot.replicates(x))


def paired_ci(boot, a, b):
    """mean(a - b), a and b (seeds, images) matched row by row and column by column"""
    if a.shape != b.shape:
        raise ValueError("paired arms of shapes %s and %s" % (a.shape, b.shape))
    d = a - b
    return interval(d.mean(dtype=np.float64), boot.replicates(d))


def unpaired_seeds_ci(boot, a, b):
    """mean(a) - mean(b), seeds independent, images matched column by column"""
    if a.shape[1] != b.shape[1]:
        raise ValueError("arms over %d and %d images" % (a.shape[1], b.shape[1]))
    return interval(a.mean(dtype=np.float64) - b.mean(dtype=np.float64), boot.replicates_two(a, b))


def flat_verdict(lo, hi, points=FLAT_POINTS):
    """the seeds' criterion on an interval of (accuracy on a set) - (at the training length), in
    the units of lo and hi: flat when the whole interval lies above -points, not flat when it
    lies below, undecided otherwise"""
    if lo > -points:
        return "flat"
    if hi < -points:
        return "not flat"
    return "undecided"


# ---------------- reading dev/length/sets.sh's results ----------------

PRED = re.compile(r"^(?P<variant>[a-z0-9_]+)_s(?P<seed>\d+)\.csv(\.gz)?$")


def image_id(filename):
    """vil's name of an IDX image is SOURCE#INDEX: the index (the same image in every set); a
    file's, its name"""
    head, sep, tail = filename.rpartition("#")
    return int(tail) if sep and tail.isdigit() else filename


def read_predictions(path):
    """{image id: 1 correct / 0 wrong} of a vil eval --predictions-file CSV (plain or .gz)"""
    raw = gzip.open(path, "rb").read() if path.endswith(".gz") else open(path, "rb").read()
    out = {}
    for r in csv.DictReader(io.StringIO(raw.decode("utf-8"))):
        out[image_id(r["filename"])] = int(int(r["label_0"]) == int(r["target"]))
    return out


def cell_key(fam, cond, pos, variant):
    """(family, set, side, pos, variant) of a folder cond = <set>.<side>, or None"""
    name, dot, side = cond.rpartition(".")
    return (fam, name, int(side), pos, variant) if dot and side.isdigit() else None


def load_packs(out, cells):
    """the cells of OUT/*.pack.json.gz (dev/length/pack.py) into cells"""
    for f in sorted(os.listdir(out)):
        if not f.endswith(".pack.json.gz"):
            continue
        p = json.loads(gzip.open(os.path.join(out, f), "rb").read().decode("utf-8"))
        if p.get("format") != "vil-length-sets-pack" or p.get("version") != 1:
            raise ValueError("%s: not a vil-length-sets-pack version 1" % f)
        for name, (k, bits) in p["cells"].items():
            fam, cond, pos, run = name.split("/")
            m = PRED.match(run + ".csv")
            key = cell_key(fam, cond, pos, m.group("variant")) if m else None
            if key:
                cells.setdefault(key, {})[int(m.group("seed"))] = dict(zip(p["ids"][k], (int(b) for b in bits)))


def load_sets(out):
    """{(family, set, side, pos, variant): {seed: {image: correct}}} of OUT/{vil,vim}/sets/ and of
    the packs OUT/*.pack.json.gz (a run in both: the folder's)"""
    cells = {}
    load_packs(out, cells)
    for fam in ("vil", "vim"):
        root = os.path.join(out, fam, "sets")
        if not os.path.isdir(root):
            continue
        for cond in sorted(os.listdir(root)):
            for pos in sorted(os.listdir(os.path.join(root, cond))):
                d = os.path.join(root, cond, pos)
                if not os.path.isdir(d):
                    continue
                for f in sorted(os.listdir(d)):
                    m = PRED.match(f)
                    key = cell_key(fam, cond, pos, m.group("variant")) if m else None
                    if key:
                        cells.setdefault(key, {})[int(m.group("seed"))] = read_predictions(os.path.join(d, f))
    return cells


def matrix(runs, seeds, images):
    """(seeds, images) of 0/1 from {seed: {image: correct}}"""
    return np.array([[runs[s][i] for i in images] for s in seeds], dtype=np.float32)


def common_images(*runs_list):
    """the image ids every run of every cell has, sorted"""
    ids = None
    for runs in runs_list:
        for r in runs.values():
            ids = set(r) if ids is None else ids & set(r)
    return sorted(ids or [], key=lambda x: (isinstance(x, str), x))


def control_of(variant):
    """the control a post-training is compared with: the zero-start post-training of the same
    protocol (post_fitted -> post_zero, post100_fitted -> post100_zero); None for the rest"""
    head, sep, tail = variant.partition("_")
    if not head.startswith("post") or not sep or tail == "zero":
        return None
    return head + "_zero"


# the set a model trained on canvases (dev/length/cpu.sh, gpu.sh: `--set canvas=56`) was trained on
CANVAS_REF = ("canvas56_zero", 56)


def reference_of(variant, ref_name, train_side):
    """(set, side) of a variant's training length, the reference of the flat criterion: the test
    split at the training side; for a model trained on canvases (variant canvas*), the canvas it
    was trained on; for a FixRes post-training (fixres<N>_*), the test split at N px"""
    if variant.startswith("canvas"):
        return CANVAS_REF
    m = re.match(r"fixres(\d+)_", variant)
    if m:
        return ("test", int(m.group(1)))
    return (ref_name, train_side)


def fmt(ci, n, scale=100.0, signed=False):
    est, lo, hi = (scale * x for x in ci)
    f = "%+.1f [%+.1f, %+.1f]" if signed else "%.1f [%.1f, %.1f]"
    return (f % (est, lo, hi)) + " n=%d" % n


def pos_of(cells, key, train_side):
    """a cell at the training side exists once (pos does not move there): any pos stands for it"""
    if key in cells:
        return cells[key]
    fam, name, side, pos, variant = key
    if side == train_side:
        for p in ("interp", "keep", "center"):
            k = (fam, name, side, p, variant)
            if k in cells:
                return cells[k]
    return None


def sets_report(out, reps=2000, seed=0):
    """the Markdown tables (a list of lines) and their numbers (a dict) of OUT's sets"""
    cells = load_sets(out)
    boot = Bootstrap(reps, seed)
    lines, res = [], {"reps": reps, "seed": seed, "level": LEVEL, "accuracy": [], "vs_control": [],
                      "vil_vs_vim": [], "flat": []}
    if not cells:
        return lines, res
    # by side, the split first (the reference, the upsampled test), then the sets by name
    conds = sorted({(k[1], k[2]) for k in cells}, key=lambda c: (c[1], c[0] != "test", c[0]))
    train_side = min(s for _, s in conds)
    ref_name = "test" if ("test", train_side) in conds else None
    poss = sorted({k[3] for k in cells})
    lines.append("Intervals: 95%% crossed bootstrap over seeds and test images (%d replicates, seed %d; "
                 "dev/length/intervals.py); n = seeds." % (reps, seed))
    for fam in ("vil", "vim"):
        variants = sorted({k[4] for k in cells if k[0] == fam})
        if not variants:
            continue
        label = "ViL" if fam == "vil" else "ViM"
        rows = [(c, p) for c in conds for p in poss if any((fam,) + c + (p, v) in cells for v in variants)]
        counts = sorted({len(common_images(r)) for k, r in cells.items() if k[0] == fam})
        images = "%d images" % counts[0] if len(counts) == 1 else "%d to %d images" % (counts[0], counts[-1])
        # accuracy
        lines += ["", "%s: test top-1 %% by set, side and position embedding (%s a cell)" % (label, images), "",
                  "| set | side | pos | " + " | ".join(variants) + " |", "|---|---|---|" + "---|" * len(variants)]
        for (name, side), p in rows:
            row = []
            for v in variants:
                runs = cells.get((fam, name, side, p, v))
                if not runs:
                    row.append("-")
                    continue
                seeds, imgs = sorted(runs), common_images(runs)
                ci = mean_ci(boot, matrix(runs, seeds, imgs))
                res["accuracy"].append({"family": fam, "set": name, "side": side, "pos": p, "variant": v,
                                        "seeds": seeds, "images": len(imgs), "ci": ci})
                row.append(fmt(ci, len(seeds)))
            lines.append("| %s | %d | %s | %s |" % (name, side, p, " | ".join(row)))
        # against the control
        pairs = [(v, control_of(v)) for v in variants if control_of(v) in variants]
        if pairs:
            lines += ["", "%s: each post-training against its control (points; paired by seed and image)" % label, "",
                      "| set | side | pos | " + " | ".join("%s - %s" % p for p in pairs) + " |",
                      "|---|---|---|" + "---|" * len(pairs)]
            for (name, side), p in rows:
                row = []
                for v, c in pairs:
                    a, b = cells.get((fam, name, side, p, v)), cells.get((fam, name, side, p, c))
                    seeds = sorted(set(a or {}) & set(b or {}))
                    if not seeds:
                        row.append("-")
                        continue
                    a, b = {s: a[s] for s in seeds}, {s: b[s] for s in seeds}
                    imgs = common_images(a, b)
                    ci = paired_ci(boot, matrix(a, seeds, imgs), matrix(b, seeds, imgs))
                    res["vs_control"].append({"family": fam, "set": name, "side": side, "pos": p, "variant": v,
                                              "control": c, "seeds": seeds, "images": len(imgs), "ci": ci})
                    row.append(fmt(ci, len(seeds), signed=True))
                lines.append("| %s | %d | %s | %s |" % (name, side, p, " | ".join(row)))
        # the seeds' flat criterion against each variant's training length
        if ref_name:
            lines += ["", "%s: top-1 on the set less top-1 at the training length (points, paired by seed and "
                      "image): flat when the interval lies above -%g; the reference: %s at %d px, for the "
                      "canvas-trained %s at %d px, for fixres<N> the test at N px" % (
                          label, FLAT_POINTS, ref_name, train_side, CANVAS_REF[0], CANVAS_REF[1]), "",
                      "| set | side | pos | " + " | ".join(variants) + " |", "|---|---|---|" + "---|" * len(variants)]
            for (name, side), p in rows:
                row = []
                for v in variants:
                    rn, rs = reference_of(v, ref_name, train_side)
                    a = cells.get((fam, name, side, p, v))
                    r = pos_of(cells, (fam, rn, rs, p, v), train_side)
                    seeds = sorted(set(a or {}) & set(r or {}))
                    if (name, side) == (rn, rs) or not seeds:
                        row.append("-")
                        continue
                    a, r = {s: a[s] for s in seeds}, {s: r[s] for s in seeds}
                    imgs = common_images(a, r)
                    ci = paired_ci(boot, matrix(a, seeds, imgs), matrix(r, seeds, imgs))
                    verdict = flat_verdict(100 * ci[1], 100 * ci[2])
                    res["flat"].append({"family": fam, "set": name, "side": side, "pos": p, "variant": v,
                                        "reference": [rn, rs], "seeds": seeds, "images": len(imgs), "ci": ci,
                                        "verdict": verdict})
                    row.append("%s %s" % (fmt(ci, len(seeds), signed=True), verdict))
                if any(c != "-" for c in row):
                    lines.append("| %s | %d | %s | %s |" % (name, side, p, " | ".join(row)))
    # ViL against ViM
    both = sorted({k[4] for k in cells if k[0] == "vil"} & {k[4] for k in cells if k[0] == "vim"})
    if both:
        lines += ["", "ViL - ViM (points; seeds independent, images paired; n = ViL seeds / ViM seeds)", "",
                  "| set | side | pos | " + " | ".join(both) + " |", "|---|---|---|" + "---|" * len(both)]
        for (name, side) in conds:
            for p in poss:
                row, any_cell = [], False
                for v in both:
                    a, b = cells.get(("vil", name, side, p, v)), cells.get(("vim", name, side, p, v))
                    if not a or not b:
                        row.append("-")
                        continue
                    any_cell = True
                    imgs = common_images(a, b)
                    sa, sb = sorted(a), sorted(b)
                    ci = unpaired_seeds_ci(boot, matrix(a, sa, imgs), matrix(b, sb, imgs))
                    res["vil_vs_vim"].append({"set": name, "side": side, "pos": p, "variant": v, "seeds_vil": sa,
                                              "seeds_vim": sb, "images": len(imgs), "ci": ci})
                    est, lo, hi = (100 * x for x in ci)
                    row.append("%+.1f [%+.1f, %+.1f] n=%d/%d" % (est, lo, hi, len(sa), len(sb)))
                if any_cell:
                    lines.append("| %s | %d | %s | %s |" % (name, side, p, " | ".join(row)))
    return lines, res

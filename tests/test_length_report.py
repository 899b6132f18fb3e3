#!/usr/bin/python3
"""test_length_report.py: issue 49's analysis of the length experiment, Debian's python3 with
numpy. dev/length/intervals.py's bootstrap on synthetic outcomes with a known answer (95%
intervals cover a known difference in about 95% of repeated draws, shrink with the images,
narrow when the arms are paired and their outcomes correlated, do not move for the same seed);
dev/length/report.py's tables from a fake results folder whose answers are known by
construction; and dev/length/sets.sh end to end on a tiny model and synthetic IDX set (bin/vil
and $VIL_BUILD/tools/length_sets), when they are built; dev/length/stream_report.py's and
states_report.py's tables from hand-set runs against the formulas, computed here. Closes with "N passed, N failed"."""
import gzip
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "dev", "length"))
import intervals  # noqa: E402

passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL %s" % what)


# ---------------- the bootstrap against known answers ----------------

def synthetic(rng, seeds, images, delta, seed_sd=0.1, image_sd=0.25, effect_sd=0.05, coupled=True):
    """two arms (seeds, images) of 0/1 whose population mean difference is delta exactly: p_b =
    0.5 + seed + image effects (uniform, no clipping), p_a = p_b + delta + a per-seed effect of
    mean 0; coupled: one uniform decides both arms (the same image is hard for both models)"""
    a_s = rng.uniform(-seed_sd, seed_sd, (seeds, 1))
    b_i = rng.uniform(-image_sd, image_sd, (1, images))
    c_s = rng.uniform(-effect_sd, effect_sd, (seeds, 1))
    pb = 0.5 + a_s + b_i
    pa = pb + delta + c_s
    u = rng.random((seeds, images))
    ub = u if coupled else rng.random((seeds, images))
    return (u < pa).astype(np.float32), (ub < pb).astype(np.float32)


def test_coverage():
    """the paired interval covers the true difference in about 95% of 300 synthetic experiments
    (8 seeds, 300 images); a 5% miss rate has sd 1.3% over 300"""
    rng = np.random.default_rng(11)
    boot = intervals.Bootstrap(400, 0)
    delta, cover, zero_out = 0.05, 0, 0
    for _ in range(300):
        a, b = synthetic(rng, 8, 300, delta)
        est, lo, hi = intervals.paired_ci(boot, a, b)
        cover += lo <= delta <= hi
        zero_out += lo > 0
    rate = cover / 300
    print("  coverage of a known difference: %.3f (300 experiments); 0 outside the interval in %d" % (rate, zero_out))
    check(0.90 <= rate <= 0.99, "95%% intervals cover the true difference in 90..99%% of experiments (%.3f)" % rate)
    check(zero_out > 150, "a difference of 5 points is told from 0 in most experiments (%d of 300)" % zero_out)


def width(ci):
    return ci[2] - ci[1]


def test_width_and_pairing():
    rng = np.random.default_rng(5)
    boot = intervals.Bootstrap(1000, 0)
    # no seed effects: the images alone make the width, which falls as 1/sqrt(images)
    w = {}
    for n in (100, 1600):
        a, b = synthetic(rng, 4, n, 0.05, seed_sd=0.0, effect_sd=0.0)
        w[n] = width(intervals.paired_ci(boot, a, b))
    print("  paired width at 100 and 1600 images: %.4f %.4f (ratio %.2f, 4 expected)" % (w[100], w[1600],
                                                                                          w[100] / w[1600]))
    check(2.8 < w[100] / w[1600] < 5.5, "the width falls about 4x for 16x the images (%.2f)" % (w[100] / w[1600]))
    # strong seed effects both arms share: pairing the seeds removes them
    a, b = synthetic(rng, 6, 500, 0.05, seed_sd=0.15, effect_sd=0.0)
    wp, wu = width(intervals.paired_ci(boot, a, b)), width(intervals.unpaired_seeds_ci(boot, a, b))
    print("  shared seed effects: paired width %.4f, seeds unpaired %.4f" % (wp, wu))
    check(wp < 0.5 * wu, "pairing by seed narrows the interval when the seeds' effects are shared (%.4f < %.4f / 2)"
          % (wp, wu))
    # the same images decide both arms: coupled outcomes give a narrower paired interval
    rng2 = np.random.default_rng(6)
    ac, bc = synthetic(rng2, 4, 800, 0.05, seed_sd=0.0, effect_sd=0.0, coupled=True)
    rng2 = np.random.default_rng(6)
    ai, bi = synthetic(rng2, 4, 800, 0.05, seed_sd=0.0, effect_sd=0.0, coupled=False)
    wc, wi = width(intervals.paired_ci(boot, ac, bc)), width(intervals.paired_ci(boot, ai, bi))
    print("  correlated outcomes: paired width %.4f, independent outcomes %.4f" % (wc, wi))
    check(wc < 0.6 * wi, "pairing by image pays when the outcomes are correlated (%.4f < 0.6 x %.4f)" % (wc, wi))
    # the accuracy interval of a known proportion
    x = (np.random.default_rng(9).random((5, 4000)) < 0.8).astype(np.float32)
    est, lo, hi = intervals.mean_ci(boot, x)
    check(lo < 0.8 < hi and abs(est - 0.8) < 0.01, "the accuracy interval holds p = 0.8 (%.4f [%.4f, %.4f])" % (est, lo, hi))


def test_determinism_and_edges():
    rng = np.random.default_rng(2)
    a, b = synthetic(rng, 5, 200, 0.02)
    c1 = intervals.paired_ci(intervals.Bootstrap(300, 3), a, b)
    c2 = intervals.paired_ci(intervals.Bootstrap(300, 3), a, b)
    c3 = intervals.paired_ci(intervals.Bootstrap(300, 4), a, b)
    check(c1 == c2, "the same bootstrap seed gives the same interval %s %s" % (c1, c2))
    check(c1[1:] != c3[1:] and c1[0] == c3[0], "another seed moves the bounds, not the estimate")
    check(intervals.paired_ci(intervals.Bootstrap(100, 0), a, a) == (0.0, 0.0, 0.0), "identical arms: [0, 0]")
    one = intervals.mean_ci(intervals.Bootstrap(200, 0), a[:1])
    check(one[1] < one[0] < one[2], "one seed: the images alone make the interval %s" % (one,))
    try:
        intervals.paired_ci(intervals.Bootstrap(10, 0), a, b[:3])
        check(False, "arms of other shapes are refused")
    except ValueError:
        check(True, "")
    v = intervals.flat_verdict
    check((v(-1.5, 1.0), v(-5.0, -2.5), v(-3.0, 0.5)) == ("flat", "not flat", "undecided"),
          "flat: above -2 flat, below not flat, across undecided")
    c = intervals.control_of
    check((c("post_fitted"), c("post100_passing"), c("post_zero"), c("base"), c("scratch_passing")) ==
          ("post_zero", "post100_zero", None, None, None), "controls: the zero-start post-training of the protocol")
    check(intervals.image_id("out/sets/tile2/t10k-images-idx3-ubyte#417") == 417 and
          intervals.image_id("val/cat/1.png") == "val/cat/1.png", "image ids: an IDX index, else the name")


# ---------------- the report on a fake results folder ----------------

def write_pred(path, correct, gz):
    """a vil eval --predictions-file (top-1) whose image i is right where correct[i]"""
    lines = ["filename,label_0,prob_0,name_0,target,target_name"]
    for i, ok in enumerate(correct):
        t = i % 10
        lines.append("sets/x/t10k-images-idx3-ubyte#%d,%d,0.9,,%d," % (i, t if ok else (t + 1) % 10, t))
    data = ("\n".join(lines) + "\n").encode()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if gz:
        with gzip.open(path + ".gz", "wb") as f:
            f.write(data)
    else:
        with open(path, "wb") as f:
            f.write(data)


def test_report(tmp):
    out = os.path.join(tmp, "fake")
    n = 40
    half = [i % 2 == 0 for i in range(n)]
    every = [True] * n
    for s in (0, 1, 2):
        write_pred(os.path.join(out, "vil/sets/test.28/interp/post_zero_s%d.csv" % s), every, gz=True)
        write_pred(os.path.join(out, "vil/sets/test.28/interp/post_fitted_s%d.csv" % s), every, gz=False)
        for pos in ("interp", "keep"):
            write_pred(os.path.join(out, "vil/sets/canvas112_zero.112/%s/post_zero_s%d.csv" % (pos, s)), half, gz=True)
            write_pred(os.path.join(out, "vil/sets/canvas112_zero.112/%s/post_fitted_s%d.csv" % (pos, s)), every,
                       gz=True)
    for s in (0, 1):  # ViM: 2 seeds, one quarter right
        write_pred(os.path.join(out, "vim/sets/canvas112_zero.112/interp/post_zero_s%d.csv" % s),
                   [i % 4 == 0 for i in range(n)], gz=True)
    os.makedirs(os.path.join(out, "vil/sets/canvas112_zero.112/interp/junk"), exist_ok=True)  # ignored
    r = subprocess.run([sys.executable, os.path.join(ROOT, "dev/length/report.py"), out, "--reps", "200"],
                       capture_output=True, text=True)
    text = r.stdout
    check(r.returncode == 0, "report.py runs on a fake folder (rc %d): %s" % (r.returncode, r.stderr[-500:]))
    check("(40 images a cell)" in text, "the images of a cell counted")
    check("| canvas112_zero | 112 | keep | 100.0 [100.0, 100.0] n=3 | 50.0 [" in text,
          "accuracy: fitted 100 (every image), zero 50, n = 3 seeds")
    check("| canvas112_zero | 112 | interp | +50.0 [" in text, "fitted - zero: +50 points, paired")
    check("| test | 28 | interp | +0.0 [+0.0, +0.0] n=3 |" in text, "at the training length the two agree")
    check("| canvas112_zero | 112 | keep | +0.0 [+0.0, +0.0] n=3 flat | -50.0 [" in text and "not flat" in text,
          "flat: fitted on the canvas as at 28 px (keep uses the 28-px reference), zero 50 points below")
    check("ViL - ViM" in text and "| canvas112_zero | 112 | interp | +25.0 [" in text and "n=3/2 |" in text,
          "ViL - ViM: +25 points with 3 and 2 seeds, for the variants both have")
    try:
        res = json.load(open(os.path.join(out, "sets_report.json")))
        flat = [f for f in res["flat"] if f["variant"] == "post_zero" and f["pos"] == "keep"]
        check(len(flat) == 1 and flat[0]["verdict"] == "not flat" and flat[0]["seeds"] == [0, 1, 2] and
              abs(flat[0]["ci"][0] + 0.5) < 1e-9 and res["reps"] == 200, "sets_report.json holds the numbers")
    except (OSError, ValueError, KeyError) as e:
        check(False, "sets_report.json reads: %s" % e)
    # deterministic: the same tables twice
    r2 = subprocess.run([sys.executable, os.path.join(ROOT, "dev/length/report.py"), out, "--reps", "200"],
                        capture_output=True, text=True)
    check(r2.stdout == text, "the report is the same on a second run")
    # the outcomes packed into one file (dev/length/pack.py) give the same tables alone
    packed = os.path.join(tmp, "packed")
    os.makedirs(packed)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "dev/length/pack.py"), out,
                        os.path.join(packed, "a.pack.json.gz")], capture_output=True, text=True)
    check(r.returncode == 0 and "20 evaluations, 1 id lists" in r.stdout, "pack.py: 20 evaluations (%s%s)" %
          (r.stdout, r.stderr[-300:]))
    r3 = subprocess.run([sys.executable, os.path.join(ROOT, "dev/length/report.py"), packed, "--reps", "200"],
                        capture_output=True, text=True)
    check(r3.returncode == 0 and r3.stdout == text, "report.py on the pack alone: the same tables")


# ---------------- dev/length/sets.sh end to end ----------------

def write_idx(d, prefix, n, side, classes, seed):
    rng = np.random.default_rng(seed)
    labels = (np.arange(n) % classes).astype(np.uint8)
    px = rng.integers(0, 60, (n, side, side)).astype(np.uint8)
    for i in range(n):  # a class-dependent bright block, so a model can learn something
        c = labels[i]
        px[i, 2 + 2 * c:6 + 2 * c, 3:side - 3] = 220
    with open(os.path.join(d, "%s-images-idx3-ubyte" % prefix), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, side, side) + px.tobytes())
    with open(os.path.join(d, "%s-labels-idx1-ubyte" % prefix), "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + labels.tobytes())


def test_references(tmp):
    """the flat criterion's reference per variant: a canvas-trained model against its 56-px canvas, a
    FixRes model against the test at its own size, the rest against the test at 28 px"""
    out = os.path.join(tmp, "refs")
    n = 40
    every, half = [True] * n, [i % 2 == 0 for i in range(n)]
    quarter = [i % 4 == 0 for i in range(n)]
    for s in (0, 1, 2):
        write_pred(os.path.join(out, "vil/sets/test.28/interp/base_s%d.csv" % s), every, gz=True)
        write_pred(os.path.join(out, "vil/sets/test.28/interp/fixres112_zero_s%d.csv" % s), quarter, gz=True)
        write_pred(os.path.join(out, "vil/sets/test.112/interp/base_s%d.csv" % s), quarter, gz=True)
        write_pred(os.path.join(out, "vil/sets/test.112/interp/fixres112_zero_s%d.csv" % s), every, gz=True)
        write_pred(os.path.join(out, "vil/sets/canvas56_zero.56/interp/canvas_s%d.csv" % s), every, gz=True)
        write_pred(os.path.join(out, "vil/sets/canvas56_zero.56/interp/base_s%d.csv" % s), quarter, gz=True)
        write_pred(os.path.join(out, "vil/sets/canvas112_zero.112/interp/canvas_s%d.csv" % s), half, gz=True)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "dev/length/report.py"), out, "--reps", "200"],
                       capture_output=True, text=True)
    text = r.stdout
    flat = text[text.find("less top-1 at the training length"):]
    check(r.returncode == 0 and "for the canvas-trained canvas56_zero at 56 px" in flat,
          "report.py names the references (rc %d): %s" % (r.returncode, r.stderr[-300:]))
    # columns: base, canvas, fixres112_zero
    check(re.search(r"\| canvas56_zero \| 56 \| interp \| -75\.0 \[[^]]*\] n=3 not flat \| - \| - \|", flat),
          "canvas56_zero: base 75 points below its test at 28 px; the canvas model's own reference: no row")
    check("| canvas112_zero | 112 | interp | - | -50.0 [" in flat,
          "canvas112_zero: the canvas model 50 points below its 56-px canvas")
    check(re.search(r"\| test \| 112 \| interp \| -75\.0 \[[^]]*\] n=3 not flat \| - \| - \|", flat),
          "test at 112 px: base 75 below 28 px; fixres112 is at its reference there")
    check(re.search(r"\| test \| 28 \| interp \| - \| - \| -75\.0 \[[^]]*\] n=3 not flat \|", flat),
          "test at 28 px: the reference of base, fixres112 75 points below its 112 px")


def test_runner(tmp):
    build = os.environ.get("VIL_BUILD", "build")
    vil, tool = os.path.join(ROOT, "bin/vil"), os.path.join(ROOT, build, "tools/length_sets")
    if not (os.access(vil, os.X_OK) and os.access(tool, os.X_OK)):
        print("  sets.sh: skipped (bin/vil or %s not built)" % tool)
        return
    data, out = os.path.join(tmp, "data"), os.path.join(tmp, "len")
    os.makedirs(data)
    write_idx(data, "train", 64, 16, 4, 1)
    write_idx(data, "t10k", 24, 16, 4, 2)
    r = subprocess.run([vil, "train", "--config", "configs/vil_fashion.cfg", "--data", data, "--device", "cpu",
                        "--out", os.path.join(out, "vil/base_s0"), "--quiet"] +
                       sum((["--set", kv] for kv in ("img_size=16", "patch_size=4", "stride=4", "embed_dim=16",
                                                      "depth=1", "num_classes=4", "max_steps=2", "batch=8",
                                                      "workers=1", "eval_every_epochs=0")), []),
                       cwd=ROOT, capture_output=True, text=True)
    check(r.returncode == 0, "a tiny model trains (rc %d): %s" % (r.returncode, r.stderr[-400:]))
    env = dict(os.environ, DATA=data, DEVICE="cpu", VIL=vil, LENGTH_SETS=tool, SIDES="2", JOBS="2",
               OMP_NUM_THREADS="1")
    cmd = ["sh", os.path.join(ROOT, "dev/length/sets.sh"), "vil", out]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    # per model: test at 16 (1) and 32 (2 pos), 6 canvases and 3 tilings (2 pos each), shrink, zoom2
    want = 1 + 2 + 2 * 6 + 2 * 3 + 2
    check(r.returncode == 0 and ("%d of %d evaluations" % (want, want)) in r.stdout,
          "sets.sh: every evaluation of one model (rc %d): %s %s" % (r.returncode, r.stdout[-300:], r.stderr[-300:]))
    for f in ("test.16/interp", "test.32/keep", "canvas64_noise.64/keep", "tile2.32/interp", "shrink.16/interp"):
        p = os.path.join(out, "vil/sets", f, "base_s0.csv.gz")
        rows = intervals.read_predictions(p) if os.path.exists(p) else {}
        check(sorted(rows) == list(range(24)), "%s: 24 images by their index" % f)
    check(not os.path.exists(os.path.join(out, "vil/sets/shrink.16/keep")), "at the training side one pos")
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    logs = sum(len(fs) for _, _, fs in os.walk(os.path.join(out, "vil/sets")))
    check(r.returncode == 0 and ("%d of %d" % (want, want)) in r.stdout, "a second run finds them done")
    r = subprocess.run(cmd, cwd=ROOT, env=dict(env, ONLY="tile2 shrink"), capture_output=True, text=True)
    check(r.returncode == 0 and "3 of 3 evaluations" in r.stdout, "ONLY: tile2 (2 pos) and shrink (1): %s" % r.stdout)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "dev/length/report.py"), out, "--reps", "100"],
                       capture_output=True, text=True)
    check(r.returncode == 0 and "| tile4 | 64 | keep |" in r.stdout and "(24 images a cell)" in r.stdout,
          "report.py reads sets.sh's folder (rc %d): %s" % (r.returncode, r.stderr[-300:]))
    check(logs == 3 * want, "each evaluation left its predictions, summary and log (%d files)" % logs)


# ---------------- the stream's and the readout's tables ----------------

def write_positions(path, tops, images, K=8):
    """a --positions-file JSON whose position p (1-based) has tops[p - 1] percent of `images`"""
    pos = [{"position": i + 1, "images": images, "top1": t, "loss": 0.5} for i, t in enumerate(tops)]
    with open(path, "w") as f:
        json.dump({"model": "m", "trained_length": K, "positions": pos}, f)


def test_stream_report(tmp):
    """dev/length/stream_report.py on runs whose accuracies are set by hand: its means, its
    differences and their intervals against the formula in its docstring, computed here"""
    out = os.path.join(tmp, "stream")
    ins = {"vil": [80.0, 82.0, 84.0], "vim": [79.0, 80.0, 84.0]}
    drops = {"vil": [-0.5, -1.0, -1.5], "vim": [-3.0, -2.5, -4.0]}
    for arch in ("vil", "vim"):
        for s in range(3):
            d = os.path.join(out, "zero_%s_s%d" % (arch, s))
            os.makedirs(d)
            a, b = ins[arch][s], ins[arch][s] + drops[arch][s]
            write_positions(os.path.join(d, "pos128.json"), [a] * 8 + [a - 0.25] * 112 + [b] * 8, 1250)
            write_positions(os.path.join(d, "pos256.json"), [a] * 8 + [a] * 240 + [b] * 8, 125)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "dev", "length", "stream_report.py"), out],
                       capture_output=True, text=True)
    check(r.returncode == 0, "stream_report.py exits 0: %s" % r.stderr[-300:])
    rows = {l.split("|")[1].strip(): [c.strip() for c in l.split("|")[2:-1]] for l in r.stdout.splitlines()
            if l.startswith("| Longhorn") or l.startswith("| Mamba") or l.startswith("| zero")}
    t2 = 4.303  # t(0.975, 2 df)
    for name, arch in (("Longhorn, zero", "vil"), ("Mamba, zero", "vim")):
        x = drops[arch]
        m = sum(x) / 3
        s2 = sum((v - m) ** 2 for v in x) / 2
        vimg = sum(1e4 * (b / 100) * (1 - b / 100) / 10000 + 1e4 * (a / 100) * (1 - a / 100) / 10000
                   for a, b in zip(ins[arch], [i + dd for i, dd in zip(ins[arch], x)])) / 3
        h = (t2 * t2 * s2 / 3 + 1.96 ** 2 * vimg) ** 0.5
        want = "%+.2f [%+.2f, %+.2f]" % (m, m - h, m + h)
        row = rows.get(name, [])
        check(len(row) == 7 and row[4] == want, "%s: last 8 of 128 minus 1-8 is %s (%s)" % (name, want, row))
        check(len(row) == 7 and row[1] == "%.2f ± %.2f" % (sum(ins[arch]) / 3, (sum((v - sum(ins[arch]) / 3) ** 2 for v in ins[arch]) / 2) ** 0.5),
              "%s: the in-length mean and sd (%s)" % (name, row))
        verdict = "flat" if m - h > -2 else ("not flat" if m + h < -2 else "undecided")
        check(len(row) == 7 and row[6] == verdict, "%s: verdict %s (%s)" % (name, verdict, row))
    check("zero" in rows and rows["zero"][0].startswith("%+.2f" % (sum(ins["vil"]) / 3 - sum(ins["vim"]) / 3)),
          "ViL - ViM in length: the difference of the means (%s)" % rows.get("zero"))


def test_states_report(tmp):
    """dev/length/states_report.py: the mean and sd over seeds of each run's distance_mean"""
    out = os.path.join(tmp, "states")
    vals = {"test112": [10.0, 12.0, 14.0], "canvas112_zero": [20.0, 30.0, 25.0]}
    for cond, v in vals.items():
        for s, x in enumerate(v):
            d = os.path.join(out, "vil", "states", "base_s%d" % s, cond)
            os.makedirs(d)
            with open(os.path.join(d, "states.json"), "w") as f:
                json.dump({"readout": {"token": 24, "distance_mean": x}}, f)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "dev", "length", "states_report.py"), out],
                       capture_output=True, text=True)
    line = [l for l in r.stdout.splitlines() if l.startswith("| vil base")]
    cells = [c.strip() for c in line[0].split("|")[2:-1]] if line else []
    check(r.returncode == 0 and cells == ["-", "12.0 ± 2.0 (n=3)", "-", "25.0 ± 5.0 (n=3)"],
          "states_report.py: test112 12.0 ± 2.0, canvas 25.0 ± 5.0, the others empty: %s %s" % (cells, r.stderr[-200:]))


def main():
    tmp = tempfile.mkdtemp(prefix="vil_length_report_")
    try:
        test_coverage()
        test_width_and_pairing()
        test_determinism_and_edges()
        test_report(tmp)
        test_references(tmp)
        test_runner(tmp)
        test_stream_report(tmp)
        test_states_report(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

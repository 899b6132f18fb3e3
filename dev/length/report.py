#!/usr/bin/env python3
"""dev/length/report.py OUT [--reps N] [--boot-seed S]: the table of dev/length/run.sh's results
(OUT/{vil,vim}/compare*/compare.csv, every eval stage's TAG merged): test top-1 at each size as
mean +- sd over the seeds, per model and variant, as Markdown on stdout, and OUT/length.svg: one
panel per family, mean top-1 against image size, one line per variant. Then, where
dev/length/sets.sh has run (OUT/{vil,vim}/sets/, or its outcomes packed by dev/length/pack.py
into OUT/*.pack.json.gz), the one-factor sets' tables with 95% bootstrap
intervals (dev/length/intervals.py: accuracy, each post-training against its control, the flat
criterion, ViL against ViM; --reps replicates, default 2000, drawn from --boot-seed, default 0),
their numbers also in OUT/sets_report.json. Python's standard library, and numpy for the
intervals (an analysis script, not part of vil)."""
import argparse
import csv
import glob
import json
import os
import re
import statistics
import sys

VARIANTS = ["base", "post_zero", "post_noise", "post_fitted", "post_passing", "scratch_passing"]
LABEL = {"base": "trained at 28 px (zero start)", "post_zero": "+500 steps, zero start (control)",
         "post_noise": "+500 steps, noise", "post_fitted": "+500 steps, fitted noise",
         "post_passing": "+500 steps, state passing", "scratch_passing": "state passing from scratch"}
COLORS = ["#1f77b4", "#7f7f7f", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"]


def load(path):
    acc = {}  # (variant, size) -> [top1 per seed]
    with open(path) as f:
        for r in csv.DictReader(f):
            if r["error"]:
                continue
            m = re.search(r"/([a-z_]+)_s(\d+)/last\.safetensors$", r["file"])
            if not m:
                continue
            acc.setdefault((m.group(1), int(r["img_size"])), []).append(float(r["top1"]))
    return acc


def main():
    ap = argparse.ArgumentParser(description="the tables and charts of dev/length/run.sh and sets.sh")
    ap.add_argument("out", nargs="?", default="out/length")
    ap.add_argument("--reps", type=int, default=2000, help="bootstrap replicates of the intervals")
    ap.add_argument("--boot-seed", type=int, default=0, help="the seed of the bootstrap's draws")
    args = ap.parse_args()
    compare_report(args.out)
    if any(os.path.isdir(os.path.join(args.out, f, "sets")) for f in ("vil", "vim")) or \
            any(f.endswith(".pack.json.gz") for f in os.listdir(args.out)):
        sets(args.out, args.reps, args.boot_seed)


def sets(out, reps, seed):
    """the one-factor sets' tables with intervals, and OUT/sets_report.json"""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import intervals
    lines, res = intervals.sets_report(out, reps, seed)
    print("\n" + "\n".join(lines))
    with open(os.path.join(out, "sets_report.json"), "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")


def compare_report(out):
    panels = []
    for fam in ("vil", "vim"):
        paths = sorted(glob.glob(os.path.join(out, fam, "compare*", "compare.csv")))
        if not paths:
            continue
        acc = {}
        for p in paths:
            for k, v in load(p).items():
                acc.setdefault(k, []).extend(v)
        sizes = sorted({s for (_, s) in acc})
        print("\n%s (test top-1 %%, mean +- sd over seeds; n = seeds)\n" % ("ViL" if fam == "vil" else "ViM"))
        print("| variant | " + " | ".join("%d px" % s for s in sizes) + " |")
        print("|---|" + "---|" * len(sizes))
        lines = []
        for v in VARIANTS:
            cells, ys = [], []
            for s in sizes:
                x = acc.get((v, s), [])
                if not x:
                    cells.append("-")
                    ys.append(None)
                    continue
                sd = statistics.stdev(x) if len(x) > 1 else 0.0
                cells.append("%.2f +- %.2f (n=%d)" % (statistics.mean(x), sd, len(x)))
                ys.append(statistics.mean(x))
            if any(y is not None for y in ys):
                print("| %s | %s |" % (LABEL[v], " | ".join(cells)))
                lines.append((v, ys))
        panels.append((fam, sizes, lines))
    if panels:
        svg(os.path.join(out, "length.svg"), panels)
    states_svg(out, os.path.join(out, "length_states.svg"))


def legend(parts, lx, top):
    """the variants' colours and labels at x = lx, then the end of the document"""
    for i, v in enumerate(VARIANTS):
        parts.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"/>'
                     % (lx, lx + 20, top + 10 + 18 * i, top + 10 + 18 * i, COLORS[i]))
        parts.append('<text x="%d" y="%d">%s</text>' % (lx + 25, top + 14 + 18 * i, LABEL[v]))
    parts.append("</svg>")


def svg(path, panels):
    W, H, L, T, PW, PH = 420, 300, 60, 40, 300, 200
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
             'font-size="11">' % (W * len(panels) + 260, H)]
    for k, (fam, sizes, lines) in enumerate(panels):
        ox = k * W + L
        ys = [y for _, yy in lines for y in yy if y is not None]
        if not ys:
            continue
        lo, hi = min(ys), max(ys)
        lo, hi = max(0.0, lo - 2), min(100.0, hi + 2)
        sx = lambda s: ox + (s - sizes[0]) / max(1, sizes[-1] - sizes[0]) * PW
        sy = lambda y: T + PH - (y - lo) / (hi - lo) * PH
        parts.append('<text x="%d" y="20" font-weight="bold">%s: test top-1 against image size</text>'
                     % (ox, "ViL" if fam == "vil" else "ViM"))
        parts.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>' % (ox, T, PW, PH))
        for s in sizes:
            parts.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (sx(s), T + PH + 15, s))
        for i in range(5):
            y = lo + (hi - lo) * i / 4
            parts.append('<text x="%d" y="%.1f" text-anchor="end">%.0f</text>' % (ox - 5, sy(y) + 4, y))
            parts.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>' % (ox, ox + PW, sy(y), sy(y)))
        parts.append('<text x="%d" y="%d" text-anchor="middle">image size (px; trained at 28)</text>'
                     % (ox + PW // 2, T + PH + 32))
        for v, yy in lines:
            c = COLORS[VARIANTS.index(v)]
            pts = " ".join("%.1f,%.1f" % (sx(s), sy(y)) for s, y in zip(sizes, yy) if y is not None)
            parts.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>' % (pts, c))
            for s, y in zip(sizes, yy):
                if y is not None:
                    parts.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>' % (sx(s), sy(y), c))
    legend(parts, W * len(panels) + 10, T)
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def states_svg(out, path):
    """OUT/{vil,vim}/states_V_112/states.json (vil states at 112 px): the state norm averaged over
    layers and directions against the scan step, one line per variant, one panel per family; the
    training length marked"""
    W, T, PW, PH, L = 420, 40, 300, 200, 60
    panels = []
    for fam in ("vil", "vim"):
        lines, lt, n = [], None, 0
        for v in VARIANTS:
            p = os.path.join(out, fam, "states_%s_112" % v, "states.json")
            if not os.path.exists(p):
                continue
            j = json.load(open(p))
            n, lt = j["tokens"], j.get("train_tokens")
            mean = [statistics.mean(l["mean_norm"][s] for l in j["layers"]) for s in range(n)]
            step = max(1, n // 300)
            lines.append((v, [(s + 1, mean[s]) for s in range(0, n, step)] + [(n, mean[-1])]))
        if lines:
            panels.append((fam, n, lt, lines))
    if not panels:
        return
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="300" font-family="sans-serif" '
             'font-size="11">' % (W * len(panels) + 260)]
    for k, (fam, n, lt, lines) in enumerate(panels):
        ox = k * W + L
        hi = max(y for _, pts in lines for _, y in pts) * 1.05
        sx = lambda s: ox + (s - 1) / max(1, n - 1) * PW
        sy = lambda y: T + PH - y / hi * PH
        parts.append('<text x="%d" y="20" font-weight="bold">%s at 112 px: mean state norm, all layers</text>'
                     % (ox, "ViL" if fam == "vil" else "ViM"))
        parts.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>' % (ox, T, PW, PH))
        for i in range(5):
            y = hi * i / 4
            parts.append('<text x="%d" y="%.1f" text-anchor="end">%.0f</text>' % (ox - 5, sy(y) + 4, y))
        for s in (1, n // 2, n):
            parts.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (sx(s), T + PH + 15, s))
        parts.append('<text x="%d" y="%d" text-anchor="middle">scan step (tokens read)</text>' % (ox + PW // 2, T + PH + 32))
        if lt:
            parts.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#555" stroke-dasharray="4,3"/>'
                         % (sx(lt), sx(lt), T, T + PH))
            parts.append('<text x="%.1f" y="%d">trained: %d</text>' % (sx(lt) + 3, T + 12, lt))
        for v, pts in lines:
            c = COLORS[VARIANTS.index(v)]
            parts.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5"/>'
                         % (" ".join("%.1f,%.1f" % (sx(s), sy(y)) for s, y in pts), c))
    legend(parts, W * len(panels) + 10, T)
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


if __name__ == "__main__":
    main()

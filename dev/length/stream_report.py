#!/usr/bin/env python3
"""dev/length/stream_report.py [OUT]: dev/length/stream.sh's table (Markdown on stdout, the numbers in
OUT/stream_report.json). The stream experiment's table: per recurrence and variant, top-1 in the trained length
(positions 1-8), over the last 8 of 128 (16x) and of 256 (32x), each beyond-length accuracy minus
the in-length one per seed, and 95% intervals: mean +- sqrt(t(n-1)^2 s^2/n + 1.96^2 v_img), where s is
the seeds' sd of the difference and v_img the binomial variance of the difference from the images,
not divided by the seeds (the same evaluation streams for every model, so the seeds' spread does
not hold it, and it does not average out over them; the two spans' images counted as independent,
which overstates it where they are the same images); ViL - ViM
unpaired (Welch-like: both seed variances and both image variances added)."""
import glob, json, math, os, sys
from collections import defaultdict

T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
root = sys.argv[1] if len(sys.argv) > 1 else "out/stream"

def span(j, lo, hi):
    n = sum(p["images"] for p in j["positions"] if lo <= p["position"] <= hi)
    c = sum(p["images"] * p["top1"] / 100 for p in j["positions"] if lo <= p["position"] <= hi)
    return 100 * c / n, n

runs = defaultdict(dict)
for d in sorted(glob.glob(os.path.join(root, "*_s[0-9]*"))):
    if not os.path.isdir(d) or not os.path.exists(os.path.join(d, "pos256.json")):
        continue
    name = os.path.basename(d)
    var, arch, seed = name.rsplit("_", 2)
    j128 = json.load(open(os.path.join(d, "pos128.json")))
    j256 = json.load(open(os.path.join(d, "pos256.json")))
    K = j128["trained_length"]
    runs[(var, arch)][int(seed[1:])] = {
        "in": span(j128, 1, K), "b128": span(j128, K + 1, 128), "l128": span(j128, 121, 128), "n128": (j128["positions"][0]["images"], 0),
        "in256": span(j256, 1, K), "l256": span(j256, 249, 256), "b256": span(j256, K + 1, 256)}

def binvar(acc, n):
    p = acc / 100
    return 1e4 * p * (1 - p) / n

def interval(diffs, vimg):
    n = len(diffs)
    m = sum(diffs) / n
    s2 = sum((x - m) ** 2 for x in diffs) / (n - 1) if n > 1 else float("nan")
    half = math.sqrt(T975.get(n - 1, 2.0) ** 2 * s2 / n + 1.96 ** 2 * vimg) if n > 1 else float("nan")
    return m, half, s2

out = {}
print("| recurrence, variant | seeds | 1-8 (trained) | last 8 of 128 (16x) | last 8 of 256 (32x) | last 8 of 128 minus 1-8 [95%] | last 8 of 256 minus 1-8 [95%] | verdict at 16x |")
print("|---|---|---|---|---|---|---|---|")
for (var, arch), by in sorted(runs.items(), key=lambda kv: (kv[0][0] != "zero", kv[0][0], kv[0][1])):
    seeds = sorted(by)
    row = {}
    cells = []
    for key, ref in (("l128", "in"), ("l256", "in256")):
        diffs = [by[s][key][0] - by[s][ref][0] for s in seeds]
        vimg = sum(binvar(by[s][key][0], by[s][key][1]) + binvar(by[s][ref][0], by[s][ref][1]) for s in seeds) / len(seeds)
        m, h, _ = interval(diffs, vimg)
        row[key] = (m, h, diffs)
        cells.append("%+.2f [%+.2f, %+.2f]" % (m, m - h, m + h))
    mean = lambda k: sum(by[s][k][0] for s in seeds) / len(seeds)
    sd = lambda k: (sum((by[s][k][0] - mean(k)) ** 2 for s in seeds) / max(len(seeds) - 1, 1)) ** 0.5
    m, h, _ = row["l128"]
    verdict = "flat" if m - h > -2 else ("not flat" if m + h < -2 else "undecided")
    print("| %s, %s | %d | %.2f ± %.2f | %.2f ± %.2f | %.2f ± %.2f | %s | %s | %s |" % (
        {"vil": "Longhorn", "vim": "Mamba"}[arch], var, len(seeds), mean("in"), sd("in"), mean("l128"), sd("l128"),
        mean("l256"), sd("l256"), cells[0], cells[1], verdict))
    out["%s_%s" % (var, arch)] = {"seeds": seeds, "per_seed": {str(s): {k: v[0] for k, v in by[s].items()} for s in seeds},
                                  "l128_minus_in": row["l128"][:2], "l256_minus_in": row["l256"][:2]}

print()
print("| variant | ViL - ViM, 1-8 [95%] | ViL - ViM, last 8 of 128 [95%] | ViL - ViM, last 8 of 256 [95%] | ViL's drop at 16x - ViM's [95%] |")
print("|---|---|---|---|---|")
for var in sorted({v for v, _ in runs}):
    a, b = runs.get((var, "vil")), runs.get((var, "vim"))
    if not a or not b or len(a) < 2 or len(b) < 2:
        continue
    cells = []
    for key in ("in", "l128", "l256", "drop"):
        val = lambda r, k: r["l128"][0] - r["in"][0] if k == "drop" else r[k][0]
        xa = [val(a[s], key) for s in a]; xb = [val(b[s], key) for s in b]
        ma, mb = sum(xa) / len(xa), sum(xb) / len(xb)
        va = sum((x - ma) ** 2 for x in xa) / (len(xa) - 1); vb = sum((x - mb) ** 2 for x in xb) / (len(xb) - 1)
        parts = ("l128", "in") if key == "drop" else (key,)
        vimg = sum(sum(binvar(r[s][k][0], r[s][k][1]) for k in parts) / len(r) for r in (a, b) for s in r)
        se2 = va / len(xa) + vb / len(xb)
        df = se2 ** 2 / ((va / len(xa)) ** 2 / (len(xa) - 1) + (vb / len(xb)) ** 2 / (len(xb) - 1)) if se2 > 0 else 8
        t = T975.get(max(1, min(9, int(df))), 2.0)
        h = math.sqrt(t * t * se2 + 1.96 ** 2 * vimg)
        cells.append("%+.2f [%+.2f, %+.2f]" % (ma - mb, ma - mb - h, ma - mb + h))
    print("| %s | %s |" % (var, " | ".join(cells)))
json.dump(out, open(os.path.join(root, "stream_report.json"), "w"), indent=1)

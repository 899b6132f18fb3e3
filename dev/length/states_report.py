#!/usr/bin/env python3
"""dev/length/states_report.py OUT: the readout distances of dev/length/cpu.sh (`vil states
--readout-ref`, OUT/<arch>/states/<variant>_s<seed>/<condition>/states.json) as a Markdown table:
per variant and condition, each image's distance averaged over layers and directions, then its
mean over the images, mean ± sd over the seeds (1 is the training size's own spread)."""
import glob, json, os, statistics, sys
from collections import defaultdict

out = sys.argv[1] if len(sys.argv) > 1 else "out/length_cpu"
CONDS = ["test56", "test112", "tile4", "canvas112_zero"]
d = defaultdict(list)
for f in sorted(glob.glob(os.path.join(out, "*", "states", "*_s[0-9]*", "*", "states.json"))):
    parts = f.split(os.sep)
    arch, run, cond = parts[-5], parts[-3], parts[-2]
    ro = json.load(open(f)).get("readout", {})
    if "distance_mean" in ro:
        d[(arch, run.rsplit("_s", 1)[0], cond)].append(ro["distance_mean"])
rows = sorted({(a, v) for a, v, _ in d})
print("| model | " + " | ".join(CONDS) + " |")
print("|---|" + "---|" * len(CONDS))
for a, v in rows:
    cells = []
    for c in CONDS:
        x = d.get((a, v, c), [])
        cells.append("%.1f ± %.1f (n=%d)" % (statistics.mean(x), statistics.stdev(x) if len(x) > 1 else 0, len(x)) if x else "-")
    print("| %s %s | %s |" % (a, v, " | ".join(cells)))

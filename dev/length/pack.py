#!/usr/bin/env python3
"""dev/length/pack.py OUT FILE.pack.json.gz: the per-image outcomes of dev/length/sets.sh's
evaluations (OUT/{vil,vim}/sets/<set>.<side>/<pos>/<variant>_s<seed>.csv.gz) in one small file,
for bringing back from a machine whose results must travel in a few files: each evaluation's
right (1) and wrong (0) as a string in the order of its image ids, the id lists stored once. About
1.5 KB per evaluation of 10,000 images against ~110 KB for its predictions file. dev/length/report.py
reads OUT/*.pack.json.gz beside (or instead of) the folders. Python's standard library only."""
import gzip
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from intervals import PRED, read_predictions  # noqa: E402

FORMAT, VERSION = "vil-length-sets-pack", 1


def pack(out):
    """{"format", "version", "ids": [id lists], "cells": {"fam/cond/pos/variant_sN": [id list index, "0110.."]}}"""
    ids, index, cells = [], {}, {}
    for fam in ("vil", "vim"):
        root = os.path.join(out, fam, "sets")
        if not os.path.isdir(root):
            continue
        for dirpath, _, files in sorted(os.walk(root)):
            for f in sorted(files):
                m = PRED.match(f)
                if not m:
                    continue
                rows = read_predictions(os.path.join(dirpath, f))
                order = sorted(rows, key=lambda x: (isinstance(x, str), x))
                key = tuple(order)
                if key not in index:
                    index[key] = len(ids)
                    ids.append(order)
                rel = os.path.relpath(dirpath, os.path.join(out, fam, "sets")).replace(os.sep, "/")
                name = "%s/%s/%s_s%s" % (fam, rel, m.group("variant"), m.group("seed"))
                cells[name] = [index[key], "".join("1" if rows[i] else "0" for i in order)]
    return {"format": FORMAT, "version": VERSION, "ids": ids, "cells": cells}


def main():
    if len(sys.argv) != 3 or not sys.argv[2].endswith(".pack.json.gz"):
        sys.exit("usage: pack.py OUT FILE.pack.json.gz")
    p = pack(sys.argv[1])
    data = json.dumps(p, separators=(",", ":")).encode()
    tmp = sys.argv[2] + ".tmp"
    with gzip.GzipFile(tmp, "wb", mtime=0) as f:
        f.write(data)
    os.replace(tmp, sys.argv[2])
    print("pack.py: %d evaluations, %d id lists -> %s (%d bytes)" % (len(p["cells"]), len(p["ids"]), sys.argv[2],
                                                                  os.path.getsize(sys.argv[2])))


if __name__ == "__main__":
    main()

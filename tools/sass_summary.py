#!/usr/bin/env python3
"""sass_summary.py: read Nsight Compute's source page as CSV (dev/cuda/sass_profile.sh) and print,
per profiled kernel launch, its executed warp instructions by opcode; with --per N also divided by
N (e.g. the warp-steps of the launch: batch x tokens x channels / 32, per direction run), and with
--hot COUNT the SASS lines executed at least COUNT times, in program order; with --groups K the K
largest groups of lines by execution count (lines run the same number of times are one loop level:
per step, per sub-chunk, per staging round), each with its line count, its share and its opcodes,
which tells how much of a kernel is per-step work and how much is overhead around it.
  python3 tools/sass_summary.py out/src_adjoint_4097_32_0.csv [--kernel I] [--per N] [--hot COUNT] [--groups K]"""
import argparse
import collections
import csv


def read(path):
    """[(kernel name, header, rows)] in the file's order"""
    out, hdr = [], None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if row and row[0] == "Kernel Name":
                out.append([row[1], None, []])
            elif row and row[0] == "Address":
                hdr = row
                if out:
                    out[-1][1] = hdr
            elif out and len(row) > 5:
                out[-1][2].append(row)
    return out


def count(row, col):
    try:
        return int(row[col].replace(",", "") or 0)
    except ValueError:
        return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--kernel", type=int, default=-1, help="only the I-th launch in the file (0-based)")
    ap.add_argument("--per", type=float, default=0, help="also print each count divided by this")
    ap.add_argument("--hot", type=int, default=0, help="list the lines executed at least this often")
    ap.add_argument("--top", type=int, default=25, help="opcodes to list")
    ap.add_argument("--groups", type=int, default=0, help="list the K largest groups of lines by execution count")
    a = ap.parse_args()
    seen = set()
    for i, (name, hdr, rows) in enumerate(read(a.csv)):
        if a.kernel >= 0 and i != a.kernel:
            continue
        ix, src = hdr.index("Instructions Executed"), hdr.index("Source")
        by, tot = collections.Counter(), 0
        for row in rows:
            n = count(row, ix)
            ops = [w for w in row[src].split() if not w.startswith("@")]
            by[ops[0].split(".")[0] if ops else "?"] += n
            tot += n
        if a.kernel < 0 and (name, tot, len(rows)) in seen:
            continue  # the page repeats a launch's section; identical launches are shown once
        seen.add((name, tot, len(rows)))
        print(f"[{i}] {name}: {len(rows)} SASS lines, {tot:,} warp instructions"
              + (f", {tot / a.per:.1f} per unit" if a.per else ""))
        for op, n in by.most_common(a.top):
            print(f"    {op:10s} {n:15,d} {100 * n / max(tot, 1):5.1f}%" + (f" {n / a.per:8.1f}" if a.per else ""))
        if a.groups:
            lines, insts, ops = collections.Counter(), collections.Counter(), collections.defaultdict(collections.Counter)
            for row in rows:
                n = count(row, ix)
                if n:
                    w = [x for x in row[src].split() if not x.startswith("@")]
                    lines[n] += 1
                    insts[n] += n
                    ops[n][w[0].split(".")[0] if w else "?"] += 1
            print(f"    groups of lines by execution count (top {a.groups}):")
            for n, v in insts.most_common(a.groups):
                per = f", {v / a.per:.1f} per unit" if a.per else ""
                top = " ".join(f"{o} {c}" for o, c in ops[n].most_common(10))
                print(f"    {n:13,d} x {lines[n]:5d} lines = {100 * v / max(tot, 1):5.1f}%{per}: {top}")
        if a.hot:
            st = hdr.index("Warp Stall Sampling (All Samples)")
            for j, row in enumerate(rows):
                if count(row, ix) >= a.hot:
                    print(f"    {j:5d} {count(row, ix):13,d} {row[st]:>6s}  {row[src]}")


if __name__ == "__main__":
    main()

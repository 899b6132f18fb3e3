#!/usr/bin/env python3
"""sass_summary.py: read Nsight Compute's source page as CSV (dev/cuda/sass_profile.sh) and print,
per profiled kernel launch, its executed warp instructions by opcode; with --per N also divided by
N (e.g. the warp-steps of the launch: batch x tokens x channels / 32, per direction run), and with
--hot COUNT the SASS lines executed at least COUNT times, in program order.
  python3 tools/sass_summary.py out/src_adjoint_4097_32_0.csv [--kernel I] [--per N] [--hot COUNT]"""
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
        if a.hot:
            st = hdr.index("Warp Stall Sampling (All Samples)")
            for j, row in enumerate(rows):
                if count(row, ix) >= a.hot:
                    print(f"    {j:5d} {count(row, ix):13,d} {row[st]:>6s}  {row[src]}")


if __name__ == "__main__":
    main()
